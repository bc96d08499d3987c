"""The matmul shape search's pieces on made-up inputs: candidate families, leaders, the ranking
of the leaders. The power-capped GPU model that shows why they are built so is in
tests/bench/test_bench_matmul_power.py."""

from __future__ import annotations

import math

import pytest

from gpuaudit.bench.matmul_search import (
    confirm,
    family,
    flops,
    interleaved,
    leaders,
    long_k,
    mean_rate,
    rank_bursts,
    search,
    wave_layouts,
    wave_shapes,
)

SMS = 132  # H200

# mamf-finder's best shape per precision on one H200, 2026-12-01 (benchmark v2, its grid
# {1024, 2048, 4096, 8192}² × {8192, 13312, 16384};
# validation/results/bench-fidelity-raw.txt): bf16 801.1, fp16 754.2, tf32 391.1, fp8 1427.9
# TFLOP/s (mean), and H100's published bf16 best.
MAMF_BEST = {"bf16": (1024, 4096, 16384), "fp16": (2048, 2048, 13312),
             "tf32": (1024, 4096, 13312), "fp8": (1024, 4096, 16384),
             "h100-bf16": (2048, 2048, 13312)}


def test_wave_layouts_fill_whole_waves_of_tiles():
    one, two = wave_layouts(SMS, 16384, waves=(1,)), wave_layouts(SMS, 16384, waves=(2,))
    assert set(one) == {(1536, 2816), (2816, 1536)}  # 12 × 11 tiles of 128 × 256 = 132
    assert set(two) == {(2816, 3072), (3072, 2816)}  # 264 = 2 waves
    for m, n in one + two:
        tiles = math.ceil(m / 128) * math.ceil(n / 256)
        assert tiles % SMS == 0
    assert all(max(s) <= 8192 for s in wave_shapes(SMS, 8192))
    assert (1536, 2816, 16384) in wave_shapes(SMS, 16384)
    assert wave_layouts(0, 16384) == []


def test_long_k_holds_mamf_finders_best_shapes_m_unequal_n_included():
    # until 2026-12-01 the family was M = N only: 1024×4096×K was never timed, and the
    # quick search's bf16, tf32 and fp8 leaders were elsewhere
    shapes = long_k(16384)
    assert set(MAMF_BEST.values()) <= set(shapes)
    assert all(family(s, SMS, 16384) == "long-K" for s in shapes)
    assert len(shapes) == 15  # 5 (M, N) with M·N 2-4 Mi × K 8192, 13312, 16384
    assert all(max(s) <= 8192 for s in long_k(8192)) and len(long_k(8192)) == 5


def test_the_quick_search_times_mamf_finders_best_shapes_whatever_the_rates():
    timed = []
    search(lambda s: timed.append(s) or 1.0, [2048, 4096, 8192], 16384, 3,
           seeds=wave_shapes(SMS, 16384))
    assert set(MAMF_BEST.values()) <= set(timed)
    # the light shapes before the squares (a square's heat would lower their readings)
    assert timed.index((2048, 2048, 13312)) < timed.index((2048, 2048, 2048))
    assert (16384, 16384, 16384) not in timed  # quick no longer times 16384³ (never chosen)


def test_families():
    assert family((2048, 2048, 13312), SMS, 16384) == "long-K"
    assert family((1024, 4096, 16384), SMS, 16384) == "long-K"
    assert family((1536, 2816, 12288), SMS, 16384) == "wave"
    assert family((3072, 2816, 16384), SMS, 16384) == "wave"
    for large in [(4096, 4096, 4096), (4096, 8192, 4096), (4096, 4096, 12288),
                  (10240, 8192, 8192), (2048, 2048, 2048)]:
        assert family(large, SMS, 16384) == "large", large


def test_leaders_take_every_familys_best_before_the_overall_runners_up():
    # the quick run's fp16 brief ranking on 2026-12-01 put large shapes first
    brief = {(10240, 8192, 8192): 651.0, (8192, 8192, 8192): 640.0, (4096, 4096, 12288): 630.0,
             (3072, 2816, 16384): 615.0, (2048, 2048, 13312): 600.0, (1024, 4096, 16384): 590.0}

    def kind(s):
        return family(s, SMS, 16384)

    assert leaders(brief, 3, kind) == [(10240, 8192, 8192), (3072, 2816, 16384),
                                       (2048, 2048, 13312)]
    assert leaders(brief, 5, kind)[3:] == [(8192, 8192, 8192), (4096, 4096, 12288)]


def test_rank_bursts_ranks_by_flops_over_mean_time_and_drops_what_cannot_run():
    a, b, c = (1024, 1024, 1024), (2048, 2048, 2048), (512, 512, 512)
    calls = []
    # a's times vary: its mean time is 1.5 ms, though the mean of its per-iteration rates is
    # higher than b's; mamf-finder's mean (FLOPs / mean time) must decide
    times = {a: [1.0, 2.0], b: [11.5, 11.5], c: None}

    def burst(s):
        calls.append(s)
        return times[s]

    best, rates = rank_bursts(burst, [a, b, c])
    assert calls == [a, b, c]  # each once: every burst starts after the same idle pause
    assert rates[a] == pytest.approx(flops(a) / 1.5e-3 / 1e12) == mean_rate(a, [1.0, 2.0])
    assert best == b and c not in rates
    with pytest.raises(RuntimeError, match="none of the leading"):
        rank_bursts(lambda s: None, [a])


def test_interleaved_rounds_change_every_shapes_predecessor():
    # the old rotation (A B C D E, B C D E A, ...) kept C behind B in every round: a shape
    # timed after a hot large one read low every time
    for n, rounds in [(3, 2), (5, 4), (4, 3)]:
        orders = interleaved(n, rounds)
        assert all(sorted(o) == list(range(n)) for o in orders)
        before = [{o[i]: o[i - 1] for i in range(1, n)} for o in orders[:2]]
        assert all(before[0].get(x) != before[1].get(x) for x in before[0])
    assert interleaved(0, 2) == [[], []]


def test_confirm_times_each_round_and_drops_what_cannot_run():
    a, b, c = (1024, 1024, 1024), (2048, 2048, 2048), (512, 512, 512)
    calls = []
    times = {a: [1.0, 2.0], b: [11.5, 11.5], c: None}

    def time_iters(s):
        calls.append(s)
        return times[s]

    best, rates = confirm(time_iters, [a, b, c], rounds=2)
    assert calls == [a, b, c, a, b]  # c dropped after its first try; round 2 strides by 2
    assert best == b and set(rates) == {a, b}
    with pytest.raises(RuntimeError, match="none of the leading"):
        confirm(lambda s: None, [a], 2)
