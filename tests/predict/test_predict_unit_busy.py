"""A unit timed alone, its kernels' own time beside its time back to back
(`kernelview.busy_per_call_us`, `units._busy_ms`): a step's group times hold no gaps between
kernels, so the ratios a prediction takes from units take their kernels' own times where
every timing has one (`predict.alone`)."""

from __future__ import annotations

import time

import pytest

from gpuaudit.model.opprofile import TimedUnit, UnitTime
from gpuaudit.predict.alone import batch_ratio, timed_ratio
from gpuaudit.workloads import kernelview


def _ev(cat, name, ts, dur, tid=1, corr=None):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid,
            "args": {"correlation": corr} if corr is not None else {}}


def test_a_marked_calls_kernels_are_its_own_launched_on_any_thread_gaps_left_out():
    m = kernelview.MARK
    events = [
        _ev("user_annotation", m + "0", 0, 100),
        _ev("cuda_runtime", "cudaLaunchKernel", 10, 2, corr=1),
        _ev("cuda_runtime", "cudaLaunchKernel", 50, 2, tid=7, corr=2),  # autograd's thread
        _ev("user_annotation", m + "1", 200, 100),
        _ev("cuda_runtime", "cudaLaunchKernel", 210, 2, corr=3),
        _ev("cuda_runtime", "cudaLaunchKernel", 150, 2, corr=4),  # in no mark
        _ev("kernel", "gemm", 1000, 10, tid=0, corr=1),
        _ev("kernel", "gemm_bwd", 1012, 10, tid=0, corr=2),  # 2 µs gap: not its time
        _ev("kernel", "gemm", 1030, 20, tid=0, corr=3),
        _ev("kernel", "elementwise", 1060, 50, tid=0, corr=4),
    ]
    assert kernelview.marked_busy_us(events) == {"0": 20.0, "1": 20.0}
    # the ranges as kineto also draws them on the device's timeline, in its time, are not
    # the host's (taken for them, call 1's launch at 210 went to range 0's drawing)
    drawn = [_ev("gpu_user_annotation", m + label, ts, 30, tid=0)
             for label, ts in (("1", 1000), ("0", 205))]
    assert kernelview.marked_busy_us(events + drawn) == {"0": 20.0, "1": 20.0}


def _unit(times):
    return TimedUnit(op_class="gemm", unit="linear", signature="", count=2, flops=1e9,
                     times=tuple(UnitTime(precision=p, batch_scale=s, ms=ms, busy_ms=busy)
                                 for p, s, ms, busy in times))


def test_ratios_take_the_kernels_own_times_where_every_timing_has_one():
    both = _unit([("bf16", 1.0, 0.10, 0.08), ("fp32", 1.0, 0.33, 0.32),
                  ("bf16", 0.5, 0.06, 0.04)])
    assert timed_ratio([both], "bf16", "fp32")[0] == pytest.approx(0.32 / 0.08)
    assert batch_ratio([both], "bf16", 0.5)[0] == pytest.approx(0.04 / 0.08)
    # one timing without its kernels' time: back-to-back times for all, never a mix
    mixed = _unit([("bf16", 1.0, 0.10, 0.08), ("fp32", 1.0, 0.33, None),
                   ("bf16", 0.5, 0.06, 0.04)])
    assert timed_ratio([mixed], "bf16", "fp32")[0] == pytest.approx(0.33 / 0.10)
    assert batch_ratio([mixed], "bf16", 0.5)[0] == pytest.approx(0.06 / 0.10)


@pytest.fixture
def cuda():
    """(torch, the first CUDA device), or the test skipped."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch, torch.device("cuda", 0)


@pytest.mark.gpu
def test_on_a_gpu_a_calls_own_time_leaves_out_the_hosts_gaps_between_its_kernels(cuda):
    from gpuaudit.workloads import timing

    torch, device = cuda
    cycles = timing.spin_cycles_per_us(torch)

    def spaced() -> None:  # four 50 µs kernels, the host 1 ms late for each
        for _ in range(4):
            torch.cuda._sleep(int(50 * cycles))
            time.sleep(0.001)

    busy = kernelview.busy_per_call_us(torch, device, [("spaced", lambda: spaced)])
    assert busy["spaced"] == pytest.approx(200.0, rel=0.25)


@pytest.mark.gpu
def test_on_a_gpu_each_unit_timing_has_its_kernels_own_time_within_its_time(cuda):
    from gpuaudit.workloads.tally import count_ops
    from gpuaudit.workloads.units import time_units

    torch, device = cuda
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                              torch.nn.Linear(1024, 256), torch.nn.LayerNorm(256)).to(device)
    x = torch.randn(64, 256, device=device)

    def tally(amp, xs):
        def step():
            with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
                loss = net(xs).float().sum()
            loss.backward()
        return count_ops(step, record_calls=True)

    own, fp32, half = tally(torch.bfloat16, x), tally(None, x), tally(torch.bfloat16, x[:32])
    timed = time_units(torch, device, "bf16", own.calls, {"float32": fp32.calls}, half.calls,
                       64, 32, budget_s=3.0)
    times = [t for u in timed for t in u.times]
    assert times and all(t.busy_ms and 0 < t.busy_ms <= 1.05 * t.ms for t in times)
    # a bf16 linear layer's call, autocast's casts among its kernels, has gaps between them
    assert any(t.busy_ms < 0.95 * t.ms for t in times if t.precision == "bf16")


def test_every_timing_is_profiled_once_in_its_own_precision_and_kept_in_order(monkeypatch):
    torch = pytest.importorskip("torch")
    from gpuaudit.workloads import units

    seen = []

    def fake(torch_, device, calls, repeat=3):  # one session: every labelled call, in order
        out = {}
        for label, make in calls:
            fn = make()
            fn()
            out[label] = 1000.0 * (int(label) + 1)
        return out

    def maker(name):
        def make():
            seen.append((name, "made", torch.get_float32_matmul_precision()))
            return lambda: seen.append((name, "ran", torch.get_float32_matmul_precision()))
        return make

    monkeypatch.setattr(kernelview, "busy_per_call_us", fake)
    busy = units._busy_ms(torch, torch.device("cpu"),
                          [("fp32", maker("a")), ("tf32", maker("b")), ("bf16", maker("c"))])
    assert busy == {0: 1.0, 1: 2.0, 2: 3.0}
    # TF32 off for fp32 while its replay is made and run, on for the others
    assert seen == [("a", "made", "highest"), ("a", "ran", "highest"),
                    ("b", "made", "high"), ("b", "ran", "high"),
                    ("c", "made", "high"), ("c", "ran", "high")]


def test_kernels_reading_longer_than_the_calls_back_to_back_are_not_kept_as_their_own():
    from gpuaudit.workloads.units import own_time

    assert own_time(0.08, 0.10) == 0.08
    assert own_time(0.105, 0.10) == 0.105  # the profiler's noise
    assert own_time(0.2, 0.10) is None
    assert own_time(None, 0.10) is None
