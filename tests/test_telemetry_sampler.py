"""The monitor's sampler, on telemetry traces built from the real H200 recordings."""

from __future__ import annotations

import json
import types
from datetime import datetime
from pathlib import Path

import pytest

from gpuaudit.errors import BadInputError
from gpuaudit.hw.nvml import GPM_METRICS, XID_EVENTS, Dev, LiveNvml, Unsupported
from gpuaudit.hw.telemetry import Sampler, TraceRecorder, TraceReplay
from tests import telemetry_traces as tt

IDLE_1GPU = json.loads((Path(__file__).parent / "fixtures/h200-1gpu/nvml_trace.json")
                       .read_text())["calls"]




def test_committed_traces_are_what_the_builders_make():
    for name, build in tt.TRACES.items():
        committed = json.loads((tt.OUT / f"{name}.json").read_text())
        assert committed == json.loads(json.dumps(build())), name


def test_idle_h200_reads_as_recorded():
    samples = tt.replay(tt.TRACES["h200-1gpu-idle"]())
    assert len(samples) == 10
    assert [s.time.second for s in samples[:3]] == [57, 58, 59]  # 1 s apart from recorded_at
    g = samples[0].gpus[0]
    mem = IDLE_1GPU["nvmlDeviceGetMemoryInfo(gpu0)"]["value"]
    assert (g.index, g.name, g.error) == (0, "NVIDIA H200", None)
    assert g.uuid == IDLE_1GPU["nvmlDeviceGetUUID(gpu0)"]["value"]
    assert (g.utilization_gpu_pct, g.utilization_memory_pct) == (0, 0)
    assert (g.memory_used_bytes, g.memory_total_bytes) == (mem["used"], mem["total"])
    assert g.power_w == pytest.approx(78.415) and g.power_limit_w == 700.0
    assert g.temperature_gpu_c == 31.0 and g.sm_clock_mhz == 345 and g.memory_clock_mhz == 3201
    assert g.clock_event_reasons == ("gpu_idle",)
    assert (g.pcie_link_gen, g.pcie_link_gen_max, g.pcie_link_width, g.pcie_link_width_max) \
        == (5, 5, 16, 16)
    assert (g.ecc_uncorrected_volatile, g.remapped_rows_uncorrectable) == (0, 0)
    assert g.remapping_failed is False and g.processes == ()
    # What the recording lacks is missing, with the reason, never a made-up value.
    assert g.energy_j is None and g.unavailable["energy_j"] == "not recorded"
    assert g.sm_activity_pct is None and g.unavailable["sm_activity_pct"] == "not recorded"
    assert g.activity_pct == 0  # falls back to NVML utilization without GPM
    # GPM is supported, so PCIe rates are left to it rather than the 20 ms NVML probe.
    assert g.pcie_rx_bytes_per_s is None and "GPM" in g.unavailable["pcie_rx_bytes_per_s"]
    assert g.unavailable["nvlink_rx_bytes"] == "no NVLink up"


def test_load_reads_gpm_and_processes():
    samples = tt.replay(tt.TRACES["h200-1gpu-load"]())
    busy = [s.gpus[0] for s in samples[2:8]]
    assert all(g.sm_activity_pct == 96.0 and g.tensor_activity_pct == 71.0 for g in busy)
    assert all(g.dram_bandwidth_util_pct == 38.0 and g.activity_pct == 96.0 for g in busy)
    assert busy[0].gpm_pcie_rx_bytes_per_s == 0.0
    (p,) = busy[0].processes
    assert (p.pid, p.user, p.command, p.used_memory_bytes) == (4242, "alice", "python train.py",
                                                               139 << 30)
    assert samples[0].gpus[0].utilization_gpu_pct == 0 and samples[8].gpus[0].processes == ()


def test_xid_is_reported_and_a_lost_gpu_does_not_stop_the_others():
    samples = tt.replay(tt.TRACES["h200-2gpu-xid-lost"]())
    xids = [(i, g.index, e.code) for i, s in enumerate(samples) for g in s.gpus
            for e in g.xid_events]
    assert xids == [(3, 1, 79)]
    assert samples[3].gpus[1].xid_events[0].time == samples[3].time
    for s in samples[4:]:
        g0, g1 = s.gpus
        assert g0.error is None and g0.utilization_gpu_pct == 100
        assert g1.error == "GPU is lost" and g1.power_w is None and g1.uuid is not None
    # The 2-GPU host has all 18 NVLinks up; their counters were not recorded.
    assert samples[0].gpus[0].unavailable["nvlink_tx_bytes"] == "not recorded"


def test_thermal_slowdown_is_read_as_reasons():
    g = tt.replay(tt.TRACES["h200-1gpu-thermal"]())[3].gpus[0]
    assert g.clock_event_reasons == ("sw_thermal_slowdown", "hw_thermal_slowdown")
    assert g.temperature_gpu_c == 92 and g.sm_clock_mhz == 1410


