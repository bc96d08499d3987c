"""The benchmark machinery without a GPU: statistics, search, stragglers, the runner, the CLI."""

from __future__ import annotations

import pytest

from gpuaudit.bench import runner
from gpuaudit.bench.context import BenchContext, Profile
from gpuaudit.bench.matmul_search import align, neighbours, search, stretched
from gpuaudit.bench.stats import measure, quartiles, skipped
from gpuaudit.bench.stragglers import find_stragglers
from gpuaudit.errors import BadInputError
from gpuaudit.model import Machine, RunStatus, Severity

from .conftest import fixture_machine
from .support.bench import fake_suites


def machine(name: str = "h200-2gpu") -> Machine:
    return fixture_machine(name)


# -- statistics ---------------------------------------------------------------------------


def test_quartiles_match_linear_interpolation():
    assert quartiles([1, 2, 3, 4]) == (1.75, 2.5, 3.25)
    assert quartiles([5]) == (5, 5, 5)
    assert quartiles([10, 0, 5, 20, 15]) == (5, 10, 15)


def test_measure_keeps_samples_median_iqr_and_percent_of_spec():
    m = measure("memory", "copy", "GB/s", [4000, 4100, 4200, 4300, 4400], warmup=3,
                spec_value=4800, gpu_index=1)
    assert m.value == 4200
    assert (m.spread_low, m.spread_high, m.spread_kind) == (4100, 4300, "IQR")
    assert m.pct_of_spec == 87.5
    assert m.samples == (4000, 4100, 4200, 4300, 4400) and m.warmup == 3
    assert m.notes == ()


def test_measure_warns_about_noise_few_samples_and_failed_checks():
    m = measure("x", "y", "GB/s", [50, 100, 150], warmup=0, verified=False)
    assert any("only 3 samples" in n for n in m.notes)
    assert any("noisy: IQR is 50%" in n for n in m.notes)
    assert any("check FAILED" in n for n in m.notes)
    best = measure("x", "y", "TFLOP/s", [1, 2, 3, 4, 9], warmup=0, statistic="max")
    assert best.value == 9 and best.statistic == "max"


def test_skipped_has_no_value_and_a_reason():
    s = skipped("p2p", "p2p_unidir", "GB/s", "needs 2 or more GPUs", gpu_index=0)
    assert s.skipped and s.value is None and s.skipped_reason == "needs 2 or more GPUs"


# -- the matmul shape search --------------------------------------------------------------


def test_shapes_stay_aligned_and_in_bounds():
    assert align(1000) == 1024 and align(10) == 256
    for s in neighbours((4096, 4096, 4096), 0.25, 8192) + stretched(8192, 16384):
        assert all(d % 256 == 0 and 256 <= d <= 16384 for d in s)
    assert (4096, 4096, 8192) in stretched(4096, 16384)


def test_search_finds_a_ridge_away_from_the_squares_in_few_tries():
    # A made-up rate surface peaking at m=n=2048, k=12288 (mamf-finder's H100 ridge shape),
    # with shapes above 16384 in any dimension out of memory.
    target = (2048, 2048, 12288)

    def rate(shape):
        if max(shape) > 16384:
            return None
        return 1000 - sum(abs(a - b) / b for a, b in zip(shape, target, strict=True)) * 100

    calls = []
    best, tried = search(lambda s: calls.append(s) or rate(s), [4096, 8192, 16384], 16384, 8)
    assert set(tried) == set(calls)  # every runnable shape tried is reported with its rate
    assert rate(best) >= rate((4096, 4096, 4096)) + 100  # far better than any square
    assert best[2] > best[0]  # found the long-K layout
    assert len(calls) < 60  # seconds, not hours
    assert len(set(calls)) == len(calls)  # never times a shape twice


def test_search_with_nothing_runnable_says_so():
    with pytest.raises(RuntimeError, match="no shape"):
        search(lambda s: None, [4096], 16384, 2)


# -- stragglers ---------------------------------------------------------------------------


