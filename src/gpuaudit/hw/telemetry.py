"""The monitor's reading of every GPU at one tick, through an NvmlSource.

Facts that do not change while the driver runs (name, UUID, whether GPM works, which NVLinks
are up) are read once by `Sampler`; each tick reads only what moves. NVML's PCIe throughput
query samples for 20 ms per call, so it is used only where GPM (Hopper and newer) cannot give
the PCIe rates.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from gpuaudit.errors import BadInputError
from gpuaudit.model import GpuSample, ProcessSample, Sample, XidEvent
from gpuaudit.model.schema import describe_validation_error
from gpuaudit.model.units import MAX_GPUS

from . import decode as d
from .gpus import Reader, running_processes
from .nvml import (
    FIELD_VALUES,
    GPM_METRICS,
    KERNEL_XIDS,
    NOT_RECORDED,
    PROCESS_INFO,
    PROCESS_UTILIZATION,
    XID_EVENTS,
    Dev,
    NvmlSource,
)
from .xids import xid_bus

# NVML GPM metric ids (nvmlGpmMetricId_t) → GpuSample fields; rates come in MiB/s.
GPM_FIELDS = {
    2: "sm_activity_pct",
    3: "sm_occupancy_pct",
    5: "tensor_activity_pct",
    10: "dram_bandwidth_util_pct",
    11: "fp64_activity_pct",
    12: "fp32_activity_pct",
    13: "fp16_activity_pct",
    20: "gpm_pcie_tx_bytes_per_s",
    21: "gpm_pcie_rx_bytes_per_s",
    60: "gpm_nvlink_rx_bytes_per_s",
    61: "gpm_nvlink_tx_bytes_per_s",
}
GPM_RATE_IDS = {20, 21, 60, 61}
MIB = 1 << 20
GPM_IDS = ",".join(str(i) for i in GPM_FIELDS)

# NVML field ids (nvml.h NVML_FI_*): HBM temperature, NVLink data counters (KiB, per link).
FI_MEMORY_TEMP = 82
FI_NVLINK_DATA_TX, FI_NVLINK_DATA_RX = 138, 139
PCIE_TX, PCIE_RX = 0, 1  # nvmlPcieUtilCounter_t; NVML answers in KB/s

# Reasons that mean "this GPU cannot be read at all", as opposed to one missing feature.
_LOST = ("GPU is lost", "Unknown Error", "Uninitialized", "GPU requires restart",
         "Invalid Argument", "Not Found")


def _lost(reason: str | None) -> bool:
    return reason is not None and any(word in reason for word in _LOST)


@dataclass(frozen=True)
class GpuStatic:
    index: int
    name: str | None
    uuid: str | None
    gpm: bool
    nvlinks: tuple[int, ...]  # links whose state is up
    pcie_gen_max: int | None = None
    pcie_width_max: int | None = None
    pci_bus_id: str | None = None  # how the kernel log names the GPU in an XID line


def read_static(src: NvmlSource, index: int) -> GpuStatic:
    r = Reader(src)
    h = Dev(index)
    gpm = r.get("gpm", "nvmlGpmQueryDeviceSupport", h)
    links = []
    for link in range(d.NVLINK_MAX_LINKS):
        state = r.get("nvlink", "nvmlDeviceGetNvLinkState", h, link)
        if state is None:
            break
        if state:
            links.append(link)
    pci = r.get("pci", "nvmlDeviceGetPciInfo_v3", h)
    return GpuStatic(index=index, name=r.get("name", "nvmlDeviceGetName", h),
                     uuid=r.get("uuid", "nvmlDeviceGetUUID", h),
                     gpm=bool(gpm and gpm.get("isSupportedDevice")), nvlinks=tuple(links),
                     pcie_gen_max=r.get("pcie", "nvmlDeviceGetMaxPcieLinkGeneration", h),
                     pcie_width_max=r.get("pcie", "nvmlDeviceGetMaxPcieLinkWidth", h),
                     pci_bus_id=xid_bus(pci["busId"]) if pci and pci.get("busId") else None)


def _processes(r: Reader, h: Dev) -> tuple[ProcessSample, ...]:
    out = []
    running = running_processes(r, h) or {}
    util = {}
    if running:
        util = {int(u["pid"]): float(u["sm_pct"])
                for u in r.get("process_utilization", PROCESS_UTILIZATION, h) or ()}
    for pid, (_kind, used) in running.items():
        info = r.get(f"processes.{pid}", PROCESS_INFO, pid) or {}
        r.unavailable.pop(f"processes.{pid}", None)
        out.append(ProcessSample(pid=pid, user=info.get("user"), command=info.get("command"),
                                 used_memory_bytes=used, sm_util_pct=util.get(pid)))
    return tuple(out)


def _gpm(r: Reader, h: Dev) -> dict[str, float]:
    got = r.get("gpm", GPM_METRICS, h, GPM_IDS)
    out: dict[str, float] = {}
    for metric_id, fld in GPM_FIELDS.items():
        value = (got or {}).get(str(metric_id))
        if isinstance(value, (int, float)):
            out[fld] = value * MIB if metric_id in GPM_RATE_IDS else float(value)
        else:
            r.unavailable[fld] = value if isinstance(value, str) else r.unavailable["gpm"]
    r.unavailable.pop("gpm", None)
    return out


def _fields(r: Reader, h: Dev, static: GpuStatic) -> dict[str, Any]:
    spec = [(FI_MEMORY_TEMP, 0)]
    for link in static.nvlinks:
        spec += [(FI_NVLINK_DATA_RX, link), (FI_NVLINK_DATA_TX, link)]
    got = r.get("fields", FIELD_VALUES, h, ",".join(f"{f}:{s}" for f, s in spec))
    reason = r.unavailable.pop("fields", None)
    out: dict[str, Any] = {}
    by_field: dict[int, list[dict[str, Any]]] = {}
    for entry in got or ():
        by_field.setdefault(entry["field"], []).append(entry)
    temp = by_field.get(FI_MEMORY_TEMP, [{}])[0]
    if "value" in temp:
        out["temperature_memory_c"] = float(temp["value"])
    else:
        r.unavailable["temperature_memory_c"] = temp.get("error") or reason or NOT_RECORDED
    if not static.nvlinks:
        r.unavailable["nvlink_rx_bytes"] = r.unavailable["nvlink_tx_bytes"] = "no NVLink up"
        return out
    for fld, fid in (("nvlink_rx_bytes", FI_NVLINK_DATA_RX), ("nvlink_tx_bytes",
                                                            FI_NVLINK_DATA_TX)):
        entries = by_field.get(fid, [])
        if entries and all("value" in e for e in entries):
            out[fld] = sum(int(e["value"]) for e in entries) * 1024  # KiB → bytes
        else:
            errors = [str(e["error"]) for e in entries if "error" in e]
            r.unavailable[fld] = errors[0] if errors else (reason or NOT_RECORDED)
    return out


def read_gpu_sample(src: NvmlSource, static: GpuStatic,
                    xids: Iterable[XidEvent] = (), lenient: bool = True) -> GpuSample:
    """One GPU's tick. Readings are checked against what a GPU can have (model/units); a live
    GPU's impossible answer is left out with the reason (`lenient`), a recording's is an
    error."""
    r = Reader(src)
    h = Dev(static.index)
    util = r.get("utilization_gpu_pct", "nvmlDeviceGetUtilizationRates", h)
    mem = r.get("memory_used_bytes", "nvmlDeviceGetMemoryInfo", h)
    if util is None and mem is None:
        reason = r.unavailable["memory_used_bytes"]
        if _lost(reason) or _lost(r.unavailable["utilization_gpu_pct"]):
            return GpuSample(index=static.index, uuid=static.uuid, name=static.name,
                             error=reason, xid_events=tuple(xids))
    reasons = r.first("clock_event_reasons", [
        ("nvmlDeviceGetCurrentClocksEventReasons", (h,)),
        ("nvmlDeviceGetCurrentClocksThrottleReasons", (h,))], convert=d.clock_event_names)
    rows = r.get("remapped_rows", "nvmlDeviceGetRemappedRows", h)
    readings: dict[str, Any] = dict(
        utilization_gpu_pct=util["gpu"] if util else None,
        utilization_memory_pct=util["memory"] if util else None,
        memory_used_bytes=mem["used"] if mem else None,
        memory_total_bytes=mem["total"] if mem else None,
        power_w=r.get("power_w", "nvmlDeviceGetPowerUsage", h, convert=lambda v: v / 1000),
        power_limit_w=r.get("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", h,
                            convert=lambda v: v / 1000),
        energy_j=r.get("energy_j", "nvmlDeviceGetTotalEnergyConsumption", h,
                       convert=lambda v: v / 1000),
        temperature_gpu_c=r.get("temperature_gpu_c", "nvmlDeviceGetTemperature", h,
                                d.TEMP_SENSOR_GPU, convert=float),
        sm_clock_mhz=r.get("sm_clock_mhz", "nvmlDeviceGetClockInfo", h, d.CLOCK_SM),
        memory_clock_mhz=r.get("memory_clock_mhz", "nvmlDeviceGetClockInfo", h, d.CLOCK_MEM),
        clock_event_reasons=reasons,
        pcie_link_gen=r.get("pcie_link_gen", "nvmlDeviceGetCurrPcieLinkGeneration", h),
        pcie_link_width=r.get("pcie_link_width", "nvmlDeviceGetCurrPcieLinkWidth", h),
        pcie_link_gen_max=static.pcie_gen_max,
        pcie_link_width_max=static.pcie_width_max,
        ecc_corrected_volatile=r.get("ecc_corrected_volatile", "nvmlDeviceGetTotalEccErrors",
                                     h, d.ECC_CORRECTED, d.ECC_VOLATILE),
        ecc_uncorrected_volatile=r.get("ecc_uncorrected_volatile",
                                       "nvmlDeviceGetTotalEccErrors", h, d.ECC_UNCORRECTED,
                                       d.ECC_VOLATILE),
        ecc_uncorrected_aggregate=r.get("ecc_uncorrected_aggregate",
                                        "nvmlDeviceGetTotalEccErrors", h, d.ECC_UNCORRECTED,
                                        d.ECC_AGGREGATE),
        remapped_rows_correctable=rows[0] if rows else None,
        remapped_rows_uncorrectable=rows[1] if rows else None,
        remapping_pending=bool(rows[2]) if rows else None,
        remapping_failed=bool(rows[3]) if rows else None,
        processes=_processes(r, h),
    )
    if util is None:
        r.unavailable["utilization_memory_pct"] = r.unavailable["utilization_gpu_pct"]
    if mem is None:
        r.unavailable["memory_total_bytes"] = r.unavailable["memory_used_bytes"]
    if rows is None:
        for fld in ("remapped_rows_correctable", "remapped_rows_uncorrectable",
                    "remapping_pending", "remapping_failed"):
            r.unavailable[fld] = r.unavailable["remapped_rows"]
        r.unavailable.pop("remapped_rows")
    if static.gpm:
        readings.update(_gpm(r, h))
        r.unavailable["pcie_rx_bytes_per_s"] = r.unavailable["pcie_tx_bytes_per_s"] = \
            "read through GPM instead (gpm_pcie_*)"
    else:
        for fld in GPM_FIELDS.values():
            r.unavailable[fld] = "GPM needs Hopper or newer"
        for fld, counter in (("pcie_rx_bytes_per_s", PCIE_RX), ("pcie_tx_bytes_per_s",
                                                                 PCIE_TX)):
            readings[fld] = r.get(fld, "nvmlDeviceGetPcieThroughput", h, counter,
                                  convert=lambda v: v * 1000.0)
    readings.update(_fields(r, h, static))
    doc = dict(index=static.index, uuid=static.uuid, name=static.name, xid_events=tuple(xids),
               unavailable=r.unavailable, **readings)
    try:
        return GpuSample.model_validate(doc, strict=True)
    except ValidationError as exc:
        if not lenient:
            raise
        for error in exc.errors():
            name = str(error["loc"][0])
            if name in readings and readings[name] is not None:
                doc[name] = () if name == "processes" else None
                r.unavailable[name] = f"reading not trusted: {error['input']!r}"[:200]
        return GpuSample.model_validate(doc, strict=True)


def gpu_count(src: NvmlSource) -> int:
    """How many GPUs the source has (0 when it cannot say); a count no machine has (a trace
    claiming 100,000 GPUs, "8" as text) is bad input, before anything loops over it."""
    count = Reader(src).get("gpu_count", "nvmlDeviceGetCount") or 0
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= MAX_GPUS:
        where = getattr(src, "origin", None) or "NVML"
        raise BadInputError(f"{where}: {str(count)[:40]!r} GPUs is not a GPU count (0 to "
                            f"{MAX_GPUS})")
    return count


class Sampler:
    """Reads every GPU (or the chosen ones) once per call of `sample`. A GPU that errors is
    reported in its GpuSample; the others are still read."""

    def __init__(self, src: NvmlSource, *, hostname: str, interval_s: float,
                 gpus: Iterable[int] | None = None) -> None:
        self.src = src
        self.hostname = hostname
        self.interval_s = interval_s
        # A recording (it has an origin) is judged, not read around: see `_recorded`.
        self.origin: str | None = getattr(src, "origin", None)
        count = gpu_count(src)
        wanted = list(range(count)) if gpus is None else sorted(set(gpus))
        self.static = [self._recorded(-1, read_static, src, i) for i in wanted]
        self.xid_reason: str | None = None

    def _recorded(self, index: int, read: Any, *args: Any) -> Any:
        """`read(*args)`; from a recording, an answer no NVML gives (a clock as text, 10^30
        W, a list where a dict was) is bad input naming the trace, frame and GPU."""
        if self.origin is None:
            return read(*args)
        try:
            return read(*args)
        except BadInputError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            frame = getattr(self.src, "frame", -1)
            where = f"{self.origin} {'setup' if frame < 0 else f'frame {frame}'}"
            why = (describe_validation_error(exc) if isinstance(exc, ValidationError)
                   else f"{type(exc).__name__}: {exc}")
            gpu = f"GPU {args[-1] if index < 0 else index}: " if args else ""
            raise BadInputError(f"{where}: {gpu}{why}") from None

    def _xids(self, now: datetime) -> dict[int, list[XidEvent]]:
        r = Reader(self.src)
        events = r.get("xid", XID_EVENTS) or []
        # Read every tick, so that its place in the log stays current; used where NVML
        # gives no XID events (the kernel log names the GPU by its bus).
        kernel = r.get("kernel_xid", KERNEL_XIDS) or []
        if "xid" in r.unavailable:
            bus_index = {s.pci_bus_id: s.index for s in self.static if s.pci_bus_id}
            events = [{"gpu": bus_index[xid_bus(bus)], "code": code} for bus, code in kernel
                      if xid_bus(bus) in bus_index]
        self.xid_reason = r.unavailable.get("xid") if "kernel_xid" in r.unavailable else None
        by_gpu: dict[int, list[XidEvent]] = {}
        for e in events:
            by_gpu.setdefault(e["gpu"], []).append(XidEvent(gpu=e["gpu"], code=e["code"],
                                                            time=now))
        return by_gpu

    def sample(self, now: datetime) -> Sample:
        xids = self._xids(now)
        gpus = []
        for static in self.static:
            try:
                gpus.append(self._recorded(static.index, read_gpu_sample, self.src, static,
                                           xids.get(static.index, ()), self.origin is None))
            except BadInputError:
                raise
            except Exception as exc:  # one GPU's surprise must not stop the others' sampling
                why = (describe_validation_error(exc) if isinstance(exc, ValidationError)
                       else " ".join(str(exc).split()))
                gpus.append(GpuSample(index=static.index, uuid=static.uuid, name=static.name,
                                      error=f"{type(exc).__name__}: {why}"))
        return Sample(time=now, hostname=self.hostname, interval_s=self.interval_s,
                      gpus=tuple(gpus))
