"""The doctor's rules on real H200 telemetry: each recorded bottleneck gives its finding first,
the healthy controls give none; faults planted in copies of the real samples give theirs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuaudit.diagnose import build_signals, diagnose
from gpuaudit.diagnose.evidence import Signals
from gpuaudit.diagnose.gpustats import GpuStats, gpu_stats, job_gpus
from gpuaudit.diagnose.hoststats import ProcessStats, StepStats, step_stats
from gpuaudit.diagnose.rules import amdahl
from gpuaudit.model import ProcessSample, Sample
from tests.support.telemetry_traces import replay

REAL = Path(__file__).parents[1] / "fixtures" / "telemetry" / "real"
# The H200's maximum SM clock, from the inspect recording of the same machine.
INSPECT = Path(__file__).parents[1] / "fixtures" / "h200-1gpu" / "inspect.json"
SM_MAX = json.loads(INSPECT.read_text())["machine"]["gpus"][0]["clocks"]["sm_max_mhz"]


def real(name: str) -> list[Sample]:
    return replay(json.loads((REAL / f"{name}.json").read_text()))


def run(samples: list[Sample], **kw: object) -> tuple[list, list]:
    sig, _how = build_signals(samples, sm_clock_max_mhz={0: SM_MAX, 1: SM_MAX}, **kw)
    return diagnose(sig)


# Each recorded job and the finding that must come first (None: the control, no finding).
EXPECTED = {
    "lm-bf16-healthy": None,
    "ddp-2gpu-lm-bf16": None,
    "lm-fp32-no-tensor-cores": "tensor-cores-unused",
    "loader-starved": "input-bound",
    "host-sync-tiny-batch": "batch-too-small",
    "pageable-copies": "copy-bound",
    "h200-1gpu-transfer": "copy-bound",
    "h200-1gpu-memory": "memory-bound",
    "h200-1gpu-matmul": "throttled",
    "h200-1gpu-idle": "gpu-idle",
}


def test_every_real_trace_has_an_expectation():
    assert {p.stem for p in REAL.glob("*.json")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_trace_top_finding(name):
    findings, changes = run(real(name))
    want = EXPECTED[name]
    if want is None:
        assert findings == [] and changes == [], [f.code for f in findings]
    else:
        assert findings, f"{name}: no finding"
        assert findings[0].code == want, [f.code for f in findings]
        assert findings[0].evidence, "a finding without evidence"
        assert all(o.source for o in findings[0].evidence)
        assert changes and changes[0].rank == 1


def test_transfer_trace_is_copy_bound_at_the_link_not_pageable():
    (f, *_), changes = run(real("h200-1gpu-transfer"))
    ev = {o.name: o.value for o in f.evidence}
    assert ev["utilization_pct"] >= 99 and ev["sm_activity_pct"] == 0  # NVML 99 %, SMs idle
    assert ev["pcie_rate"] > 0.9 * ev["pcie_link"]  # 62 of 63 GB/s
    assert "the link is the limit" in f.message
    assert not any("pinned" in c.action for c in changes)


def test_pageable_trace_advises_pinned_memory_with_the_gain_from_the_rates():
    (f, *_), changes = run(real("pageable-copies"))
    ev = {o.name: o.value for o in f.evidence}
    assert "pageable" in f.message
    top = changes[0]
    assert "pinned" in top.action and "pin_memory=True" in top.settings
    # Amdahl on the SM-idle share with copies sped up from the observed to pinned rate.
    share = 1 - ev["sm_activity_pct"] / 100
    speed = 0.8 * ev["pcie_link"] / ev["pcie_rate"]
    assert top.gain_high == pytest.approx(amdahl(share, speed), abs=0.01)
    assert top.gain_low == pytest.approx(amdahl(share, speed / 2), abs=0.01)


def test_fp32_gain_uses_the_datasheet_ratio():
    (f, *_), changes = run(real("lm-fp32-no-tensor-cores"))
    ev = {o.name: o.value for o in f.evidence}
    frac = ev["fp32_activity_pct"] / 100  # of the job's time, not of the SMs' busy time
    bf16 = next(c for c in changes if "bf16" in c.action)
    # H200 SXM: fp32 67, tf32 494.5, bf16 989.5 TFLOP/s (dense)
    assert bf16.gain_high == pytest.approx(amdahl(frac, 989.5 / 67), abs=0.01)
    assert bf16.gain_low == pytest.approx(amdahl(frac, 494.5 / 67), abs=0.01)
    assert 'torch.autocast("cuda", dtype=torch.bfloat16)' in bf16.settings


def test_throttling_needs_the_max_clock_and_names_the_power_cap():
    sig, _ = build_signals(real("h200-1gpu-matmul"))  # no maximum clock known
    assert [f.code for f in diagnose(sig)[0]] == []
    (f, *_), changes = run(real("h200-1gpu-matmul"))
    ev = {o.name: o.value for o in f.evidence}
    assert ev["reasons"] == "sw_power_cap" and ev["sm_clock"] < 0.8 * SM_MAX
    assert f.severity.value == "INFO" and "power limit" in f.message
    assert changes[0].gain_high == pytest.approx(SM_MAX / ev["sm_clock"], abs=0.01)


def test_ddp_power_cap_events_at_full_clock_are_not_throttling():
    samples = real("ddp-2gpu-lm-bf16")
    st = gpu_stats(samples, 1, sm_clock_max_mhz=SM_MAX)
    assert st.throttle_fraction > 0.5 and st.sm_clock_mhz > 0.95 * SM_MAX
    assert run(samples)[0] == []


def test_loader_starved_is_bursty_and_holds_memory():
    st = gpu_stats(real("loader-starved"), 0)
    assert 0 < st.active_fraction <= 0.6 and st.h2d_burst_ratio > 100
    assert st.job_memory_bytes > 2 << 30


def test_two_gpu_recordings_pick_the_gpu_the_job_is_on():
    gpus, how = job_gpus(real("lm-bf16-healthy"), None)
    assert gpus == [0] and "process" in how
    gpus, _ = job_gpus(real("ddp-2gpu-lm-bf16"), None)
    assert gpus == [0, 1]
    pid = real("lm-bf16-healthy")[3].gpus[0].processes[0].pid
    assert job_gpus(real("lm-bf16-healthy"), {pid})[0] == [0]


def _plant(samples: list[Sample], gpu: int = 0, **update: object) -> list[Sample]:
    out = []
    for s in samples:
        gpus = tuple(g.model_copy(update=update) if g.index == gpu else g for g in s.gpus)
        out.append(s.model_copy(update={"gpus": gpus}))
    return out


def test_planted_neighbour_is_another_process_sharing_the_gpu():
    samples = real("lm-bf16-healthy")
    job = samples[3].gpus[0].processes[0]
    other = ProcessSample(pid=4242, command="python other.py", used_memory_bytes=8 << 30)
    planted = _plant(samples, processes=(job, other))
    findings, changes = run(planted, job_pids={job.pid})
    assert [f.code for f in findings] == ["shared-gpu"]
    assert "4242" in findings[0].evidence[0].value
    assert "CUDA_VISIBLE_DEVICES" in changes[0].settings
    # without knowing the job's processes, no one is "other"
    assert run(planted)[0] == []


def test_planted_full_memory_is_memory_nearly_full():
    samples = real("lm-bf16-healthy")
    total = samples[3].gpus[0].memory_total_bytes
    findings, changes = run(_plant(samples, memory_used_bytes=int(total * 0.97)))
    assert [f.code for f in findings] == ["memory-nearly-full"]
    assert findings[0].share == 0.0 and findings[0].severity.value == "WARN"
    assert "expandable_segments" in " ".join(c.settings or "" for c in changes)


def test_planted_thermal_slowdown_is_a_warning():
    samples = real("h200-1gpu-matmul")
    hot = _plant(samples[3:], clock_event_reasons=("hw_thermal_slowdown",), sm_clock_mhz=1200)
    findings, changes = run(samples[:3] + hot)
    assert findings[0].code == "throttled" and findings[0].severity.value == "WARN"
    assert "heat" in findings[0].message and changes[0].settings is None


def _gpu(**kw: object) -> GpuStats:
    base = dict(index=0, name="NVIDIA H200", samples=20, interval_s=0.5, gpm=True,
                utilization_pct=100.0, sm_activity_pct=85.0, sm_occupancy_pct=40.0,
                tensor_activity_pct=30.0, dram_bandwidth_pct=40.0, fp32_activity_pct=5.0,
                pcie_rx_bytes_per_s=1e8, pcie_tx_bytes_per_s=1e7, pcie_gen=5, pcie_width=16,
                memory_used_max_bytes=20 << 30, memory_total_bytes=141 << 30,
                active_fraction=1.0, loaded_ticks=19)
    base.update(kw)
    return GpuStats(**base)  # type: ignore[arg-type]


def _proc(**kw: object) -> ProcessStats:
    base = dict(ticks=20, cores=16, trainers=1, trainer_cpu_pct=30.0, workers=2,
                worker_cpu_pct=95.0, workers_cpu_total_pct=190.0, host_cpu_pct=20.0,
                host_memory_used_max=0.3, swap_used_max_bytes=0)
    base.update(kw)
    return ProcessStats(**base)  # type: ignore[arg-type]


def test_synthetic_healthy_signals_give_nothing():
    assert diagnose(Signals(gpus=(_gpu(),), process=_proc(workers=4)))[0] == []


def test_launch_bound_when_nvml_busy_but_sms_idle():
    findings, changes = diagnose(Signals(gpus=(_gpu(sm_activity_pct=20.0,
                                                    sm_occupancy_pct=2.0),)))
    # SM activity 20 % with memory free: a bigger batch is the other answer, ranked after
    assert [f.code for f in findings] == ["launch-bound", "batch-too-small"]
    assert findings[0].share == pytest.approx(0.8)
    assert 'mode="reduce-overhead"' in changes[0].settings
    assert changes[0].gain_high == amdahl(0.8) == 5.0


def test_input_bound_from_step_markers_sizes_the_workers():
    steps = StepStats(steps=50, median_s=0.2, p10_s=0.19, p90_s=0.21,
                      data_wait_median_s=0.1)
    findings, changes = diagnose(Signals(gpus=(_gpu(utilization_pct=50.0),), process=_proc(),
                                         steps=steps))
    assert findings[0].code == "input-bound" and findings[0].confidence == "high"
    assert findings[0].share == 0.5
    # 2 workers at a 50 % wait: 2 / 0.5 × 1.2 = 4.8 → 5
    assert "num_workers=5" in changes[0].settings
    assert (changes[0].gain_low, changes[0].gain_high) == (amdahl(0.25), 2.0)


def test_input_bound_capped_by_free_cores_says_so():
    steps = StepStats(steps=50, median_s=1.0, p10_s=1.0, p90_s=1.0, data_wait_median_s=0.9)
    _f, changes = diagnose(Signals(process=_proc(cores=4, workers=2), steps=steps))
    assert "num_workers=3" in changes[0].settings  # 4 cores − 1 trainer
    assert any("cheaper" in c.action and "24 workers" in c.action for c in changes)


def test_step_stats_skip_warmup_and_measure_spread():
    times = [0.0, 5.0, 5.1, 5.2, 5.3, 5.4, 5.6]  # a 5 s first step (compilation)
    st = step_stats(times, [0.01] * 6)
    assert st.steps == 5 and st.median_s == pytest.approx(0.1)
    assert st.p90_s == pytest.approx(0.16) and st.data_wait_median_s == 0.01


def test_amdahl():
    assert amdahl(0.5) == 2.0
    assert amdahl(0.5, 2) == pytest.approx(1 / 0.75, abs=0.01)
    assert amdahl(1.0) == 20.0  # capped: "up to ×20" says all there is to say
    assert amdahl(0.0) == 1.0


def test_many_kernels_per_step_is_launch_bound_not_batch_size():
    from gpuaudit.diagnose.kineto import Breakdown, TraceStats

    tiny = _gpu(sm_activity_pct=8.0, utilization_pct=30.0, sm_occupancy_pct=1.0)
    few = TraceStats(steps=5, step_time_us=1000.0, window_us=5000.0, cuda=True, kernels=150,
                     launched_kernels=150, short_kernels=140,
                     devices=(Breakdown(0, 5000.0, 1500.0, 1500.0, 3500.0, 0.0,
                                        host_wait_us=3000.0),))
    many = TraceStats(**{**few.__dict__, "kernels": 6000, "launched_kernels": 6000,
                         "short_kernels": 5900})
    codes = [f.code for f in diagnose(Signals(gpus=(tiny,), trace=few))[0]]
    assert codes == ["batch-too-small", "launch-bound"]  # 0.92 of the time vs 0.6
    codes = [f.code for f in diagnose(Signals(gpus=(tiny,), trace=many))[0]]
    assert codes == ["launch-bound"]
