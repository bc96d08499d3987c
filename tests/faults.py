"""Planted faults: copies of the real H200 snapshots with one fault each.

`python -m tests.faults` rewrites tests/fixtures/faults/*.json from the real fixtures;
tests check the committed copies are exactly what these functions produce.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
FAULTS_DIR = FIXTURES / "faults"
GIB = 1 << 30

Doc = dict


@dataclass(frozen=True)
class Fault:
    name: str
    base: str  # the real fixture it is planted in
    plant: Callable[[Doc], None]  # edits the machine of the document in place
    expect: dict[str, str]  # finding code → severity it must produce


def _gpu(doc: Doc, i: int = 0) -> dict:
    return doc["machine"]["gpus"][i]


def _busy(gpu: dict) -> None:
    gpu["utilization_gpu_pct"] = 100
    gpu["clocks"]["event_reasons"] = []
    gpu["clocks"]["event_reasons_mask"] = 0


def _reasons(gpu: dict, *names: str, mask: int) -> None:
    gpu["clocks"]["event_reasons"] = list(names)
    gpu["clocks"]["event_reasons_mask"] = mask


def pcie_width(doc: Doc) -> None:
    _gpu(doc)["pcie"]["width_current"] = 8


def pcie_gen_busy(doc: Doc) -> None:
    g = _gpu(doc)
    _busy(g)
    g["pcie"]["gen_current"] = 3


def pcie_gen_idle(doc: Doc) -> None:
    _gpu(doc)["pcie"]["gen_current"] = 1  # the recorded GPU is idle (gpu_idle reason)


def pcie_slot(doc: Doc) -> None:
    g = _gpu(doc)
    g["pcie"]["gen_max"] = 4
    g["pcie"]["gen_current"] = 4


def hw_slowdown(doc: Doc) -> None:
    _reasons(_gpu(doc), "hw_slowdown", mask=0x8)


def hw_thermal(doc: Doc) -> None:
    g = _gpu(doc)
    _reasons(g, "hw_slowdown", "hw_thermal_slowdown", mask=0x48)
    g["thermal"]["gpu_c"] = 80


def power_brake(doc: Doc) -> None:
    _reasons(_gpu(doc), "hw_slowdown", "hw_power_brake_slowdown", mask=0x88)


def power_cap_idle(doc: Doc) -> None:
    _reasons(_gpu(doc), "gpu_idle", "sw_power_cap", mask=0x5)


def power_limit_lowered(doc: Doc) -> None:
    _gpu(doc)["power"]["limit_w"] = 450.0


def temp_near(doc: Doc) -> None:
    g = _gpu(doc)
    g["thermal"]["gpu_c"] = g["thermal"]["slowdown_c"] - 3


def ecc_off(doc: Doc) -> None:
    g = _gpu(doc)
    g["ecc"]["enabled"] = False
    g["ecc"]["pending_enabled"] = False


def ecc_uncorrectable(doc: Doc) -> None:
    g = _gpu(doc)
    g["ecc"]["volatile_uncorrected"] = 2
    g["ecc"]["aggregate_uncorrected"] = 2


def remap_pending(doc: Doc) -> None:
    rr = _gpu(doc)["remapped_rows"]
    rr["uncorrectable"] = 1
    rr["pending"] = True


def remap_failed(doc: Doc) -> None:
    rr = _gpu(doc)["remapped_rows"]
    rr["uncorrectable"] = 512
    rr["failed"] = True


def retired_pending(doc: Doc) -> None:
    _gpu(doc)["retired_pages"] = {"single_bit": 3, "double_bit": 1, "pending": True}
    for key in ("retired_pages.single_bit", "retired_pages.double_bit", "retired_pages.pending"):
        _gpu(doc)["unavailable"].pop(key, None)


def nvlink_down(doc: Doc) -> None:
    for link in _gpu(doc, 1)["nvlinks"][:2]:
        link.update(active=False, version=None, remote_is_switch=None)
    doc["machine"]["links"][0]["nvlink_count"] = 16


def fabric_not_started(doc: Doc) -> None:
    for gpu in doc["machine"]["gpus"]:
        gpu["fabric_state"] = "not_started"


def mig_on(doc: Doc) -> None:
    g = _gpu(doc)
    g["mig_enabled"] = True
    g["mig_pending"] = True
    g["mig_instances"] = [
        {"uuid": f"MIG-0000000{k}-aaaa-bbbb-cccc-dddddddddddd", "gpu_instance_id": k,
         "compute_instance_id": 0, "memory_total_bytes": 35 * GIB, "multiprocessor_count": 32}
        for k in range(3)
    ]


def processes(doc: Doc) -> None:
    g = _gpu(doc)
    g["processes"] = [{"pid": 4242, "name": "python3", "kind": "compute",
                       "used_memory_bytes": 40 * GIB}]
    g["memory_used_bytes"] += 40 * GIB


def memory_unseen(doc: Doc) -> None:
    _gpu(doc)["memory_used_bytes"] = 70 * GIB


def torch_newer(doc: Doc) -> None:
    doc["machine"]["host"]["torch_version"] = "2.11.0+cu140"
    doc["machine"]["host"]["torch_cuda_version"] = "14.0"


def torch_minor_newer(doc: Doc) -> None:
    doc["machine"]["host"]["torch_cuda_version"] = "13.2"


def mixed_models(doc: Doc) -> None:
    g = _gpu(doc, 1)
    g["name"] = "NVIDIA H100 80GB HBM3"
    g["pci_device_id"] = 0x2330


def xid_critical(doc: Doc) -> None:
    doc["machine"]["xid_counts"] = {"79": 1, "13": 4}


def compute_prohibited(doc: Doc) -> None:
    _gpu(doc)["compute_mode"] = "prohibited"


def unknown_model(doc: Doc) -> None:
    g = _gpu(doc)
    g["name"] = "NVIDIA Imaginary X1"
    g["pci_device_id"] = 0x9999


FAULTS = [
    Fault("pcie-width-degraded", "h200-1gpu", pcie_width, {"pcie.width-degraded": "FAIL"}),
    Fault("pcie-gen-below-max-busy", "h200-1gpu", pcie_gen_busy, {"pcie.gen-below-max": "WARN"}),
    Fault("pcie-gen-below-max-idle", "h200-1gpu", pcie_gen_idle,
          {"pcie.gen-below-max-idle": "INFO"}),
    Fault("pcie-slot-below-gpu", "h200-1gpu", pcie_slot, {"pcie.slot-below-gpu": "WARN"}),
    Fault("hw-slowdown", "h200-1gpu", hw_slowdown, {"clocks.hw-slowdown": "FAIL"}),
    Fault("hw-thermal-slowdown", "h200-1gpu", hw_thermal,
          {"clocks.hw-slowdown": "FAIL", "clocks.hw-thermal-slowdown": "FAIL"}),
    Fault("hw-power-brake", "h200-1gpu", power_brake,
          {"clocks.hw-slowdown": "FAIL", "clocks.hw-power-brake": "FAIL"}),
    Fault("power-cap-while-idle", "h200-1gpu", power_cap_idle,
          {"clocks.power-cap-while-idle": "WARN"}),
    Fault("power-limit-lowered", "h200-1gpu", power_limit_lowered,
          {"power.limit-below-default": "WARN"}),
    Fault("temperature-near-slowdown", "h200-1gpu", temp_near, {"thermal.near-slowdown": "WARN"}),
    Fault("ecc-off", "h200-1gpu", ecc_off, {"ecc.disabled": "WARN"}),
    Fault("ecc-uncorrectable", "h200-1gpu", ecc_uncorrectable,
          {"ecc.uncorrectable-volatile": "FAIL"}),
    Fault("remapped-rows-pending", "h200-1gpu", remap_pending, {"remapped-rows.pending": "WARN"}),
    Fault("remapped-rows-failed", "h200-1gpu", remap_failed, {"remapped-rows.failed": "FAIL"}),
    Fault("retired-pages-pending", "h200-1gpu", retired_pending,
          {"retired-pages.pending": "WARN"}),
    Fault("nvlink-down", "h200-2gpu", nvlink_down, {"nvlink.down": "FAIL"}),
    Fault("fabric-not-started", "h200-2gpu", fabric_not_started, {"fabric.not-ready": "FAIL"}),
    Fault("mig-enabled", "h200-1gpu", mig_on, {"mig.enabled": "INFO"}),
    Fault("processes-holding-memory", "h200-1gpu", processes, {"memory.in-use": "WARN"}),
    Fault("memory-held-unseen", "h200-1gpu", memory_unseen, {"memory.in-use-unseen": "WARN"}),
    Fault("torch-cuda-newer-than-driver", "h200-1gpu", torch_newer,
          {"torch.cuda-newer-than-driver": "FAIL"}),
    Fault("torch-cuda-minor-newer", "h200-1gpu", torch_minor_newer,
          {"torch.cuda-minor-newer-than-driver": "WARN"}),
    Fault("mixed-gpu-models", "h200-2gpu", mixed_models, {"box.mixed-models": "WARN"}),
    Fault("xid-critical", "h200-1gpu", xid_critical, {"xid.critical": "FAIL"}),
    Fault("compute-prohibited", "h200-1gpu", compute_prohibited,
          {"mode.compute-prohibited": "FAIL"}),
    Fault("unknown-model", "h200-1gpu", unknown_model, {"spec.unknown-model": "INFO"}),
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
    doc["findings"] = [f.model_dump(mode="json") for f in check_machine(machine)]
    doc["source"] = f"planted fault {fault.name} in {fault.base}"
    return doc


def fault_path(fault: Fault) -> Path:
    return FAULTS_DIR / f"{fault.name}.json"


def render(doc: Doc) -> str:
    return json.dumps(doc, indent=2) + "\n"


if __name__ == "__main__":
    FAULTS_DIR.mkdir(exist_ok=True)
    for fault in FAULTS:
        fault_path(fault).write_text(render(planted(fault)))
    print(f"wrote {len(FAULTS)} planted-fault snapshots to {FAULTS_DIR}")
