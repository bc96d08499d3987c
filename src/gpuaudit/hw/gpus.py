"""Reading every GPU fact NVML gives into `Gpu` and `Link` records.

Works on any `NvmlSource`: the live library, or a recorded trace in tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, TypeVar, overload

from gpuaudit.model import (
    Clocks,
    Ecc,
    Gpu,
    GpuProcess,
    Link,
    LinkKind,
    MigInstance,
    NvLink,
    PcieLink,
    Power,
    RemappedRows,
    RetiredPages,
    Thermal,
)

from . import decode as d
from .nvml import FIELD_VALUES, NOT_RECORDED, READ_FILE, Dev, NvmlSource, Unsupported

T = TypeVar("T")


def _same(v: Any) -> Any:
    return v


def _mw_to_w(v: int) -> float:
    return v / 1000.0


class Reader:
    """Runs queries and keeps, per field, the reason a reading is missing."""

    def __init__(self, src: NvmlSource) -> None:
        self.src = src
        self.unavailable: dict[str, str] = {}

    @overload
    def get(self, fld: str, fn: str, *args: Any) -> Any: ...
    @overload
    def get(self, fld: str, fn: str, *args: Any, convert: Callable[[Any], T]) -> T | None: ...

    def get(self, fld: str, fn: str, *args: Any, convert: Callable[[Any], Any] = _same) -> Any:
        """NVML's answer to `fn(*args)` (through `convert`), or None with the reason kept under
        `fld` in `unavailable`."""
        try:
            return convert(self.src.query(fn, *args))
        except Unsupported as exc:
            # A trace lacking a fallback query must not hide the real reason given before.
            if exc.reason != NOT_RECORDED or fld not in self.unavailable:
                self.unavailable[fld] = exc.reason
            return None

    @overload
    def first(self, fld: str, calls: list[tuple[str, tuple[Any, ...]]]) -> Any: ...
    @overload
    def first(self, fld: str, calls: list[tuple[str, tuple[Any, ...]]],
              convert: Callable[[Any], T]) -> T | None: ...

    def first(self, fld: str, calls: list[tuple[str, tuple[Any, ...]]],
              convert: Callable[[Any], Any] = _same) -> Any:
        """The first of several equivalent calls that answers (newer NVML names first)."""
        reasons = []
        for fn, args in calls:
            try:
                return convert(self.src.query(fn, *args))
            except Unsupported as exc:
                reasons.append(exc.reason)
        # The last real answer explains best; a trace that lacks a newer call says nothing.
        real = [reason for reason in reasons if reason != NOT_RECORDED]
        self.unavailable[fld] = real[-1] if real else NOT_RECORDED
        return None


@dataclass(frozen=True)
class NvmlFacts:
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    nvml_version: str | None = None
    gpus: tuple[Gpu, ...] = ()
    links: tuple[Link, ...] = ()
    unavailable: dict[str, str] = field(default_factory=dict)


def read_nvml(src: NvmlSource) -> NvmlFacts:
    r = Reader(src)
    count = r.get("gpu_count", "nvmlDeviceGetCount") or 0
    gpus = tuple(read_gpu(src, i) for i in range(count))
    return NvmlFacts(
        driver_version=r.get("driver_version", "nvmlSystemGetDriverVersion"),
        cuda_driver_version=r.get("cuda_driver_version", "nvmlSystemGetCudaDriverVersion_v2",
                                  convert=d.cuda_version),
        nvml_version=r.get("nvml_version", "nvmlSystemGetNVMLVersion"),
        gpus=gpus,
        links=read_links(src, gpus),
        unavailable=r.unavailable,
    )


def _not_answering(r: Reader, h: Dev) -> Gpu | None:
    """The GPU as a lost one when it answers none of the queries every GPU answers (its name
    has already failed); None when it answers some. A trace that simply lacks the queries
    says nothing about the GPU."""
    for fld, fn in (("uuid", "nvmlDeviceGetUUID"), ("memory_total_bytes",
                                                    "nvmlDeviceGetMemoryInfo")):
        if r.get(fld, fn, h) is not None or r.unavailable[fld] == NOT_RECORDED:
            return None
    reason = r.unavailable["name"]
    return Gpu(index=h.index, name="unknown", error=reason, unavailable=r.unavailable)


def read_gpu(src: NvmlSource, index: int) -> Gpu:
    r = Reader(src)
    h = Dev(index)
    name = r.get("name", "nvmlDeviceGetName", h)
    if name is None and r.unavailable["name"] != NOT_RECORDED:
        lost = _not_answering(r, h)
        if lost is not None:
            return lost  # every further query would fail the same way, slowly
    pci = r.get("pci_bus_id", "nvmlDeviceGetPciInfo_v3", h) or {}
    cc = r.get("compute_capability", "nvmlDeviceGetCudaComputeCapability", h)
    mem = r.get("memory_total_bytes", "nvmlDeviceGetMemoryInfo", h)
    if mem is None:
        r.unavailable["memory_used_bytes"] = r.unavailable["memory_total_bytes"]
    mig = r.get("mig_enabled", "nvmlDeviceGetMigMode", h)
    if mig is None:
        r.unavailable["mig_pending"] = r.unavailable["mig_enabled"]
    util = r.get("utilization_gpu_pct", "nvmlDeviceGetUtilizationRates", h)
    if util is None:
        r.unavailable["utilization_memory_pct"] = r.unavailable["utilization_gpu_pct"]
    attrs = r.get("multiprocessor_count", "nvmlDeviceGetAttributes_v2", h)
    gpm = r.get("gpm_supported", "nvmlGpmQueryDeviceSupport", h)
    fabric = r.get("fabric_state", "nvmlDeviceGetGpuFabricInfo", h)
    if fabric is None:
        r.unavailable["fabric_ok"] = r.unavailable["fabric_state"]
    device_id = pci.get("pciDeviceId")
    return Gpu(
        index=index,
        name=name or "unknown",
        uuid=r.get("uuid", "nvmlDeviceGetUUID", h),
        serial=r.get("serial", "nvmlDeviceGetSerial", h),
        board_part_number=r.get("board_part_number", "nvmlDeviceGetBoardPartNumber", h),
        pci_bus_id=d.normalise_bus_id(pci["busId"]) if pci.get("busId") else None,
        pci_device_id=device_id >> 16 if device_id is not None else None,
        pci_subsystem_id=pci.get("pciSubSystemId"),
        architecture=r.get("architecture", "nvmlDeviceGetArchitecture", h,
                           convert=lambda v: d.ARCHITECTURES.get(v, f"unknown_{v}")),
        compute_capability=f"{cc[0]}.{cc[1]}" if cc else None,
        multiprocessor_count=attrs.get("multiprocessorCount") if attrs else None,
        memory_total_bytes=mem["total"] if mem else None,
        memory_used_bytes=mem["used"] if mem else None,
        vbios_version=r.get("vbios_version", "nvmlDeviceGetVbiosVersion", h),
        virtualization_mode=r.get("virtualization_mode", "nvmlDeviceGetVirtualizationMode", h,
                                  convert=lambda v: d.VIRTUALIZATION_MODES.get(v, f"mode_{v}")),
        mig_enabled=bool(mig[0]) if mig else None,
        mig_pending=bool(mig[1]) if mig else None,
        mig_instances=_mig_instances(r, index) if mig and mig[0] else (),
        compute_mode=r.get("compute_mode", "nvmlDeviceGetComputeMode", h,
                           convert=lambda v: d.COMPUTE_MODES.get(v, f"mode_{v}")),
        persistence_mode=r.get("persistence_mode", "nvmlDeviceGetPersistenceMode", h,
                               convert=bool),
        utilization_gpu_pct=util["gpu"] if util else None,
        utilization_memory_pct=util["memory"] if util else None,
        pcie=_pcie(r, h),
        clocks=_clocks(r, h),
        power=_power(r, h),
        thermal=_thermal(r, h),
        ecc=_ecc(r, h),
        remapped_rows=_remapped_rows(r, h),
        retired_pages=_retired_pages(r, h),
        nvlinks=_nvlinks(r, h),
        numa_node=_numa_node(r, h, pci.get("busId")),
        cpu_affinity=r.get("cpu_affinity", "nvmlDeviceGetCpuAffinity", h, d.CPU_SET_WORDS,
                           convert=d.cpu_list),
        processes=_processes(r, h),
        gpm_supported=bool(gpm["isSupportedDevice"]) if gpm else None,
        fabric_state=d.FABRIC_STATES.get(fabric["state"], f"state_{fabric['state']}")
        if fabric else None,
        fabric_ok=fabric["status"] == 0 if fabric else None,
        inforom_valid=_inforom_valid(r, h),
        recovery_action=_recovery_action(r, h),
        unavailable=r.unavailable,
    )


def _inforom_valid(r: Reader, h: Dev) -> bool | None:
    """True when NVML validates the InfoROM (the board's store of ECC counts, retired pages,
    power settings), False when it reports it corrupted."""
    valid = r.get("inforom_valid", "nvmlDeviceValidateInforom", h, convert=lambda _: True)
    if valid is None and "corrupt" in r.unavailable["inforom_valid"].lower():
        r.unavailable.pop("inforom_valid")
        return False
    return valid


def _recovery_action(r: Reader, h: Dev) -> str | None:
    got = r.get("recovery_action", FIELD_VALUES, h, f"{d.FI_GPU_RECOVERY_ACTION}:0")
    entry = got[0] if got else None
    if entry is None:
        return None
    if "value" not in entry:
        r.unavailable["recovery_action"] = entry.get("error") or "no value"
        return None
    value = int(entry["value"])
    return d.RECOVERY_ACTIONS.get(value, f"action_{value}")


def _numa_node(r: Reader, h: Dev, bus_id: str | None) -> int | None:
    """NVML's answer, else the kernel's (sysfs), as nvidia-smi topo does; -1 means none."""
    node: int | None = r.get("numa_node", "nvmlDeviceGetNumaNodeId", h)
    if node is None and bus_id:
        path = f"/sys/bus/pci/devices/{d.normalise_bus_id(bus_id)}/numa_node"
        node = r.get("numa_node", READ_FILE, path, convert=int)
    if node is not None and node < 0:
        r.unavailable["numa_node"] = "the platform reports no NUMA node for this GPU"
        return None
    if node is not None:
        r.unavailable.pop("numa_node", None)
    return node


def _pcie(r: Reader, h: Dev) -> PcieLink:
    return PcieLink(
        gen_current=r.get("pcie.gen_current", "nvmlDeviceGetCurrPcieLinkGeneration", h),
        gen_max=r.get("pcie.gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", h),
        gen_gpu_max=r.get("pcie.gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration", h),
        width_current=r.get("pcie.width_current", "nvmlDeviceGetCurrPcieLinkWidth", h),
        width_max=r.get("pcie.width_max", "nvmlDeviceGetMaxPcieLinkWidth", h),
    )


def _clocks(r: Reader, h: Dev) -> Clocks:
    mask = r.first("clocks.event_reasons", [
        ("nvmlDeviceGetCurrentClocksEventReasons", (h,)),
        ("nvmlDeviceGetCurrentClocksThrottleReasons", (h,)),
    ])
    if mask is None:
        r.unavailable["clocks.event_reasons_mask"] = r.unavailable["clocks.event_reasons"]
    return Clocks(
        sm_mhz=r.get("clocks.sm_mhz", "nvmlDeviceGetClockInfo", h, d.CLOCK_SM),
        memory_mhz=r.get("clocks.memory_mhz", "nvmlDeviceGetClockInfo", h, d.CLOCK_MEM),
        graphics_mhz=r.get("clocks.graphics_mhz", "nvmlDeviceGetClockInfo", h, d.CLOCK_GRAPHICS),
        sm_max_mhz=r.get("clocks.sm_max_mhz", "nvmlDeviceGetMaxClockInfo", h, d.CLOCK_SM),
        memory_max_mhz=r.get("clocks.memory_max_mhz", "nvmlDeviceGetMaxClockInfo", h,
                             d.CLOCK_MEM),
        graphics_max_mhz=r.get("clocks.graphics_max_mhz", "nvmlDeviceGetMaxClockInfo", h,
                               d.CLOCK_GRAPHICS),
        applications_graphics_mhz=r.get("clocks.applications_graphics_mhz",
                                        "nvmlDeviceGetApplicationsClock", h, d.CLOCK_GRAPHICS),
        applications_memory_mhz=r.get("clocks.applications_memory_mhz",
                                      "nvmlDeviceGetApplicationsClock", h, d.CLOCK_MEM),
        default_applications_graphics_mhz=r.get(
            "clocks.default_applications_graphics_mhz", "nvmlDeviceGetDefaultApplicationsClock",
            h, d.CLOCK_GRAPHICS),
        default_applications_memory_mhz=r.get(
            "clocks.default_applications_memory_mhz", "nvmlDeviceGetDefaultApplicationsClock", h,
            d.CLOCK_MEM),
        event_reasons=d.clock_event_names(mask) if mask is not None else None,
        event_reasons_mask=mask,
    )


def _power(r: Reader, h: Dev) -> Power:
    limits = r.get("power.min_limit_w", "nvmlDeviceGetPowerManagementLimitConstraints", h)
    if limits is None:
        r.unavailable["power.max_limit_w"] = r.unavailable["power.min_limit_w"]
    return Power(
        draw_w=r.get("power.draw_w", "nvmlDeviceGetPowerUsage", h, convert=_mw_to_w),
        limit_w=r.get("power.limit_w", "nvmlDeviceGetEnforcedPowerLimit", h, convert=_mw_to_w),
        default_limit_w=r.get("power.default_limit_w",
                              "nvmlDeviceGetPowerManagementDefaultLimit", h, convert=_mw_to_w),
        min_limit_w=_mw_to_w(limits[0]) if limits else None,
        max_limit_w=_mw_to_w(limits[1]) if limits else None,
    )


def _thermal(r: Reader, h: Dev) -> Thermal:
    def threshold(fld: str, kind: int) -> int | None:
        celsius: int | None = r.get(fld, "nvmlDeviceGetTemperatureThreshold", h, kind)
        return celsius

    return Thermal(
        gpu_c=r.get("thermal.gpu_c", "nvmlDeviceGetTemperature", h, d.TEMP_SENSOR_GPU),
        slowdown_c=threshold("thermal.slowdown_c", d.TEMP_THRESHOLD_SLOWDOWN),
        shutdown_c=threshold("thermal.shutdown_c", d.TEMP_THRESHOLD_SHUTDOWN),
        gpu_max_operating_c=threshold("thermal.gpu_max_operating_c", d.TEMP_THRESHOLD_GPU_MAX),
        memory_max_operating_c=threshold("thermal.memory_max_operating_c",
                                         d.TEMP_THRESHOLD_MEM_MAX),
    )


def _ecc(r: Reader, h: Dev) -> Ecc:
    mode = r.get("ecc.enabled", "nvmlDeviceGetEccMode", h)
    if mode is None:
        r.unavailable["ecc.pending_enabled"] = r.unavailable["ecc.enabled"]

    def count(fld: str, error: int, counter: int) -> int | None:
        errors: int | None = r.get(fld, "nvmlDeviceGetTotalEccErrors", h, error, counter)
        return errors

    return Ecc(
        enabled=bool(mode[0]) if mode else None,
        pending_enabled=bool(mode[1]) if mode else None,
        volatile_corrected=count("ecc.volatile_corrected", d.ECC_CORRECTED, d.ECC_VOLATILE),
        volatile_uncorrected=count("ecc.volatile_uncorrected", d.ECC_UNCORRECTED,
                                   d.ECC_VOLATILE),
        aggregate_corrected=count("ecc.aggregate_corrected", d.ECC_CORRECTED, d.ECC_AGGREGATE),
        aggregate_uncorrected=count("ecc.aggregate_uncorrected", d.ECC_UNCORRECTED,
                                    d.ECC_AGGREGATE),
    )


def _remapped_rows(r: Reader, h: Dev) -> RemappedRows:
    rows = r.get("remapped_rows", "nvmlDeviceGetRemappedRows", h)
    if rows is None:
        return RemappedRows()
    correctable, uncorrectable, pending, failed = rows
    return RemappedRows(correctable=correctable, uncorrectable=uncorrectable,
                        pending=bool(pending), failed=bool(failed))


def _retired_pages(r: Reader, h: Dev) -> RetiredPages:
    def pages(fld: str, cause: int) -> int | None:
        return r.get(fld, "nvmlDeviceGetRetiredPages", h, cause, convert=len)

    return RetiredPages(
        single_bit=pages("retired_pages.single_bit", d.RETIRED_MULTIPLE_SBE),
        double_bit=pages("retired_pages.double_bit", d.RETIRED_DBE),
        pending=r.get("retired_pages.pending", "nvmlDeviceGetRetiredPagesPendingStatus", h,
                      convert=bool),
    )


def _nvlinks(r: Reader, h: Dev) -> tuple[NvLink, ...]:
    links = []
    for link in range(d.NVLINK_MAX_LINKS):
        state = r.get("nvlinks", "nvmlDeviceGetNvLinkState", h, link)
        if state is None:
            break  # past the last link, or no NVLink on this GPU
        # Per-link fields share one key: the reason is the same for every link.
        remote = r.first("nvlinks.remote_pci_bus_id", [
            ("nvmlDeviceGetNvLinkRemotePciInfo_v2", (h, link)),
            ("nvmlDeviceGetNvLinkRemotePciInfo", (h, link)),
        ]) if state else None
        links.append(NvLink(
            link=link,
            active=bool(state),
            version=r.get("nvlinks.version", "nvmlDeviceGetNvLinkVersion", h, link)
            if state else None,
            remote_pci_bus_id=d.normalise_bus_id(remote["busId"]) if remote else None,
            remote_is_switch=r.get("nvlinks.remote_is_switch",
                                   "nvmlDeviceGetNvLinkRemoteDeviceType", h, link,
                                   convert=lambda v: v == d.NVLINK_REMOTE_SWITCH)
            if state else None,
        ))
    if links:
        r.unavailable.pop("nvlinks", None)  # the probe past the last link is expected to fail
    return tuple(links)


def running_processes(r: Reader, h: Dev) -> dict[int, tuple[str, int | None]] | None:
    """pid → (kind, GPU memory in bytes) of the compute and graphics processes; None when
    NVML answered neither list (the reason stays in `r.unavailable["processes"]`)."""
    found: dict[int, tuple[str, int | None]] = {}
    answered = False
    for kind, fn in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                     ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
        procs = r.get("processes", fn, h)
        if procs is None:
            continue
        answered = True
        for p in procs:
            used = p.get("usedGpuMemory")
            # NVML reports "not available" as None or as a huge sentinel.
            found.setdefault(p["pid"], (kind, used if (used or 0) < 1 << 62 else None))
    if not answered:
        return None
    r.unavailable.pop("processes", None)
    return found


def _processes(r: Reader, h: Dev) -> tuple[GpuProcess, ...] | None:
    found = running_processes(r, h)
    if found is None:
        return None
    return tuple(GpuProcess(pid=pid, kind=kind, used_memory_bytes=used,
                            name=r.get(f"processes.{pid}.name", "nvmlSystemGetProcessName", pid))
                 for pid, (kind, used) in found.items())


def _mig_instances(r: Reader, index: int) -> tuple[MigInstance, ...]:
    count = r.get("mig_instances", "nvmlDeviceGetMaxMigDeviceCount", Dev(index)) or 0
    found = []
    for k in range(count):
        m = Dev(index, mig=k)
        try:
            uuid = r.src.query("nvmlDeviceGetUUID", m)
        except Unsupported:
            continue  # an empty slot: no MIG device at this index
        attrs = r.get(f"mig_instances.{k}", "nvmlDeviceGetAttributes_v2", m) or {}
        mem = r.get(f"mig_instances.{k}.memory_total_bytes", "nvmlDeviceGetMemoryInfo", m)
        found.append(MigInstance(
            uuid=uuid,
            gpu_instance_id=r.get(f"mig_instances.{k}.gpu_instance_id",
                                  "nvmlDeviceGetGpuInstanceId", m),
            compute_instance_id=r.get(f"mig_instances.{k}.compute_instance_id",
                                      "nvmlDeviceGetComputeInstanceId", m),
            memory_total_bytes=mem["total"] if mem else None,
            multiprocessor_count=attrs.get("multiprocessorCount"),
        ))
    return tuple(found)


def read_links(src: NvmlSource, gpus: tuple[Gpu, ...]) -> tuple[Link, ...]:
    """The edge between every pair of GPUs: NVLink count or the PCIe path, and peer access."""
    by_bus = {g.pci_bus_id: g.index for g in gpus if g.pci_bus_id}
    links = []
    for a, b in combinations(gpus, 2):
        r = Reader(src)
        level = r.get("kind", "nvmlDeviceGetTopologyCommonAncestor", Dev(a.index), Dev(b.index))
        p2p = r.get("p2p_read", "nvmlDeviceGetP2PStatus", Dev(a.index), Dev(b.index),
                    d.P2P_CAPS_READ)
        count = _nvlink_count(src, a, b, by_bus)
        kind = LinkKind.NVLINK if count else d.TOPOLOGY_LEVELS.get(level)
        links.append(Link(
            gpu_a=a.index,
            gpu_b=b.index,
            kind=kind,
            nvlink_count=count,
            p2p_read=p2p == d.P2P_STATUS_OK if p2p is not None else None,
            unavailable=r.unavailable,
        ))
    return tuple(links)


def _nvlink_count(src: NvmlSource, a: Gpu, b: Gpu, by_bus: dict[str, int]) -> int:
    """Direct links from a to b; through NVSwitches, the links both GPUs bring to the fabric."""
    direct = sum(1 for link in a.nvlinks if link.active and by_bus.get(link.remote_pci_bus_id or "")
                 == b.index)
    if direct:
        return direct
    switched_a = sum(1 for link in a.nvlinks if link.active and link.remote_is_switch)
    switched_b = sum(1 for link in b.nvlinks if link.active and link.remote_is_switch)
    if not (switched_a and switched_b):
        return 0
    try:
        status = src.query("nvmlDeviceGetP2PStatus", Dev(a.index), Dev(b.index),
                           d.P2P_CAPS_NVLINK)
    except Unsupported:
        return 0
    return min(switched_a, switched_b) if status == d.P2P_STATUS_OK else 0
