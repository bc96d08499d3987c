"""The hw layer, run on CPU over NVML traces recorded on real H200 machines."""

from __future__ import annotations

import copy
import json

import pytest

from gpuaudit.hw import ReplayNvml, read_nvml
from gpuaudit.hw.nvml import RecordingNvml, Unsupported
from gpuaudit.model import LinkKind, Machine

from .conftest import FIXTURES

REAL = ["h200-1gpu", "h200-2gpu"]


def trace(name: str) -> dict:
    return json.loads((FIXTURES / name / "nvml_trace.json").read_text())


def recorded_machine(name: str) -> Machine:
    return Machine.model_validate(
        json.loads((FIXTURES / name / "inspect.json").read_text())["machine"])


@pytest.mark.parametrize("name", REAL)
def test_replay_reproduces_the_recorded_snapshot(name):
    facts = read_nvml(ReplayNvml(trace(name)))
    machine = recorded_machine(name)
    assert facts.gpus == machine.gpus
    assert facts.links == machine.links
    assert facts.driver_version == machine.driver_version == "580.159.04"
    assert facts.cuda_driver_version == machine.cuda_driver_version == "13.0"


def test_one_h200_as_nvidia_smi_saw_it():
    (gpu,) = read_nvml(ReplayNvml(trace("h200-1gpu"))).gpus
    assert gpu.name == "NVIDIA H200"
    assert gpu.pci_device_id == 0x2335
    assert gpu.memory_total_bytes // (1 << 20) == 143771  # nvidia-smi: 143771 MiB
    assert (gpu.pcie.gen_current, gpu.pcie.width_current) == (5, 16)
    assert gpu.clocks.sm_max_mhz == 1980
    assert gpu.clocks.event_reasons == ("gpu_idle",)
    assert gpu.power.limit_w == 700.0 and gpu.power.min_limit_w == 200.0
    assert gpu.thermal.slowdown_c == 89 and gpu.thermal.shutdown_c == 95
    assert gpu.ecc.enabled is True and gpu.ecc.volatile_uncorrected == 0
    assert gpu.remapped_rows.pending is False
    assert gpu.virtualization_mode == "passthrough"
    assert gpu.cpu_affinity == tuple(range(16))
    assert gpu.compute_capability == "9.0"
    assert gpu.gpm_supported is True
    # Unsupported readings are None with NVML's reason, never zero.
    assert gpu.retired_pages.pending is None
    assert gpu.unavailable["retired_pages.pending"] == "Not Supported"
    assert gpu.nvlinks == () and gpu.unavailable["nvlinks"] == "Not Supported"


def test_two_h200s_joined_by_18_nvlinks_through_nvswitch():
    facts = read_nvml(ReplayNvml(trace("h200-2gpu")))
    assert [g.nvlinks_active for g in facts.gpus] == [18, 18]
    assert all(link.remote_is_switch for g in facts.gpus for link in g.nvlinks)
    (link,) = facts.links
    assert (link.kind, link.nvlink_count, link.label) == (LinkKind.NVLINK, 18, "NV18")
    assert link.p2p_read is True


def test_a_link_down_in_the_trace_shows_in_the_topology():
    t = copy.deepcopy(trace("h200-2gpu"))
    for k in range(4):
        t["calls"][f"nvmlDeviceGetNvLinkState(gpu1,{k})"] = {"value": 0}
    facts = read_nvml(ReplayNvml(t))
    assert facts.gpus[1].nvlinks_active == 14
    assert facts.links[0].nvlink_count == 14  # the pair has what the weaker GPU brings


def test_pcie_topology_without_nvlink():
    t = copy.deepcopy(trace("h200-2gpu"))
    for key in list(t["calls"]):
        if key.startswith("nvmlDeviceGetNvLinkState"):
            t["calls"][key] = {"error": "Not Supported"}
    t["calls"]["nvmlDeviceGetTopologyCommonAncestor(gpu0,gpu1)"] = {"value": 50}
    t["calls"]["nvmlDeviceGetP2PStatus(gpu0,gpu1,0)"] = {"value": 2}  # chipset not supported
    (link,) = read_nvml(ReplayNvml(t)).links
    assert (link.kind, link.label, link.p2p_read) == (LinkKind.SYSTEM, "SYS", False)


def test_no_answer_from_a_gpu_costs_fields_not_the_snapshot():
    t = copy.deepcopy(trace("h200-2gpu"))
    t["calls"] = {k: v for k, v in t["calls"].items() if "gpu1" not in k or "Name" in k}
    facts = read_nvml(ReplayNvml(t))
    assert len(facts.gpus) == 2
    assert facts.gpus[1].name == "NVIDIA H200"
    assert facts.gpus[1].memory_total_bytes is None
    assert facts.gpus[1].unavailable["memory_total_bytes"] == "not recorded"
    assert facts.gpus[0].memory_total_bytes is not None


def test_recording_keeps_answers_and_errors():
    class Fake:
        def query(self, fn, *args):
            if fn == "bad":
                raise Unsupported("Not Supported")
            return 7

    rec = RecordingNvml(Fake())
    assert rec.query("good", 1) == 7
    with pytest.raises(Unsupported):
        rec.query("bad")
    replay = ReplayNvml(rec.trace())
    assert replay.query("good", 1) == 7
    with pytest.raises(Unsupported, match="Not Supported"):
        replay.query("bad")
