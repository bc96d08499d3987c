"""The live view of `gpuaudit monitor`, rendered as the terminal would show it (120 columns)."""

from __future__ import annotations

import io
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

from rich.console import Console

from gpuaudit.model import Alert, GpuSample, ProcessSample, Sample
from gpuaudit.report.monitor_view import monitor_view, sparkline
from gpuaudit.telemetry.idle import IdleConfig, IdlePolicy
from gpuaudit.telemetry.metrics import IdleState, XidTally
from gpuaudit.telemetry.state import MonitorState
from tests.support import telemetry_traces as tt

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc)
GIB = 1 << 30
TRACES = Path(__file__).parents[1] / "fixtures" / "telemetry"


def busy(i: int = 0, act: float = 63.0, power: float = 312.0, **kw) -> GpuSample:
    fields = dict(index=i, uuid=f"GPU-{i}", name="NVIDIA H200", utilization_gpu_pct=100.0,
                  sm_activity_pct=act, tensor_activity_pct=41.0, memory_used_bytes=42 * GIB,
                  memory_total_bytes=140 * GIB, power_w=power, power_limit_w=700.0,
                  temperature_gpu_c=54.0, clock_event_reasons=("sw_power_cap",),
                  processes=(ProcessSample(pid=4242, user="alice", command="python train.py",
                                           used_memory_bytes=41 * GIB),))
    fields.update(kw)
    return GpuSample(**fields)


def state(*gpus: GpuSample, **kw) -> MonitorState:
    return MonitorState(sample=Sample(time=T0, hostname="h1", interval_s=1.0, gpus=gpus), **kw)


def render(renderable, *, html: bool = False) -> str:
    console = Console(record=True, width=120, color_system="truecolor", file=io.StringIO())
    console.print(renderable)
    return console.export_html(inline_styles=True) if html else console.export_text()


def test_bars_show_the_numbers_they_draw():
    text = render(monitor_view(state(busy())))
    # 63 % of ten cells is six; 42 of 140 GiB is three; 312 of 700 W is four.
    assert "██████░░░░  63% sm" in text
    assert "███░░░░░░░ 42.0/140.0 GiB" in text
    assert "████░░░░░░ 312/700 W" in text
    assert "54 °C" in text and "tensor 41%" in text
    assert "gpuaudit monitor  h1  2026-11-30 09:00:00 UTC" in text and "1 GPUs" in text
    assert all(len(line) <= 120 for line in text.splitlines())


def test_without_gpm_the_activity_is_nvml_utilization_and_says_so():
    g = busy(sm_activity_pct=None, tensor_activity_pct=None, utilization_gpu_pct=100.0)
    assert "██████████ 100% util" in render(monitor_view(state(g)))


def test_sparklines_follow_the_recent_samples():
    assert sparkline([0.0, 50.0, 100.0, None, 25.0], 100.0).plain == "▁▅█·▃"
    assert sparkline([], 100.0).plain == ""
    assert sparkline([0.0, 0.0], None).plain == "▁▁"  # nothing to scale by: flat, no crash
    history = {0: [busy(act=a, power=p) for a, p in ((0, 0), (50, 350), (100, 700))]
               + [GpuSample(index=0)]}
    text = render(monitor_view(state(busy()), history))
    assert "▁▅█·" in text  # activity over 0-100 %, then a tick with no reading
    assert text.count("▁▅█·") == 2  # power over 0..limit draws the same shape
    long = {0: [busy(act=100.0)] * 30 + [busy(act=0.0)] * 30}
    # Only the last 20 samples are drawn (the idle ones).
    assert "│ " + "▁" * 20 + " │" in render(monitor_view(state(busy()), long))


def test_missing_readings_show_as_na_and_never_crash():
    bare = GpuSample(index=3, name="NVIDIA H200")
    half = GpuSample(index=4, memory_used_bytes=3 * GIB, power_w=80.0,
                     temperature_gpu_c=31.0)
    text = render(monitor_view(state(bare, half), {3: [bare, bare]}))
    bare_row = next(line for line in text.splitlines() if line.startswith("│3"))
    # Activity, memory, power, temperature, and the clock-event reasons.
    assert bare_row.count("n/a") == 5
    assert "clock events n/a" in text
    assert "3.0 GiB / n/a" in text and "80 W / n/a" in text and "31 °C" in text
    assert "··" in text  # a sparkline of missing readings is gaps, not zeros


def test_a_gpu_that_could_not_be_read_shows_its_error_in_red():
    lost = GpuSample(index=1, name="NVIDIA H200", error="GPU is lost")
    view = monitor_view(state(busy(), lost))
    text = render(view)
    assert "error: GPU is lost" in text
    html = render(view, html=True)
    assert "color: #800000" in html.split("error: GPU is lost")[0].rsplit("<span", 1)[1]


