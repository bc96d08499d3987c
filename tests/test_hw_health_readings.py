"""The hw readings the health checks need: lost GPUs, InfoROM, recovery action, application
clocks, kernel-log XIDs by bus (inspect and the monitor), the CUDA environment."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone

from gpuaudit.hw import ReplayNvml, read_nvml, snapshot_from
from gpuaudit.hw.host import cuda_env_set
from gpuaudit.hw.nvml import KERNEL_XIDS, XID_EVENTS, RecordingNvml, Unsupported
from gpuaudit.hw.telemetry import Sampler
from gpuaudit.hw.xids import KmsgFollower, parse_xids, parse_xids_by_bus, xid_bus
from gpuaudit.telemetry.metrics import XidTally

from .conftest import FIXTURES

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


def trace(name: str = "h200-2gpu") -> dict:
    return json.loads((FIXTURES / name / "nvml_trace.json").read_text())


def test_kernel_log_xids_are_kept_per_bus_in_both_driver_formats():
    log = ("[  1.0] NVRM: Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus.\n"
           "[  2.0] NVRM: Xid (0000:2A:00): 13, Graphics Exception\n"  # older drivers
           "[  3.0] NVRM: Xid (PCI:0000:2a:00.0): 13, Graphics Exception\n"
           "[  4.0] some other line 79\n")
    assert parse_xids_by_bus(log) == {"0000:18:00": {79: 1}, "0000:2a:00": {13: 2}}
    assert parse_xids(log) == {79: 1, 13: 2}
    # NVML's bus id and the kernel's name one GPU.
    assert xid_bus("00000000:2A:00.0") == xid_bus("0000:2a:00") == "0000:2a:00"


def test_kmsg_follower_takes_only_lines_written_after_it_started(tmp_path):
    log = tmp_path / "kmsg"
    log.write_text("6,1,1,-;NVRM: Xid (PCI:0000:18:00): 48, history\n")
    follower = KmsgFollower(str(log))
    assert follower.reason is None and follower.new_xids() == []
    with log.open("a") as f:
        f.write("6,2,2,-;NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus\n"
                "6,3,3,-;usb 1-1: new device\n")
    assert follower.new_xids() == [("0000:18:00", 79)]
    assert follower.new_xids() == []
    follower.close()
    missing = KmsgFollower(str(tmp_path / "absent"))
    assert missing.new_xids() == [] and "cannot follow the kernel log" in missing.reason


def test_snapshot_totals_the_kernel_xids_it_keeps_per_bus(monkeypatch):
    monkeypatch.setattr("gpuaudit.hw.snapshot.read_kernel_xids",
                        lambda: ({"0000:00:06": {79: 1, 13: 2}, "0000:00:07": {13: 1}}, None))
    m = snapshot_from(ReplayNvml(trace()))
    assert m.xid_counts == {79: 1, 13: 3}
    assert m.xid_counts_by_bus == {"0000:00:06": {79: 1, 13: 2}, "0000:00:07": {13: 1}}
    monkeypatch.setattr("gpuaudit.hw.snapshot.read_kernel_xids",
                        lambda: (None, "kernel log not readable: Operation not permitted"))
    m = snapshot_from(ReplayNvml(trace()))
    assert m.xid_counts is None and m.xid_counts_by_bus is None
    assert "not permitted" in m.unavailable["xid_counts_by_bus"]


def test_a_gpu_answering_nothing_is_read_as_lost_without_asking_more():
    t = copy.deepcopy(trace())
    t["calls"] = {k: ({"error": "GPU is lost"} if "(gpu1" in k else v)
                  for k, v in t["calls"].items()}
    rec = RecordingNvml(ReplayNvml(t))
    facts = read_nvml(rec)
    lost = facts.gpus[1]
    assert (lost.name, lost.error, lost.memory_total_bytes) == ("unknown", "GPU is lost", None)
    asked = [k for k in rec.calls if k.startswith("nvmlDevice") and "(gpu1" in k
             and "gpu0" not in k]
    assert len(asked) == 3  # name, UUID, memory: then it stops
    assert facts.gpus[0].error is None and facts.gpus[0].name == "NVIDIA H200"


def test_a_gpu_that_answers_some_queries_is_not_lost():
    t = copy.deepcopy(trace())
    t["calls"]["nvmlDeviceGetName(gpu1)"] = {"error": "Unknown Error"}
    gpu = read_nvml(ReplayNvml(t)).gpus[1]
    assert gpu.error is None and gpu.memory_total_bytes is not None


def test_inforom_recovery_action_and_application_clocks_are_read():
    t = copy.deepcopy(trace())
    t["calls"].update({
        "nvmlDeviceValidateInforom(gpu0)": {"value": None},
        "nvmlDeviceValidateInforom(gpu1)": {"error": "Corrupted infoROM"},
        "nvmlDeviceGetFieldValues(gpu0,230:0)": {"value": [{"field": 230, "scope": 0,
                                                             "value": 0}]},
        "nvmlDeviceGetFieldValues(gpu1,230:0)": {"value": [{"field": 230, "scope": 0,
                                                             "value": 1}]},
        "nvmlDeviceGetApplicationsClock(gpu0,0)": {"value": 1500},
        "nvmlDeviceGetDefaultApplicationsClock(gpu0,0)": {"value": 1980},
        "nvmlDeviceGetMaxClockInfo(gpu0,0)": {"value": 1980},
    })
    # GPU 1's application clocks as a trace from before these queries has them: absent.
    for key in ("nvmlDeviceGetApplicationsClock(gpu1,0)",
                "nvmlDeviceGetDefaultApplicationsClock(gpu1,0)"):
        del t["calls"][key]
    g0, g1 = read_nvml(ReplayNvml(t)).gpus
    assert (g0.inforom_valid, g1.inforom_valid) == (True, False)
    assert "inforom_valid" not in g1.unavailable
    assert (g0.recovery_action, g1.recovery_action) == ("none", "gpu_reset")
    assert (g0.clocks.applications_graphics_mhz, g0.clocks.default_applications_graphics_mhz,
            g0.clocks.graphics_max_mhz) == (1500, 1980, 1980)
    assert g1.clocks.applications_graphics_mhz is None
    assert g1.unavailable["clocks.applications_graphics_mhz"] == "not recorded"


class _Box:
    """Two GPUs on known buses; NVML's XID events and the kernel log as the test sets them."""

    def __init__(self, nvml_events: list | None, kernel: list[list]) -> None:
        self.nvml_events, self.kernel = nvml_events, kernel

    def query(self, fn, *args):
        if fn == "nvmlDeviceGetCount":
            return 2
        if fn == "nvmlDeviceGetPciInfo_v3":
            return {"busId": ["00000000:18:00.0", "00000000:2A:00.0"][args[0].index]}
        if fn == XID_EVENTS:
            if self.nvml_events is None:
                raise Unsupported("no GPU here reports XID events to NVML")
            events, self.nvml_events = self.nvml_events, []
            return events
        if fn == KERNEL_XIDS:
            lines, self.kernel = self.kernel, []
            return lines
        raise Unsupported("Not Supported")


