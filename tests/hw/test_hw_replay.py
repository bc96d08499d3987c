"""The hw layer, run on CPU over NVML traces recorded on real H200 machines."""

from __future__ import annotations

import copy
import json

import pytest

from gpuaudit.hw import ReplayNvml, read_nvml
from gpuaudit.hw.nvml import RecordingNvml, Unsupported
from gpuaudit.model import LinkKind, Machine
from tests.conftest import FIXTURES

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


def smi_q(name: str) -> dict[str, dict[str, str]]:
    """`nvidia-smi -q` of a fixture, per PCI bus id: "Section/Sub/Key" → value."""
    gpus: dict[str, dict[str, str]] = {}
    fields: dict[str, str] = {}
    path: list[tuple[int, str]] = []
    for line in (FIXTURES / name / "nvidia-smi.txt").read_text().splitlines():
        if line.startswith("GPU 0000"):
            fields = gpus.setdefault(line.split()[1], {})
            path = []
            continue
        if not line.startswith(" ") or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        key, _, value = (part.strip() for part in line.partition(":"))
        path = [(i, k) for i, k in path if i < indent]
        if value:
            fields["/".join([k for _, k in path] + [key])] = value
        else:
            path.append((indent, key))
    return gpus


def number(text: str) -> int:
    return int(text.split()[0])


def test_two_h200s_as_nvidia_smi_saw_them():
    # Our readings against nvidia-smi -q from the same recording, GPU by GPU.
    smi = smi_q("h200-2gpu")
    gpus = read_nvml(ReplayNvml(trace("h200-2gpu"))).gpus
    assert [g.pci_bus_id for g in gpus] == [b[4:].lower() for b in smi]
    for gpu, q in zip(gpus, smi.values(), strict=True):
        agg = "ECC Errors/Aggregate/"
        assert gpu.ecc.aggregate_uncorrected == sum(number(q[agg + k]) for k in (
            "SRAM Uncorrectable Parity", "SRAM Uncorrectable SEC-DED", "DRAM Uncorrectable"))
        assert gpu.ecc.aggregate_corrected == (number(q[agg + "SRAM Correctable"])
                                               + number(q[agg + "DRAM Correctable"]))
        vol = "ECC Errors/Volatile/"
        assert gpu.ecc.volatile_uncorrected == number(q[vol + "DRAM Uncorrectable"]) == 0
        rr = gpu.remapped_rows
        assert rr.uncorrectable == number(q["Remapped Rows/Uncorrectable Error"])
        assert rr.correctable == number(q["Remapped Rows/Correctable Error"])
        assert (rr.pending, rr.failed) == (
            q["Remapped Rows/Pending"] == "Yes",
            q["Remapped Rows/Remapping Failure Occurred"] == "Yes")
        clk = gpu.clocks
        assert (clk.applications_graphics_mhz, clk.applications_memory_mhz) == (
            number(q["Applications Clocks/Graphics"]), number(q["Applications Clocks/Memory"]))
        assert (clk.default_applications_graphics_mhz, clk.default_applications_memory_mhz) == (
            number(q["Default Applications Clocks/Graphics"]),
            number(q["Default Applications Clocks/Memory"]))
        assert (clk.graphics_max_mhz, clk.sm_max_mhz) == (
            number(q["Max Clocks/Graphics"]), number(q["Max Clocks/SM"]))
        assert gpu.recovery_action == q["GPU Recovery Action"].lower() == "none"
        # This driver prints temperatures against T.Limit (the max operating temperature):
        # the margin now, and the slowdown and shutdown points as offsets from it.
        t = "Temperature/"
        t_limit = number(q[t + "GPU Current Temp"]) + number(q[t + "GPU T.Limit Temp"])
        assert gpu.thermal.gpu_max_operating_c == t_limit
        assert gpu.thermal.slowdown_c == t_limit - number(q[t + "GPU Slowdown T.Limit Temp"])
        assert gpu.thermal.shutdown_c == t_limit - number(q[t + "GPU Shutdown T.Limit Temp"])
    # The one real problem on that box: GPU 1's two historic DRAM errors, one row remapped.
    assert [(g.ecc.aggregate_uncorrected, g.remapped_rows.uncorrectable) for g in gpus] == [
        (0, 0), (2, 1)]


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