def _m(gpu, value, name="bf16", unit="TFLOP/s", iqr=0.0):
    return measure("matmul", name, unit, [value * (1 - iqr / 2), value, value * (1 + iqr / 2)] * 2,
                   warmup=0, gpu_index=gpu)


def test_straggler_among_eight_is_flagged_and_only_it():
    ms = [_m(g, 790.0) for g in range(7)] + [_m(7, 700.0)]
    (f,) = find_stragglers(ms)
    assert f.code == "bench.straggler" and f.gpu_index == 7 and f.severity is Severity.WARN
    assert f.evidence["gap_pct"] == pytest.approx(11.4, abs=0.05)


def test_small_gaps_and_noisy_figures_are_not_stragglers():
    assert find_stragglers([_m(g, 790.0 - g) for g in range(8)]) == []  # ≤ 1 % apart
    noisy = [_m(g, 790.0, iqr=0.08) for g in range(7)] + [_m(7, 700.0, iqr=0.08)]
    assert find_stragglers(noisy) == []  # 11 % gap < 3 × 8 % noise


def test_two_gpus_need_twice_the_gap_and_latency_is_lower_is_better():
    assert find_stragglers([_m(0, 100.0), _m(1, 93.0)]) == []
    (f,) = find_stragglers([_m(0, 100.0), _m(1, 85.0)])
    assert f.gpu_index == 1
    lat = [_m(g, 5.0, name="launch", unit="us") for g in range(3)] + [_m(3, 9.0, "launch", "us")]
    (f,) = find_stragglers(lat)
    assert f.gpu_index == 3


# -- the runner ---------------------------------------------------------------------------


def test_unknown_suites_are_bad_input_and_order_is_canonical():
    with pytest.raises(BadInputError, match="unknown suite warp"):
        runner.check_suites(["matmul", "warp"])
    assert runner.check_suites(["memory", "matmul"]) == ["matmul", "memory"]
    # none named: every suite but the opt-in ones, which run only when named
    assert runner.check_suites([]) == [n for n in runner.SUITES
                                       if n not in ("render", "science")]
    assert runner.check_suites(["science", "render"]) == ["render", "science"]


def test_a_crashing_suite_is_recorded_and_the_run_goes_on(monkeypatch):
    def boom(ctx):
        yield measure("matmul", "fp32", "TFLOP/s", [1.0] * 5, warmup=0)
        raise ValueError("cuBLAS exploded\nsecond line")

    def fine(ctx):
        yield measure("memory", "copy", "GB/s", [2.0] * 5, warmup=0)

    fake_suites(monkeypatch, {"matmul": boom, "memory": fine})
    run = runner.run_bench(["matmul", "memory"], machine=machine())
    names = [(m.suite, m.name, m.skipped) for m in run.measurements]
    assert names == [("matmul", "fp32", False), ("matmul", "suite", True),
                     ("memory", "copy", False)]
    reason = run.measurements[1].skipped_reason
    assert "ValueError: cuBLAS exploded" in reason and "\n" not in reason
    assert run.status is RunStatus.COMPLETE


def test_ctrl_c_keeps_what_was_measured_and_marks_partial(monkeypatch):
    def interrupted(ctx):
        yield measure("matmul", "bf16", "TFLOP/s", [700.0] * 5, warmup=0)
        raise KeyboardInterrupt

    def never(ctx):
        raise AssertionError("must not run after Ctrl-C")

    fake_suites(monkeypatch, {"matmul": interrupted, "memory": never})
    run = runner.run_bench(["matmul", "memory"], machine=machine())
    assert run.status is RunStatus.PARTIAL
    assert [m.name for m in run.measurements] == ["bf16"]