def test_recording_a_replay_gives_the_same_samples():
    trace = tt.TRACES["h200-2gpu-xid-lost"]()
    src = TraceReplay(trace)
    rec = TraceRecorder(src)
    sampler = Sampler(rec, hostname="vm", interval_s=1.0)
    rec.end_setup()
    while (t := src.advance()) is not None:
        sampler.sample(t)
        rec.end_frame(t)
    again = rec.trace(hostname="vm", interval_s=1.0)
    assert tt.replay(again) == tt.replay(trace)
    assert len(again["frames"]) == 6 and "nvmlDeviceGetCount()" in again["setup"]


def test_only_the_chosen_gpus_are_sampled():
    src = TraceReplay(tt.TRACES["h200-2gpu-xid-lost"]())
    sampler = Sampler(src, hostname="vm", interval_s=1.0, gpus=[1])
    s = sampler.sample(src.advance())
    assert [g.index for g in s.gpus] == [1]


@pytest.mark.parametrize(("doc", "message"), [
    ({"format": "something"}, "not a gpuaudit telemetry trace"),
    ({"format": "gpuaudit-telemetry-trace", "version": 99, "frames": []}, "newer"),
])
def test_bad_traces_are_one_line_errors(doc, message):
    with pytest.raises(BadInputError, match=message):
        TraceReplay(doc)


def test_a_garbled_frame_names_its_index(tmp_path):
    trace = tt.TRACES["h200-1gpu-idle"]()
    trace["frames"][1]["time"] = "yesterday"
    src = TraceReplay(trace)
    src.advance()
    with pytest.raises(BadInputError, match="frame 1"):
        src.advance()
    bad = tmp_path / "t.json"
    bad.write_text("{")
    with pytest.raises(BadInputError, match="cannot read telemetry trace"):
        TraceReplay.from_file(bad)


# --- LiveNvml's stateful queries, against a stand-in for nvidia-ml-py -------------------------

class _Error(Exception):
    def __init__(self, code: int = 3) -> None:
        super().__init__(code)
        self.code = code

    def __str__(self) -> str:
        return {3: "Not Supported", 10: "Timeout"}.get(self.code, f"error {self.code}")


class _Timeout(_Error):
    def __init__(self) -> None:
        super().__init__(10)


def fake_nvml(events: list[tuple[int, int]], gpm_values: dict[int, float]) -> LiveNvml:
    freed: list[int] = []
    samples = iter(range(1, 100))

    class Metric:
        def __init__(self) -> None:
            self.metricId, self.nvmlReturn, self.value = 0, 0, 0.0

    class Request:
        def __init__(self) -> None:
            self.metrics = [Metric() for _ in range(20)]

        def fill(self) -> None:
            for m in self.metrics[: self.numMetrics]:
                if m.metricId in gpm_values:
                    m.value = gpm_values[m.metricId] * (self.sample2 - self.sample1)
                else:
                    m.nvmlReturn = 3

    queue = list(events)

    def wait(_set, _timeout):
        if not queue:
            raise _Timeout()
        gpu, code = queue.pop(0)
        return types.SimpleNamespace(device=f"h{gpu}", eventType=8, eventData=code)

    nvml = types.SimpleNamespace(
        NVMLError=_Error, NVMLError_Timeout=_Timeout, nvmlEventTypeXidCriticalError=8,
        NVML_GPM_METRICS_GET_VERSION=1, c_nvmlGpmMetricsGet_t=Request,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetIndex=lambda h: int(h[1:]),
        nvmlEventSetCreate=lambda: "set", nvmlEventSetFree=lambda s: None,
        nvmlDeviceRegisterEvents=lambda h, mask, s: None,
        nvmlEventSetWait_v2=wait,
        nvmlGpmSampleAlloc=lambda: next(samples),
        nvmlGpmSampleGet=lambda h, s: None,
        nvmlGpmSampleFree=freed.append,
        nvmlGpmMetricsGet=lambda req: req.fill(),
        nvmlShutdown=lambda: None,
    )
    live = LiveNvml.__new__(LiveNvml)
    live._nvml, live._handles, live._gpm_last, live._events = nvml, {}, {}, None
    live.freed = freed
    return live


def test_live_xid_events_drain_the_event_set():
    live = fake_nvml([(1, 79), (0, 48)], {})
    assert live.query(XID_EVENTS) == [{"gpu": 1, "code": 79}, {"gpu": 0, "code": 48}]
    assert live.query(XID_EVENTS) == []


def test_live_gpm_needs_two_samples_and_frees_the_old_one():
    live = fake_nvml([], {2: 40.0})
    with pytest.raises(Unsupported, match="first GPM sample"):
        live.query(GPM_METRICS, Dev(0), "2,5")
    got = live.query(GPM_METRICS, Dev(0), "2,5")
    assert got == {"2": 40.0, "5": "Not Supported"}
    assert live.freed == [1]  # the previous sample, once used
    live.close()
    assert live.freed == [1, 2]


def test_sampler_over_the_stand_in_reports_no_fake_readings():
    """A source that answers nothing: every GPU reading is missing with its reason."""

    class Nothing:
        def query(self, fn, *args):
            if fn == "nvmlDeviceGetCount":
                return 1
            raise Unsupported("Not Supported")

    s = Sampler(Nothing(), hostname="h", interval_s=1).sample(datetime(2026, 1, 1))
    (g,) = s.gpus
    assert g.error is None and g.power_w is None and g.unavailable["power_w"] == "Not Supported"
