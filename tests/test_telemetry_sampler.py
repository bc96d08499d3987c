"""The monitor's sampler, on telemetry traces built from the real H200 recordings."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from gpuaudit.errors import BadInputError
from gpuaudit.hw.nvml import Unsupported
from gpuaudit.hw.telemetry import Sampler
from gpuaudit.hw.telemetry_trace import TraceRecorder, TraceReplay
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


def _stream(trace: dict, path: Path) -> TraceRecorder:
    src = TraceReplay(trace)
    with path.open("w") as stream:
        rec = TraceRecorder(src, stream, hostname="vm", interval_s=1.0)
        sampler = Sampler(rec, hostname="vm", interval_s=1.0)
        rec.end_setup()
        while (t := src.advance()) is not None:
            sampler.sample(t)
            rec.end_frame(t)
    return rec


def test_a_streamed_recording_is_a_line_per_tick_and_replays_the_same(tmp_path):
    trace = tt.TRACES["h200-2gpu-xid-lost"]()
    path = tmp_path / "t.jsonl"
    rec = _stream(trace, path)
    lines = path.read_text().splitlines()
    assert len(lines) == 1 + 6 and rec.frame_count == 6
    assert rec.frames == []  # nothing kept in memory while streaming
    header = json.loads(lines[0])
    assert header["hostname"] == "vm" and "nvmlDeviceGetCount()" in header["setup"]
    assert len(TraceReplay.from_file(path)) == 6
    src = TraceReplay.from_file(path)
    sampler = Sampler(src, hostname="vm", interval_s=1.0)
    samples = []
    while (t := src.advance()) is not None:
        samples.append(sampler.sample(t))
    assert samples == tt.replay(trace)


def test_a_recording_cut_by_a_crash_loses_only_the_tick_in_progress(tmp_path):
    path = tmp_path / "t.jsonl"
    _stream(tt.TRACES["h200-2gpu-xid-lost"](), path)
    text = path.read_text()
    path.write_text(text[: len(text) - 40])  # the last line cut short
    assert len(TraceReplay.from_file(path)) == 5
    lines = text.splitlines()
    lines[2] = lines[2][:30]  # a broken line in the middle is damage, not a crash
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(BadInputError, match="line 3"):
        TraceReplay.from_file(path)


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
    with pytest.raises(BadInputError, match=r"telemetry trace .* is not valid JSON"):
        TraceReplay.from_file(bad)


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