def test_each_suite_wall_time_is_kept_in_run_order_even_when_interrupted(monkeypatch):
    from gpuaudit.report.terminal import suite_times_line

    clock = iter([10.0, 12.5, 20.0, 20.25])  # matmul starts, ends; memory starts, is cut
    monkeypatch.setattr(runner.time, "perf_counter", lambda: next(clock))

    def fine(ctx):
        yield measure("matmul", "bf16", "TFLOP/s", [700.0] * 5, warmup=0)

    def cut(ctx):
        yield measure("memory", "copy", "GB/s", [2.0] * 5, warmup=0)
        raise KeyboardInterrupt

    fake_suites(monkeypatch, {"matmul": fine, "memory": cut})
    run = runner.run_bench(["memory", "matmul"], machine=machine())  # run in SUITES order
    assert run.status is RunStatus.PARTIAL
    assert list(run.suite_seconds.items()) == [("matmul", 2.5), ("memory", 0.25)]
    assert suite_times_line(run.suite_seconds) == "time: matmul 2.5 s · memory 0.2 s · total 2.8 s"
    again = type(run).model_validate_json(run.model_dump_json())
    assert again.suite_seconds == run.suite_seconds


def test_wrong_result_is_a_fail_finding(monkeypatch):
    def wrong(ctx):
        yield measure("matmul", "bf16", "TFLOP/s", [700.0] * 5, warmup=0, gpu_index=0,
                      verified=False)

    fake_suites(monkeypatch, {"matmul": wrong})
    run = runner.run_bench(["matmul"], machine=machine())
    (f,) = run.findings
    assert (f.code, f.severity, f.gpu_index) == ("bench.result-mismatch", Severity.FAIL, 0)
    assert run.verdict is Severity.FAIL


def test_gpu_selection_rejects_missing_indices(monkeypatch):
    monkeypatch.setattr(runner, "cuda_devices", lambda: [])
    with pytest.raises(BadInputError, match="no GPU 5 here"):
        runner.select_devices(machine(), [5])
    assert runner.select_devices(machine(), None) == ()


def test_profiles_pick_their_knob():
    ctx = BenchContext(machine=machine(), devices=(), profile=Profile.STANDARD)
    assert ctx.pick(1, 2, 3) == 2
    assert ctx.spec(0).id == "h200-sxm"


# -- CPU paths of the real suites (what CI can run) ---------------------------------------


def test_cpu_matmul_and_memory_measure_and_verify():
    pytest.importorskip("torch")
    run = runner.run_bench(["matmul", "memory"], machine=machine("h200-1gpu"), gpus=None)
    by = {(m.suite, m.name): m for m in run.measurements}
    for key in [("matmul", "fp32"), ("matmul", "fp64"), ("memory", "copy"),
                ("memory", "read"), ("memory", "write")]:
        m = by[key]
        assert m.value and m.value > 0 and m.verified is True, key
        assert m.params["device"] == "cpu"
    assert by[("matmul", "bf16")].skipped_reason
    assert by[("matmul", "fp64")].params["relative_error"] < 1e-12


def test_stragglers_survive_figures_that_read_zero():
    zeros = [measure("dcgm", "x", "GB/s", [0.0] * 5, warmup=0, gpu_index=g) for g in range(3)]
    assert find_stragglers([*zeros, _m(3, 0.0, name="x", unit="GB/s")]) == []


def test_a_failed_dcgm_test_reads_as_a_dcgm_failure_not_a_wrong_result():
    failed = measure("dcgm", "diag_sm_stress", "pass", [0.0], warmup=0, gpu_index=2,
                     verified=False, notes=["Stress test failed"])
    (f,) = runner.bench_findings([failed])
    assert (f.code, f.severity, f.gpu_index) == ("dcgm.test-failed", Severity.FAIL, 2)
    assert "sm_stress failed" in f.message and "Stress test failed" in f.message


def test_the_runner_reports_suites_done_of_all(monkeypatch):
    def one(ctx):
        yield measure("x", "y", "GB/s", [1.0] * 5, warmup=0)

    fake_suites(monkeypatch, {"matmul": one, "memory": one, "p2p": one})
    seen = []
    runner.run_bench(["p2p", "matmul", "memory"], machine=machine(),
                     on_suite=lambda done, total: seen.append((done, total)))
    assert seen == [(0, 3), (1, 3), (2, 3)]
