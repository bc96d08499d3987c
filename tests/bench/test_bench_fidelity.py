"""Our figures beside nccl-tests' and mamf-finder's, judged on real H200 recordings."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaudit.bench import fidelity as fid
from gpuaudit.bench import nccl_tests as nt
from gpuaudit.bench.stats import measure
from gpuaudit.model import load_run

HERE = Path(__file__).parents[1] / "fixtures" / "bench"


def recorded() -> list:
    """The 2-GPU call (ours + nccl-tests run 1) and the standalone all_reduce_perf (run 2)."""
    run = load_run((HERE / "h200-2gpu-collectives.json").read_text())
    first = [m.model_copy(update={"params": {**m.params, "run": 1}})
             if m.params.get("tool") == "nccl-tests" else m for m in run.measurements]
    rows = nt.parse_nccl_tests((HERE / "h200-2gpu-all_reduce_perf.txt").read_text())
    second = [nt.row_measurement("all_reduce", r, ranks=2, warmup=1, iters=20, spec=None, run=2)
              for r in rows]
    return first + second


def row(rows, op, size):
    return next(r for r in rows if (r.op, r.size_bytes) == (op, size))


MIB = 1 << 20


def test_every_op_and_size_of_the_recorded_call_is_compared():
    rows = fid.compare_collectives(recorded())
    assert len(rows) == 5 * 13  # five ops, 1 MiB … 4 GiB
    assert all(r.ours_gbps and r.ref_gbps for r in rows)
    assert {r.column for r in rows if r.op in ("all_reduce", "broadcast")} == {"in-place"}
    assert {r.column for r in rows if r.op not in ("all_reduce", "broadcast")} == {
        "out-of-place"}


def test_all_reduce_is_judged_against_both_nccl_tests_runs_in_place():
    rows = fid.compare_collectives(recorded())
    one = row(rows, "all_reduce", MIB)
    # in-place column: 71.46 GB/s in the --with-native run, 48.91 in the standalone one
    assert (one.ref_runs, one.ref_low, one.ref_high) == (2, 48.91, 71.46)
    assert one.ref_gbps == pytest.approx((48.91 + 71.46) / 2)
    assert one.ours_gbps == pytest.approx(56.368, abs=1e-3)
    assert not one.within_tolerance and one.within_spread
    assert one.verdict == "met (within nccl-tests' spread)"
    assert one.spread_pct == pytest.approx(100 * (71.46 - 48.91) / 60.185, abs=0.01)
    two = row(rows, "all_reduce", 2 * MIB)  # nccl-tests repeated itself there: 70.77, 70.65
    assert two.ratio == pytest.approx(65.68 / 70.71, abs=2e-3) and two.verdict == "NOT MET"
    big = row(rows, "all_reduce", 1 << 30)
    assert big.verdict == "met" and abs(big.ratio - 1) < 0.01


def test_the_graph_timed_sizes_were_the_ones_that_missed():
    # main timed sizes up to 64 MiB as CUDA graphs: there, and only there, ours fell short of
    # nccl-tests for all-gather, reduce-scatter and all-to-all
    rows = fid.compare_collectives(recorded())
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        small = [r for r in rows if r.op == op and 2 * MIB <= r.size_bytes <= 64 * MIB]
        large = [r for r in rows if r.op == op and 128 * MIB <= r.size_bytes <= 1 << 30]
        assert all(r.ratio < 1 for r in small), op
        assert sum(r.verdict == "NOT MET" for r in small) >= 4, op
        assert all(r.verdict == "met" for r in large), op


def test_a_single_reference_run_has_no_spread_to_hide_in():
    rows = fid.compare_collectives(recorded())
    ag = row(rows, "all_gather", 2 * MIB)
    assert ag.ref_runs == 1 and ag.spread_pct is None and not ag.within_spread
    assert ag.ratio == pytest.approx(48.8 / 58.8, abs=2e-3) and ag.verdict == "NOT MET"


def test_tolerance_is_three_percent_either_way():
    def one(ours, ref):
        ms = [measure("collectives", "all_gather_busbw", "GB/s", [ours] * 5, warmup=0,
                      params={"op": "all_gather", "size_bytes": 1024}),
              measure("collectives", "all_gather_busbw", "GB/s", [ref], warmup=0,
                      params={"op": "all_gather", "size_bytes": 1024, "tool": "nccl-tests"})]
        return fid.compare_collectives(ms)[0]

    assert one(103.0, 100.0).verdict == "met" and one(97.0, 100.0).verdict == "met"
    assert one(103.2, 100.0).verdict == "NOT MET" and one(96.8, 100.0).verdict == "NOT MET"


def test_mamf_finder_rows_without_the_summary():
    res = fid.parse_mamf((HERE / "h200-1gpu-mamf-bf16-grep.txt").read_text())
    assert res is not None and res.tried == 8 and len(res.shapes) == 8
    assert res.best["mean"] == (802.5, (2048, 2048, 13312))
    assert res.best["max"] == (811.9, (2048, 2048, 13312))
    assert res.shapes[(8192, 8192, 8192)] == (673.2, 671.8, 679.6)


def test_mamf_finder_summary_and_carriage_returns():
    text = (HERE / "h200-1gpu-mamf-bf16-run2.txt").read_text()
    res = fid.parse_mamf(text.replace("\n     ", "\r     "))  # rows as the tool prints them
    assert res is not None and res.mean == 761.6 and res.tried == 8
    assert res.best["median"] == (761.1, (2048, 2048, 13312))
    assert res.shapes[(10240, 2048, 8192)] == (736.4, 735.2, 751.4)
    assert fid.parse_mamf("Warming up the accelerator for 30 secs ... ") is None


def test_mamf_v4_headline_is_read_as_the_mean():
    text = ("Tried 212 shapes => the best outcomes were:\n"
            "MAMF (max achievable,  boost burst): 826.4 TFLOPS @ 1536x2816x20480 (MxNxK)\n"
            "MSMF (max sustainable, saturated):   701.0 TFLOPS @ 4096x4096x4096 (MxNxK)\n")
    res = fid.parse_mamf(text)
    assert res is not None and res.best["mean"] == (826.4, (1536, 2816, 20480))


def test_matmul_rows_compare_our_burst_mean_with_mamfs_best_mean():
    res = fid.parse_mamf((HERE / "h200-1gpu-mamf-bf16-grep.txt").read_text())
    params = {"m": 2048, "n": 2048, "k": 12288, "device": "cuda"}
    ms = [measure("matmul", "bf16_burst", "TFLOP/s", [800.0] * 5, warmup=50, gpu_index=0,
                  params={**params, "mean": 806.0, "max": 815.0}),
          measure("matmul", "bf16", "TFLOP/s", [700.0] * 5, warmup=50, gpu_index=0,
                  params=params),
          measure("matmul", "bf16_burst", "TFLOP/s", [10.0] * 5, warmup=50, gpu_index=1,
                  params={**params, "mean": 10.0})]
    (r,) = fid.matmul_rows(ms, {"bf16": res}, gpu_index=0)
    assert (r.ours_mean, r.ours_median, r.ours_max, r.ours_sustained) == (806.0, 800.0, 815.0,
                                                                         700.0)
    assert r.ours_shape == (2048, 2048, 12288)
    assert r.ratio == pytest.approx(806.0 / 802.5) and r.verdict == "met"
    (r1,) = fid.matmul_rows(ms, {"bf16": res}, gpu_index=1)
    assert r1.verdict == "NOT MET"
    (none,) = fid.matmul_rows(ms, {"fp8": None})
    assert none.verdict == "no figure"


def test_each_launch_form_of_nccl_tests_is_its_own_reference():
    ours = measure("collectives", "all_gather_busbw", "GB/s", [48.0] * 5, warmup=5,
                   params={"op": "all_gather", "size_bytes": MIB})

    def ref(value, launch, run):
        m = measure("collectives", "all_gather_busbw", "GB/s", [value], warmup=5,
                    params={"tool": "nccl-tests", "op": "all_gather", "size_bytes": MIB,
                            "run": run, **({"launch": launch} if launch else {})})
        return m

    group = [ref(24.5, None, 1), ref(24.8, "group", 2)]  # no launch recorded: -g N
    threads = [ref(47.0, "threads", 1), ref(47.6, "threads", 2)]
    all_ = [ours, *group, *threads]
    assert fid.reference_launches(all_) == ["threads", "group"]
    (t,) = fid.compare_collectives(all_, "threads")
    assert t.ref_runs == 2 and t.ref_gbps == pytest.approx(47.3) and t.verdict == "met"
    (g,) = fid.compare_collectives(all_, "group")
    assert (g.ref_low, g.ref_high) == (24.5, 24.8) and g.verdict == "NOT MET"
    (mixed,) = fid.compare_collectives(all_)  # no form named: every run counts
    assert mixed.ref_runs == 4