def _with_calls(name: str, calls: dict) -> dict:
    t = copy.deepcopy(trace(name))
    t["calls"].update(calls)
    return t


def test_mig_instances_are_read_per_slot():
    gib = 1 << 30
    calls = {
        "nvmlDeviceGetMigMode(gpu0)": {"value": [1, 1]},
        "nvmlDeviceGetMaxMigDeviceCount(gpu0)": {"value": 7},
        "nvmlDeviceGetUUID(gpu0/mig1)": {"error": "Not Found"},  # an empty slot
    }
    for k in (0, 2):
        calls |= {
            f"nvmlDeviceGetUUID(gpu0/mig{k})": {"value": f"MIG-{k}"},
            f"nvmlDeviceGetAttributes_v2(gpu0/mig{k})": {"value": {"multiprocessorCount": 16}},
            f"nvmlDeviceGetMemoryInfo(gpu0/mig{k})": {"value": {"total": 18 * gib}},
            f"nvmlDeviceGetGpuInstanceId(gpu0/mig{k})": {"value": 10 + k},
            f"nvmlDeviceGetComputeInstanceId(gpu0/mig{k})": {"value": 0},
        }
    (gpu,) = read_nvml(ReplayNvml(_with_calls("h200-1gpu", calls))).gpus
    assert gpu.mig_enabled is True
    assert [m.uuid for m in gpu.mig_instances] == ["MIG-0", "MIG-2"]
    assert gpu.mig_instances[1].gpu_instance_id == 12
    assert gpu.mig_instances[0].memory_total_bytes == 18 * gib
    assert gpu.mig_instances[0].multiprocessor_count == 16


def test_processes_are_merged_named_and_sentinels_dropped():
    calls = {
        "nvmlDeviceGetComputeRunningProcesses(gpu0)": {"value": [
            {"pid": 4242, "usedGpuMemory": 3 << 30},
            {"pid": 777, "usedGpuMemory": None},  # NVML could not say
        ]},
        "nvmlDeviceGetGraphicsRunningProcesses(gpu0)": {"value": [
            {"pid": 4242, "usedGpuMemory": 3 << 30},  # the same process, seen twice
            {"pid": 9, "usedGpuMemory": (1 << 64) - 1},  # NVML_VALUE_NOT_AVAILABLE
        ]},
        "nvmlSystemGetProcessName(4242)": {"value": "python3"},
    }
    (gpu,) = read_nvml(ReplayNvml(_with_calls("h200-1gpu", calls))).gpus
    by_pid = {p.pid: p for p in gpu.processes}
    assert set(by_pid) == {4242, 777, 9}
    assert by_pid[4242].name == "python3" and by_pid[4242].kind == "compute"
    assert by_pid[4242].used_memory_bytes == 3 << 30
    assert by_pid[777].used_memory_bytes is None and by_pid[777].name is None
    assert by_pid[9].kind == "graphics" and by_pid[9].used_memory_bytes is None


def test_numa_node_falls_back_to_sysfs_and_minus_one_is_none():
    bus = "/sys/bus/pci/devices/0000:00:06.0/numa_node"
    (gpu,) = read_nvml(ReplayNvml(_with_calls(
        "h200-1gpu", {f"read_file({bus})": {"value": "1"}}))).gpus
    assert gpu.numa_node == 1 and "numa_node" not in gpu.unavailable
    (gpu,) = read_nvml(ReplayNvml(_with_calls(
        "h200-1gpu", {f"read_file({bus})": {"value": "-1"}}))).gpus
    assert gpu.numa_node is None
    assert "no NUMA node" in gpu.unavailable["numa_node"]


def test_event_reasons_fall_back_to_the_older_nvml_name():
    calls = {
        "nvmlDeviceGetCurrentClocksEventReasons(gpu0)": {
            "error": "nvmlDeviceGetCurrentClocksEventReasons is not in this nvidia-ml-py"},
        "nvmlDeviceGetCurrentClocksThrottleReasons(gpu0)": {"value": 0x48},
    }
    (gpu,) = read_nvml(ReplayNvml(_with_calls("h200-1gpu", calls))).gpus
    assert gpu.clocks.event_reasons == ("hw_slowdown", "hw_thermal_slowdown")
    assert gpu.clocks.event_reasons_mask == 0x48