def test_monitor_counts_kernel_log_xids_per_gpu_when_nvml_gives_no_events():
    box = _Box(None, [["0000:18:00", 79], ["0000:2a:00", 13], ["0000:2a:00", 13],
                      ["0000:99:00", 48]])  # a bus no watched GPU has: not ours to count
    sampler = Sampler(box, hostname="h", interval_s=1)
    tally = XidTally()
    sample = sampler.sample(NOW)
    tally.add(sample)
    assert [[e.code for e in g.xid_events] for g in sample.gpus] == [[79], [13, 13]]
    assert tally.counts == {(0, 79): 1, (1, 13): 2}
    assert sampler.xid_reason is None  # XIDs are being counted, from the kernel log


def test_monitor_does_not_count_an_xid_twice_when_nvml_reports_it():
    box = _Box([{"gpu": 0, "code": 79}], [["0000:18:00", 79]])
    sample = Sampler(box, hostname="h", interval_s=1).sample(NOW)
    assert [[e.code for e in g.xid_events] for g in sample.gpus] == [[79], []]


def test_the_monitor_says_why_when_no_xid_source_answers():
    class Neither(_Box):
        def query(self, fn, *args):
            if fn == KERNEL_XIDS:
                raise Unsupported("cannot follow the kernel log (/dev/kmsg): Permission denied")
            return super().query(fn, *args)

    sampler = Sampler(Neither(None, []), hostname="h", interval_s=1)
    sampler.sample(NOW)
    assert sampler.xid_reason == "no GPU here reports XID events to NVML"


def test_live_xid_event_of_a_gpu_that_fell_off_the_bus_keeps_its_index(monkeypatch):
    import sys

    from gpuaudit.hw.nvml_live import LiveNvml

    from . import fake_pynvml

    module, driver = fake_pynvml.make()

    def index(handle):
        if handle == "h1":  # the GPU that fell off the bus no longer answers
            raise module.NVMLError(15)  # NVML_ERROR_GPU_IS_LOST
        return int(handle[1:])

    module.nvmlDeviceGetIndex = index
    monkeypatch.setitem(sys.modules, "pynvml", module)
    live = LiveNvml()
    try:
        assert live.query(XID_EVENTS) == []  # registers
        driver.events = [(1, 79), (0, 48)]
        assert live.query(XID_EVENTS) == [{"gpu": 1, "code": 79}, {"gpu": 0, "code": 48}]
    finally:
        live.close()


def test_cuda_env_vars_that_change_every_cuda_call_are_named():
    env = {"CUDA_LAUNCH_BLOCKING": "1", "CUDA_INJECTION64_PATH": "/opt/x.so", "HOME": "/root",
           "CUDA_VISIBLE_DEVICES": "0"}
    assert cuda_env_set(env) == ("CUDA_LAUNCH_BLOCKING", "CUDA_INJECTION64_PATH")
    assert cuda_env_set({"CUDA_LAUNCH_BLOCKING": "0"}) == ()
