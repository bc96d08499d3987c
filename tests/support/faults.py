"""Planted faults: copies of the real two-H200 snapshot with one fault each.

A GPU fault is planted on one GPU only (GPU 0, which also has no historic ECC error: GPU 1 of
the real machine warns of one, so an ECC fault planted on GPU 0 is the only ECC problem there);
the other GPU stays as recorded and must be judged exactly as before. Machine-wide faults
change the host or the box. Each fault names its control: the PASS its check gives on the
real snapshot, which the fault must take away.

`python -m tests.support.faults` rewrites tests/fixtures/faults/*.json from the real fixtures;
tests check the committed copies are exactly what these functions produce.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).parents[1] / "fixtures"
FAULTS_DIR = FIXTURES / "faults"
GIB = 1 << 30
TWO = "h200-2gpu"
BUS0 = "0000:00:06"  # GPU 0's bus as the kernel log writes it (nvml: 0000:00:06.0)

Doc = dict


@dataclass(frozen=True)
class Fault:
    name: str
    plant: Callable[[Doc], None]  # edits the machine of the document in place
    expect: dict[str, str]  # finding code → severity it must produce
    gpu: int | None = 0  # the GPU the findings are on (machine-wide ones too: None)
    control: str | None = None  # the check's PASS code on the real snapshot, this fault ends
    replaces: frozenset[str] = frozenset()  # other PASS codes the fault may take away
    base: str = TWO  # the real fixture it is planted in
    expect_gpus: int | None = None  # passed to check_machine


def _gpu(doc: Doc, i: int = 0) -> dict:
    return doc["machine"]["gpus"][i]


def _busy(gpu: dict) -> None:
    """Working flat out, as a healthy GPU does: full clocks, no clock-event reason."""
    gpu["utilization_gpu_pct"] = 100
    clk = gpu["clocks"]
    clk.update(event_reasons=[], event_reasons_mask=0, sm_mhz=clk["sm_max_mhz"],
               graphics_mhz=clk["sm_max_mhz"])


def _reasons(gpu: dict, *names: str, mask: int) -> None:
    gpu["clocks"]["event_reasons"] = list(names)
    gpu["clocks"]["event_reasons_mask"] = mask


def _set(path: str, value, gpu: int = 0) -> Callable[[Doc], None]:
    """A planter that sets one dotted field of a GPU ("power.limit_w") and forgets why it was
    unavailable, as a real reading would."""
    def plant(doc: Doc) -> None:
        g = _gpu(doc, gpu)
        *parents, leaf = path.split(".")
        target = g
        for key in parents:
            target = target[key]
        target[leaf] = value
        g["unavailable"].pop(path, None)
    return plant


def pcie_gen_busy(doc: Doc) -> None:
    g = _gpu(doc)
    _busy(g)
    g["pcie"]["gen_current"] = 3


def pcie_slot(doc: Doc) -> None:
    _gpu(doc)["pcie"].update(gen_max=4, gen_current=4)


def pcie_gpu_below_spec(doc: Doc) -> None:
    _gpu(doc)["pcie"].update(gen_gpu_max=4, gen_max=4, gen_current=4)


def pcie_width_max(doc: Doc) -> None:
    _gpu(doc)["pcie"].update(width_max=8, width_current=8)


def hw_thermal(doc: Doc) -> None:
    g = _gpu(doc)
    _reasons(g, "hw_slowdown", "hw_thermal_slowdown", mask=0x48)
    g["thermal"]["gpu_c"] = 80


def power_below_spec(doc: Doc) -> None:
    _gpu(doc)["power"].update(limit_w=500.0, default_limit_w=500.0, max_limit_w=500.0)


def temp_near(doc: Doc) -> None:
    g = _gpu(doc)
    g["thermal"]["gpu_c"] = g["thermal"]["slowdown_c"] - 3


def clocks_held(doc: Doc) -> None:
    g = _gpu(doc)
    _busy(g)
    g["clocks"]["sm_mhz"] = g["clocks"]["graphics_mhz"] = 1200


def app_clocks(doc: Doc) -> None:
    clk = _gpu(doc)["clocks"]
    clk.update(applications_graphics_mhz=1500, default_applications_graphics_mhz=1980,
               applications_memory_mhz=3201, default_applications_memory_mhz=3201)
    for key in ("applications_graphics_mhz", "default_applications_graphics_mhz",
                "applications_memory_mhz", "default_applications_memory_mhz"):
        _gpu(doc)["unavailable"].pop(f"clocks.{key}", None)


# ECC faults go on the GPU without a historic uncorrectable error in the recording (GPU 1 of
# the 2026-11-30 20:34 box has 2), so that the planted fault is the only ECC problem there.
ECC_CLEAN_GPU = 0


def ecc_off(doc: Doc) -> None:
    _gpu(doc, ECC_CLEAN_GPU)["ecc"].update(enabled=False, pending_enabled=False)


def ecc_uncorrectable(doc: Doc) -> None:
    _gpu(doc, ECC_CLEAN_GPU)["ecc"].update(volatile_uncorrected=2, aggregate_uncorrected=3)


def power_unreadable(doc: Doc) -> None:
    _gpu(doc)["power"]["draw_w"] = None
    _gpu(doc)["unavailable"]["power.draw_w"] = "Unknown Error"


def remap_pending(doc: Doc) -> None:
    _gpu(doc)["remapped_rows"].update(uncorrectable=1, pending=True)


def remap_failed(doc: Doc) -> None:
    _gpu(doc)["remapped_rows"].update(uncorrectable=511, failed=True)


def remap_limit(doc: Doc) -> None:
    _gpu(doc)["remapped_rows"].update(uncorrectable=512)


def _retired(doc: Doc, single: int, double: int, pending: bool) -> None:
    _gpu(doc)["retired_pages"] = {"single_bit": single, "double_bit": double,
                                  "pending": pending}
    for key in ("retired_pages.single_bit", "retired_pages.double_bit", "retired_pages.pending"):
        _gpu(doc)["unavailable"].pop(key, None)


def _links_between(doc: Doc, count: int) -> None:
    link = doc["machine"]["links"][0]
    link["nvlink_count"] = count
    if count == 0:
        link["kind"] = "SYS"


def nvlink_down(doc: Doc) -> None:
    for link in _gpu(doc)["nvlinks"][:2]:
        link.update(active=False, version=None, remote_is_switch=None)
    _links_between(doc, 16)


def nvlink_none_up(doc: Doc) -> None:
    for link in _gpu(doc)["nvlinks"]:
        link.update(active=False, version=None, remote_is_switch=None, remote_pci_bus_id=None)
    _links_between(doc, 0)


def nvlink_hidden(doc: Doc) -> None:
    _gpu(doc)["nvlinks"] = []
    _gpu(doc)["unavailable"]["nvlinks"] = "Not Supported"
    _links_between(doc, 0)


def mig_on(doc: Doc) -> None:
    _gpu(doc).update(mig_enabled=True, mig_pending=True, mig_instances=[
        {"uuid": f"MIG-0000000{k}-aaaa-bbbb-cccc-dddddddddddd", "gpu_instance_id": k,
         "compute_instance_id": 0, "memory_total_bytes": 35 * GIB, "multiprocessor_count": 32}
        for k in range(3)])


def processes(doc: Doc) -> None:
    g = _gpu(doc)
    g["processes"] = [{"pid": 4242, "name": "python3", "kind": "compute",
                       "used_memory_bytes": 40 * GIB}]
    g["memory_used_bytes"] += 40 * GIB


def vgpu_slice(doc: Doc) -> None:
    _gpu(doc).update(virtualization_mode="vgpu", memory_total_bytes=20 * GIB,
                     memory_used_bytes=GIB // 2)


def lost(reason: str) -> Callable[[Doc], None]:
    """GPU 0 as hw reads a GPU that answers no query; the kernel log has XID 79 on its bus."""
    def plant(doc: Doc) -> None:
        from gpuaudit.model import Gpu

        unavailable = {"name": reason, "uuid": reason, "memory_total_bytes": reason}
        doc["machine"]["gpus"][0] = Gpu(index=0, name="unknown", error=reason,
                                        unavailable=unavailable).model_dump(mode="json")
        doc["machine"]["links"] = []
        doc["machine"]["xid_counts"] = {"79": 1}
        doc["machine"]["xid_counts_by_bus"] = {BUS0: {"79": 1}}
    return plant


def lost_old_snapshot(doc: Doc) -> None:
    """A snapshot from before `error` was kept: every reading of GPU 0 missing."""
    lost("Unknown Error")(doc)
    g = _gpu(doc)
    g["error"] = None
    g["unavailable"] = {k: "Unknown Error" for k in ("name", "uuid", "pci_bus_id",
                                                       "memory_total_bytes", "clocks.sm_mhz")}
    doc["machine"]["xid_counts_by_bus"] = {}
    doc["machine"]["xid_counts"] = {}


def xids(by_bus: dict[str, dict[str, int]]) -> Callable[[Doc], None]:
    def plant(doc: Doc) -> None:
        totals: dict[str, int] = {}
        for codes in by_bus.values():
            for code, n in codes.items():
                totals[code] = totals.get(code, 0) + n
        doc["machine"]["xid_counts"] = totals
        doc["machine"]["xid_counts_by_bus"] = by_bus
    return plant


def xid_old_snapshot(doc: Doc) -> None:
    doc["machine"]["xid_counts"] = {"79": 1, "13": 4}
    doc["machine"]["xid_counts_by_bus"] = None


def torch_newer(doc: Doc) -> None:
    doc["machine"]["host"].update(torch_version="2.11.0+cu140", torch_cuda_version="14.0")


def torch_minor_newer(doc: Doc) -> None:
    doc["machine"]["host"]["torch_cuda_version"] = "13.2"


def mixed_models(doc: Doc) -> None:
    # An H100 as NVML reports one: 81559 MiB.
    _gpu(doc, 1).update(name="NVIDIA H100 80GB HBM3", pci_device_id=0x2330,
                        memory_total_bytes=81559 << 20)


def mixed_vbios(doc: Doc) -> None:
    _gpu(doc, 1)["vbios_version"] = "96.00.99.00.01"


def cuda_env(doc: Doc) -> None:
    doc["machine"]["host"]["cuda_env_set"] = ["CUDA_LAUNCH_BLOCKING", "CUDA_INJECTION64_PATH"]


def unknown_model(doc: Doc) -> None:
    _gpu(doc).update(name="NVIDIA Imaginary X1", pci_device_id=0x9999)


DATASHEET = frozenset({"memory-size", "clocks-max", "power", "nvlink", "pcie"})

FAULTS = [
    # PCIe: link now, slot, datasheet
    Fault("pcie-width-degraded", _set("pcie.width_current", 8), {"pcie.width-degraded": "FAIL"},
          control="pcie"),
    Fault("pcie-gen-below-max-busy", pcie_gen_busy, {"pcie.gen-below-max": "WARN"},
          control="pcie"),
    Fault("pcie-gen-below-max-idle", _set("pcie.gen_current", 1),
          {"pcie.gen-below-max-idle": "INFO"}, control="pcie"),
    Fault("pcie-slot-below-gpu", pcie_slot, {"pcie.slot-below-gpu": "WARN"}, control="pcie"),
    Fault("pcie-gpu-below-spec", pcie_gpu_below_spec, {"pcie.gpu-below-spec": "WARN"},
          control="pcie"),
    Fault("pcie-width-max-below-spec", pcie_width_max, {"pcie.width-max-below-spec": "WARN"},
          control="pcie"),
    # datasheet figures
    Fault("memory-size-below-spec", _set("memory_total_bytes", 80 * GIB),
          {"memory-size.below-spec": "FAIL"}, control="memory-size"),
    Fault("memory-size-above-spec", _set("memory_total_bytes", 192 * GIB),
          {"memory-size.above-spec": "WARN"}, control="memory-size"),
    Fault("memory-size-vgpu-slice", vgpu_slice, {"memory-size.vgpu-share": "INFO",
                                                 "virtualization.vgpu": "WARN"},
          control="memory-size"),
    Fault("power-limit-lowered", _set("power.limit_w", 450.0),
          {"power.limit-below-default": "WARN"}, control="power"),
    Fault("power-limit-below-spec", power_below_spec, {"power.limit-below-spec": "WARN"},
          control="power"),
    Fault("max-clock-below-spec", _set("clocks.sm_max_mhz", 1600),
          {"clocks-max.below-spec": "WARN"}, control="clocks-max"),
    # clocks and heat
    Fault("hw-slowdown", lambda d: _reasons(_gpu(d), "hw_slowdown", mask=0x8),
          {"clocks.hw-slowdown": "FAIL"}, control="clocks"),
    Fault("hw-thermal-slowdown", hw_thermal,
          {"clocks.hw-slowdown": "FAIL", "clocks.hw-thermal-slowdown": "FAIL"},
          control="clocks"),
    Fault("hw-power-brake",
          lambda d: _reasons(_gpu(d), "hw_slowdown", "hw_power_brake_slowdown", mask=0x88),
          {"clocks.hw-slowdown": "FAIL", "clocks.hw-power-brake": "FAIL"}, control="clocks"),
    Fault("power-cap-while-idle",
          lambda d: _reasons(_gpu(d), "gpu_idle", "sw_power_cap", mask=0x5),
          {"clocks.power-cap-while-idle": "WARN"}, control="clocks"),
    Fault("clocks-held-below-max", clocks_held, {"clocks.held-below-max": "WARN"},
          control="clocks"),
    Fault("clocks-applications-lowered", app_clocks, {"clocks.applications-lowered": "WARN"},
          control="clocks"),
    Fault("temperature-near-slowdown", temp_near, {"thermal.near-slowdown": "WARN"},
          control="thermal"),
    Fault("power-unreadable", power_unreadable, {"power.unreadable": "WARN"}),
    # memory errors and use
    Fault("ecc-off", ecc_off, {"ecc.disabled": "WARN"}, gpu=ECC_CLEAN_GPU, control="ecc"),
    Fault("ecc-uncorrectable", ecc_uncorrectable, {"ecc.uncorrectable-volatile": "FAIL"},
          gpu=ECC_CLEAN_GPU, control="ecc"),
    Fault("remapped-rows-pending", remap_pending, {"remapped-rows.pending": "WARN"},
          control="remapped-rows"),
    Fault("remapped-rows-failed", remap_failed, {"remapped-rows.failed": "FAIL"},
          control="remapped-rows"),
    Fault("remapped-rows-limit", remap_limit, {"remapped-rows.limit": "FAIL"},
          control="remapped-rows"),
    Fault("retired-pages-pending", lambda d: _retired(d, 3, 1, True),
          {"retired-pages.pending": "WARN"}),
    Fault("retired-pages-limit", lambda d: _retired(d, 60, 3, False),
          {"retired-pages.limit": "FAIL"}),
    Fault("processes-holding-memory", processes, {"memory.in-use": "WARN"}, control="memory"),
    Fault("memory-held-unseen", _set("memory_used_bytes", 70 * GIB),
          {"memory.in-use-unseen": "WARN"}, control="memory"),
    # links
    Fault("nvlink-down", nvlink_down, {"nvlink.down": "FAIL"}, control="nvlink"),
    Fault("nvlink-none-up", nvlink_none_up, {"nvlink.none-up": "FAIL"}, control="nvlink"),
    Fault("nvlink-hidden-by-vm", nvlink_hidden, {"nvlink.none-up": "FAIL"}, control="nvlink"),
    Fault("fabric-not-started", _set("fabric_state", "not_started"),
          {"fabric.not-ready": "FAIL"}, control="fabric"),
    # modes and driver state
    Fault("mig-enabled", mig_on, {"mig.enabled": "INFO"}),
    Fault("compute-prohibited", _set("compute_mode", "prohibited"),
          {"mode.compute-prohibited": "FAIL"}),
    Fault("persistence-off", _set("persistence_mode", False), {"mode.persistence-off": "INFO"}),
    Fault("inforom-corrupt", _set("inforom_valid", False), {"inforom.corrupt": "FAIL"}),
    Fault("recovery-action-reset", _set("recovery_action", "gpu_reset"),
          {"recovery.action-needed": "FAIL"}),
    # readings that cannot be trusted
    Fault("reading-nan", _set("power.limit_w", float("nan")), {"reading.untrusted": "WARN"},
          control="power", replaces=frozenset({"power"})),
    Fault("reading-negative", _set("thermal.gpu_c", -5), {"reading.untrusted": "WARN"},
          control="thermal", replaces=frozenset({"thermal"})),
    Fault("reading-infinite", _set("power.default_limit_w", float("inf")),
          {"reading.untrusted": "WARN"}),
    Fault("reading-percent-over-100", _set("utilization_gpu_pct", 250),
          {"reading.untrusted": "WARN"}),
    # lost GPUs and XIDs
    Fault("gpu-lost", lost("GPU is lost"), {"gpu.lost": "FAIL"}, control="memory-size",
          replaces=frozenset({"pcie", "clocks", "clocks-max", "power", "thermal", "ecc",
                              "remapped-rows", "nvlink", "fabric", "memory", "xid"})),
    Fault("gpu-lost-old-snapshot", lost_old_snapshot, {"gpu.lost": "FAIL"},
          control="memory-size",
          replaces=frozenset({"pcie", "clocks", "clocks-max", "power", "thermal", "ecc",
                              "remapped-rows", "nvlink", "fabric", "memory", "xid"})),
    Fault("gpu-no-access", lost("Insufficient Permissions"), {"gpu.no-access": "FAIL"},
          control="memory-size",
          replaces=frozenset({"pcie", "clocks", "clocks-max", "power", "thermal", "ecc",
                              "remapped-rows", "nvlink", "fabric", "memory", "xid"})),
    Fault("xid-critical-on-gpu", xids({BUS0: {"79": 1, "13": 4}}), {"xid.critical": "FAIL"},
          control="xid"),
    Fault("xid-seen-on-gpu", xids({BUS0: {"13": 2}}), {"xid.seen": "WARN"}, control="xid"),
    Fault("xid-on-unknown-bus", xids({"0000:9a:00": {"79": 1}}), {"xid.critical": "FAIL"},
          gpu=None),
    Fault("xid-old-snapshot", xid_old_snapshot, {"xid.critical": "FAIL"}, gpu=None,
          replaces=frozenset({"xid"})),
    # the machine
    Fault("gpu-count-short", lambda d: None, {"gpu-count.missing": "FAIL"}, gpu=None,
          expect_gpus=8),
    Fault("torch-cuda-newer-than-driver", torch_newer, {"torch.cuda-newer-than-driver": "FAIL"},
          gpu=None, control="torch"),
    Fault("torch-cuda-minor-newer", torch_minor_newer,
          {"torch.cuda-minor-newer-than-driver": "WARN"}, gpu=None, control="torch"),
    Fault("mixed-gpu-models", mixed_models, {"box.mixed-models": "WARN"}, gpu=None,
          replaces=DATASHEET),
    Fault("mixed-vbios", mixed_vbios, {"box.mixed-vbios": "WARN"}, gpu=None),
    Fault("cuda-env-altered", cuda_env, {"env.cuda-altered": "WARN"}, gpu=None),
    Fault("unknown-model", unknown_model, {"spec.unknown-model": "INFO",
                                           "box.mixed-models": "WARN"}, replaces=DATASHEET),
]


def base_doc(name: str) -> Doc:
    return json.loads((FIXTURES / name / "inspect.json").read_text())


def planted(fault: Fault) -> Doc:
    """The base document with the fault planted and its findings recomputed."""
    from gpuaudit.inspect import check_machine
    from gpuaudit.model import Machine

    doc = copy.deepcopy(base_doc(fault.base))
    fault.plant(doc)
    machine = Machine.model_validate(doc["machine"])
    findings = check_machine(machine, expect_gpus=fault.expect_gpus)
    doc["findings"] = [f.model_dump(mode="json") for f in findings]
    doc["source"] = f"planted fault {fault.name} in {fault.base}"
    return doc


def fault_path(fault: Fault) -> Path:
    return FAULTS_DIR / f"{fault.name}.json"


def render(doc: Doc) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    FAULTS_DIR.mkdir(exist_ok=True)
    for old in FAULTS_DIR.glob("*.json"):
        old.unlink()
    for fault in FAULTS:
        fault_path(fault).write_text(render(planted(fault)))
    print(f"wrote {len(FAULTS)} planted-fault snapshots to {FAULTS_DIR}")