def test_processes_are_listed_biggest_first_and_commands_stay_text():
    g = busy(processes=(
        ProcessSample(pid=7, user="bob", command="small [bold]job[/]", used_memory_bytes=GIB),
        ProcessSample(pid=4242, user="alice", command="python train.py",
                      used_memory_bytes=41 * GIB),
        ProcessSample(pid=9)))
    text = render(monitor_view(state(g)))
    lines = [line for line in text.splitlines() if "4242" in line or "small" in line
             or line.startswith("│   9")]
    assert "alice" in lines[0] and "41.0 GiB" in lines[0] and "python train.py" in lines[0]
    assert "bob" in lines[1] and "1.0 GiB" in lines[1] and "small [bold]job[/]" in lines[1]
    assert lines[2].count("n/a") == 3  # user, memory, command unknown
    assert "no processes on the GPUs" in render(monitor_view(state(busy(processes=()))))
    many = busy(processes=tuple(ProcessSample(pid=p) for p in range(30)))
    text = render(monitor_view(state(many), max_processes=20))
    assert "+10 more" in text
    assert len(re.findall(r"^│ *\d+ │ n/a +│ +0 │", text, re.MULTILINE)) == 20


def test_active_alerts_are_listed_firing_first():
    alerts = (Alert(name="GpuIdleMemoryHeld", state="pending", labels={"gpu": "1"}, value=1.0,
                    active_since=T0 - timedelta(seconds=30)),
              Alert(name="GpuTemperatureHigh", state="firing", labels={"gpu": "0"},
                    value=86.0, active_since=T0 - timedelta(minutes=5),
                    annotations={"summary": "GPU 0 at 86 °C"}))
    text = render(monitor_view(state(busy(), alerts=alerts)))
    rows = [line for line in text.splitlines() if "Gpu" in line]
    assert "GpuTemperatureHigh" in rows[0] and "firing" in rows[0] and "86" in rows[0]
    assert "08:55:00 (5 min ago)" in rows[0] and "GPU 0 at 86 °C" in rows[0]
    assert "GpuIdleMemoryHeld" in rows[1] and "pending" in rows[1]
    assert "08:59:30 (30 s ago)" in rows[1]
    # Alerts passed in win over the state's (the CLI may filter them).
    assert "no active alerts" in render(monitor_view(state(busy(), alerts=alerts), alerts=()))


def test_clock_events_show_while_working_and_hide_when_idle():
    hot = busy(clock_event_reasons=("gpu_idle", "hw_thermal_slowdown", "sw_power_cap"))
    text = render(monitor_view(state(hot)))
    status = [line.split("│")[-2].strip() for line in text.splitlines()[4:6]]
    assert status == ["hw_thermal_slowdown", "sw_power_cap"] and "gpu_idle" not in text
    idle = render(monitor_view(state(hot, idle={0: IdleState(True, 900.0)})))
    assert "hw_thermal_slowdown" not in idle


def test_idle_status_and_cost():
    st = state(busy(0), busy(1, act=0.0),
               idle={0: IdleState(False, 900.0), 1: IdleState(True, 2700.0)})
    text = render(monitor_view(st, price_per_gpu_hour=2.5, currency="EUR"))
    assert "idle now: GPU 1 (1 of 2)" in text
    assert "idle so far: 1.00 GPU-hours" in text
    assert "cost: 2.50 EUR at 2.5 EUR/GPU-hour" in text
    assert "cost: n/a (no price per GPU-hour given)" in render(monitor_view(st))
    assert "idle policy: no reading yet" in render(monitor_view(state(busy())))


def test_errors_on_record_are_in_the_status():
    xids = XidTally()
    xids.add(Sample(time=T0, hostname="h1", interval_s=1.0, gpus=(GpuSample(
        index=0, xid_events=({"gpu": 0, "code": 48, "time": T0},) * 2),)))
    g = busy(ecc_uncorrected_volatile=3, remapping_failed=True)
    text = render(monitor_view(state(g, xids=xids)))
    assert "3 uncorrected ECC" in text and "row remap failed" in text and "XID 48×2" in text


def test_before_the_first_sample():
    assert "waiting for the first sample" in render(monitor_view(MonitorState()))




def test_a_replayed_h200_trace_with_a_lost_gpu_and_an_xid():
    samples = tt.replay("h200-2gpu-xid-lost")
    xids = XidTally()
    for s in samples:
        xids.add(s)
    last = samples[-1]
    history = {g.index: [s.gpus[g.index] for s in samples] for g in last.gpus}
    text = render(monitor_view(MonitorState(sample=last, xids=xids), history))
    assert "error: GPU is lost" in text and "XID 79×1" in text
    assert "alice" in text and "python train.py" in text  # GPU 0 keeps its job


def test_a_replayed_idle_h200_through_the_idle_policy():
    samples = tt.replay("h200-1gpu-idle")
    policy = IdlePolicy(IdleConfig(window_s=3.0, grace_s=2.0))
    for s in samples:
        policy.observe(s)
    st = MonitorState(sample=samples[-1], idle=policy.states())
    text = render(monitor_view(st, {0: [s.gpus[0] for s in samples]}, price_per_gpu_hour=3.6))
    row = next(line for line in text.splitlines() if line.startswith("│0"))
    assert "░░░░░░░░░░   0% util" in row and "idle" in row
    # Idle from the first frame to the tenth: 9 s, at 3.6 per GPU-hour.
    assert "idle now: GPU 0 (1 of 1)" in text and "cost: 0.01 USD" in text
