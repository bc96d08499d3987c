"""The matmul shape search on made-up rate surfaces, including a GPU whose readings depend on
what ran before (the power state): the search must still find the best shape, as mamf-finder's
sweep does, and in few timings."""

from __future__ import annotations

import math

import pytest

from gpuaudit.bench.matmul_search import (
    confirm,
    family,
    flops,
    leaders,
    long_k,
    search,
    wave_layouts,
    wave_shapes,
)

SMS = 132  # H200


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


def test_families():
    assert family((2048, 2048, 13312), SMS, 16384) == "long-K"
    assert family((1536, 2816, 12288), SMS, 16384) == "wave"
    assert family((4096, 4096, 4096), SMS, 16384) == "square"
    assert family((4096, 8192, 4096), SMS, 16384) == "other"
    assert (2048, 2048, 13312) in long_k(16384)  # mamf-finder's H200 bf16 best
    assert all(max(s) <= 8192 for s in long_k(8192))


def test_leaders_take_every_familys_best_before_the_overall_runners_up():
    brief = {(4096, 4096, 4096): 780.0, (8192, 8192, 8192): 779.0, (6144, 6144, 6144): 778.0,
             (2048, 2048, 13312): 700.0, (2048, 2048, 8192): 650.0,
             (1536, 2816, 16384): 690.0, (4096, 8192, 4096): 760.0}

    def kind(s):
        return family(s, SMS, 16384)

    got = leaders(brief, 4, kind)
    # square, other, long-K and wave leaders: a family that read low in its brief timing
    # (e.g. after a hot square) still gets re-timed
    assert got == [(4096, 4096, 4096), (4096, 8192, 4096), (2048, 2048, 13312),
                   (1536, 2816, 16384)]
    assert leaders(brief, 6, kind)[4:] == [(8192, 8192, 8192), (6144, 6144, 6144)]


def test_confirm_interleaves_rotated_rounds_and_ranks_by_flops_over_mean_time():
    a, b, c = (1024, 1024, 1024), (2048, 2048, 2048), (512, 512, 512)
    calls = []
    # a's times vary: its mean time is 1.5 ms, though the mean of its per-iteration rates is
    # higher than b's; mamf-finder's mean (FLOPs / mean time) must decide
    times = {a: [1.0, 2.0], b: [11.5, 11.5], c: None}

    def time_iters(s):
        calls.append(s)
        return times[s]

    best, rates = confirm(time_iters, [a, b, c], rounds=3)
    assert calls == [a, b, c, b, a, a, b]  # c dropped after its first try; rotated rounds
    assert rates[a] == pytest.approx(flops(a) / 1.5e-3 / 1e12)
    assert rates[b] == pytest.approx(flops(b) / 11.5e-3 / 1e12)
    assert best == b and c not in rates
    with pytest.raises(RuntimeError, match="none of the leading"):
        confirm(lambda s: None, [a], 2)


class PoweredGpu:
    """A GPU at its power limit: a shape's true rate, lowered by how hot the GPU is when it
    runs. Hot is an average of what ran before and the shape's own power (big squares draw
    the most, the long-K ridge less), so a brief timing carries the previous shape's heat."""

    BEST = (2048, 2048, 13312)

    def __init__(self):
        self.heat = 0.0
        self.timings = 0

    @staticmethod
    def true_rate(s):
        m, n, k = s
        if max(s) > 16384:
            return None
        ridge = 1000 - 60 * abs(math.log2(m * n / 2048 ** 2)) - 40 * abs(math.log2(k / 13312))
        return ridge - 30 * (m != n)

    @staticmethod
    def power(s):
        return min(1.0, 0.45 + 0.55 * math.log2(s[0] * s[1]) / 28)

    def observe(self, s, own_share):
        self.timings += 1
        self.heat = (1 - own_share) * self.heat + own_share * self.power(s)
        return self.true_rate(s) * (1 - 0.25 * self.heat)

    def brief(self, s):
        return None if self.true_rate(s) is None else self.observe(s, 0.1)

    def again(self, s):
        if self.true_rate(s) is None:
            return None
        r = self.observe(s, 0.8)
        return [flops(s) / (r * 1e12) * 1e3] * 5  # ms per iteration at that rate

    def settled(self, s):  # what the burst at this shape measures: its own heat only
        return self.true_rate(s) * (1 - 0.25 * self.power(s))


def test_the_search_finds_the_ridge_a_brief_ranking_misses():
    gpu = PoweredGpu()
    _, tried = search(gpu.brief, [2048, 4096, 8192, 16384], 16384, 3,
                      seeds=wave_shapes(SMS, 16384))
    brief_best = max(tried, key=tried.__getitem__)
    chosen = leaders(tried, 5, lambda s: family(s, SMS, 16384))
    best, _ = confirm(gpu.again, chosen, 3)
    ideal = max(gpu.settled(s) for s in tried)
    assert gpu.settled(best) == pytest.approx(ideal, rel=0.01)
    assert gpu.timings < 80  # seconds, not mamf-finder's hours
    # what main did: the brief timing alone, or re-timing only its top 2, picks wrongly
    assert gpu.settled(brief_best) < 0.97 * ideal
    top2 = sorted(tried, key=tried.__getitem__, reverse=True)[:2]
    old, _ = confirm(gpu.again, top2, 3)
    assert gpu.settled(old) < 0.97 * ideal
