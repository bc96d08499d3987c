"""The matmul search on a simulated GPU at its power limit, whose readings depend on what ran
before: the quick search must find at least what mamf-finder's sweep finds, in every order of
the precisions, and stay as quick as before.

What the H200 showed on 2026-12-01 (validation/results/bench-fidelity-raw.txt,
quick profile, then mamf-finder v2 per precision in its own process over
{1024, 2048, 4096, 8192}² × {8192, 13312, 16384}):

    precision  our shape          burst mean  sustained  mamf-finder best mean @ shape   ratio
    bf16       2816×3072×16384    838.8       724.5      801.1 @ 1024×4096×16384         1.047
    fp16       10240×8192×8192    660.7       658.2      754.2 @ 2048×2048×13312         0.876
    tf32       3072×2816×16384    387.3       374.8      391.1 @ 1024×4096×13312         0.990
    fp8        7680×8192×8192     1337.5      1268.4     1427.9 @ 1024×4096×16384        0.937

fp16's re-timed leaders: 10240×8192×8192 651.6, 4096×4096×12288 620.5, 8192³ 616.5,
3072×2816×16384 615.2; bf16's, moments before, at the same shapes: 8192³ 738.2,
2816×3072×16384 750.7 — the same tensor-core peak, ~100 TFLOP/s apart. A large shape's burst
(150 iterations of ~2 ms) lasts long enough for the limiter to settle (660.7 against 658.2
sustained); a light one's does not (838.8 against 724.5). And 1024×4096×K, mamf-finder's best
for bf16, tf32 and fp8, was not among our candidates.

The model: per shape, a rate at the boost clock (tiles of 128×256 in waves over 132 SMs,
long K better) and a power draw at boost (above the limit for all but outputs of at most one
wave); a limiter that lowers the clock within tens of ms when the filtered power exceeds the
limit and raises it again when idle; a die temperature (8 s) that lowers the top clock by up to
6 % (the H200 telemetry: 1515 → 1455 MHz over 10 s at 690 W). A second variant adds a 1 s power
budget that lets the fast limiter go 25 % over for tens of ms (a burst paid back afterwards).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable

import pytest

from gpuaudit.bench import matmul
from gpuaudit.bench import matmul_search as ms

SMS = 132
MiB = 1 << 20
SMALL_FLUSH = 100 * 10**6  # our old brief and sustained flush: twice the H200's 50 MB L2
# TFLOP/s at boost for a perfect tile use, and power at boost relative to the limit (700 W)
PRECISIONS = {"tf32": (494.7, 1.2), "bf16": (989.5, 1.6), "fp16": (989.5, 1.6),
              "fp8": (1979.0, 1.9)}
Shape = tuple[int, int, int]


class CappedGpu:
    IDLE, FLUSH = 0.1, 0.5  # power relative to the limit: idle, a memory-bound fill
    TAU_F, TAU_C, TAU_T = 0.02, 0.015, 8.0  # s: filtered power, clock response, temperature
    HOST_S = 0.006  # between two timings: operands made, Python

    def __init__(self, budget: bool = False) -> None:
        self.budget = budget  # the variant with a 1 s power budget
        self.t, self.f, self.slow, self.c, self.temp = 0.0, self.IDLE, self.IDLE, 1.0, self.IDLE

    def _run(self, dt: float, p: float) -> None:
        self.t += dt
        self.f = p + (self.f - p) * math.exp(-dt / self.TAU_F)
        self.slow = p + (self.slow - p) * math.exp(-dt / 1.0)
        self.temp = p + (self.temp - p) * math.exp(-dt / self.TAU_T)
        load = max(self.f / 1.25, self.slow) if self.budget else self.f
        target = min(1 - 0.06 * min(1.0, self.temp), self.c / math.sqrt(max(load, 1e-3)))
        self.c = target + (self.c - target) * math.exp(-dt / self.TAU_C)

    def idle(self, s: float) -> None:
        for _ in range(max(1, round(s / 0.005))):
            self._run(s / max(1, round(s / 0.005)), self.IDLE)

    @staticmethod
    def boost(prec: str, shape: Shape) -> float:
        m, n, k = shape
        tiles = math.ceil(m / 128) * math.ceil(n / 256)
        split = max(1, SMS // tiles)  # split-K fills a wave for small outputs
        waves = math.ceil(tiles * split / SMS)
        use = tiles * split / (waves * SMS) * 0.9 ** math.log2(split)
        return PRECISIONS[prec][0] * 0.97 * use * (1 - 0.08 / waves) * (1 - 512 / k)

    @staticmethod
    def power(prec: str, shape: Shape) -> float:
        tiles = math.ceil(shape[0] / 128) * math.ceil(shape[1] / 256)
        return PRECISIONS[prec][1] * (1 - 0.25 * math.exp(-max(0.0, math.log2(tiles / 128)) / 0.3))

    def iterations(self, prec: str, shape: Shape, n: int, flush_bytes: int) -> list[float]:
        """ms per iteration of `n`, `flush_bytes` written before each (at ~3 TB/s)."""
        work, b, p = ms.flops(shape), self.boost(prec, shape) * 1e12, self.power(prec, shape)
        out = []
        for _ in range(n):
            self._run(flush_bytes / 3e12, self.FLUSH)
            parts, spent = max(1, int(work / (b * self.c) / 0.004)), 0.0
            for _ in range(parts):  # the limiter acts within a long iteration
                dt = work / parts / (b * self.c)
                spent += dt
                self._run(dt, p * self.c ** 2)
            out.append(spent * 1e3)
        return out

    def hold(self, prec: str, shape: Shape, seconds: float, flush_bytes: int) -> None:
        """Back-to-back iterations for `seconds`, in 5 ms steps of their average power."""
        mm = ms.flops(shape) / (self.boost(prec, shape) * 1e12)
        fl = flush_bytes / 3e12
        end = self.t + seconds
        while self.t < end:
            duty = mm / self.c / (mm / self.c + fl)
            self._run(0.005, duty * self.power(prec, shape) * self.c ** 2
                      + (1 - duty) * self.FLUSH)


# -- what the suite does with the GPU (matmul.py's quick profile) --------------------------


def brief(gpu: CappedGpu, prec: str, flush: int) -> Callable[[Shape], float]:
    def time_shape(s: Shape) -> float:  # 3 warm-up + 10 timed, the median rate
        gpu.idle(gpu.HOST_S)
        return statistics.median(ms.flops(s) / t / 1e9
                                 for t in gpu.iterations(prec, s, 13, flush)[3:])
    return time_shape


def burst(gpu: CappedGpu, prec: str, idle_s: float = 0.2) -> Callable[[Shape], list[float]]:
    def times(s: Shape) -> list[float]:  # the idle pause, then 50 + 100 with 256 MiB
        gpu.idle(gpu.HOST_S + idle_s)
        return gpu.iterations(prec, s, 150, 256 * MiB)[50:]
    return times


def sustained(gpu: CappedGpu, prec: str, s: Shape) -> float:
    gpu.idle(gpu.HOST_S)
    gpu.hold(prec, s, 0.3, SMALL_FLUSH)
    start, ts = gpu.t, []
    while gpu.t - start < 0.3:
        ts += gpu.iterations(prec, s, 1, SMALL_FLUSH)
    return statistics.median(ms.flops(s) / t / 1e9 for t in ts)


def new_quick(gpu: CappedGpu, order: list[str]) -> dict[str, tuple[Shape, float]]:
    """matmul.py now: per precision the search (light shapes first, 256 MiB flush), a leader
    per family ranked by its burst after the idle pause, the burst; every sustained run after
    every burst. Returns each precision's shape and burst mean."""
    out = {}
    for prec in order:
        _, tried = ms.search(brief(gpu, prec, 256 * MiB), [2048, 4096, 8192], 16384, 3,
                             seeds=ms.wave_shapes(SMS, 16384))
        chosen = ms.leaders(tried, 3, lambda s: ms.family(s, SMS, 16384))
        best, rates = ms.rank_bursts(burst(gpu, prec), chosen)
        out[prec] = (best, rates[best])  # one GPU: the winner's ranking burst is the figure
    for prec in order:
        sustained(gpu, prec, out[prec][0])
    return out


def old_quick(gpu: CappedGpu, order: list[str]) -> dict[str, tuple[Shape, float]]:
    """What matmul.py did until 2026-12-01 (commit 1b2a0ef): squares to 16384 first, then the
    stretched shapes, the M = N long-K family and the wave seeds, all with a 100 MB flush; 5
    leaders re-timed in 3 rotated rounds of 5 + 15 iterations without a pause; the burst, then
    the sustained run, precision after precision."""
    old_long_k = [(s, s, k) for s in (1024, 2048, 4096) for k in (8192, 12288, 13312, 16384)]

    def old_family(s: Shape) -> str:
        if s in old_long_k:
            return "long-K"
        if s[:2] in ms.wave_layouts(SMS, 16384) and s[2] >= max(s[:2]):
            return "wave"
        return "square" if s[0] == s[1] == s[2] else "other"

    out = {}
    for prec in order:
        time_shape, tried = brief(gpu, prec, SMALL_FLUSH), {}
        for s in [(x, x, x) for x in (2048, 4096, 8192, 16384)]:
            tried[s] = time_shape(s)
        side = max(tried, key=tried.__getitem__)[0]
        for s in ms.stretched(side, 16384) + old_long_k + ms.wave_shapes(SMS, 16384):
            tried.setdefault(s, time_shape(s))
        step = 0.25
        for _ in range(3):
            top = max(tried, key=tried.__getitem__)
            for s in ms.neighbours(top, step, 16384):
                tried.setdefault(s, time_shape(s))
            step /= 2 if max(tried, key=tried.__getitem__) == top else 1
        chosen = ms.leaders(tried, 5, old_family)
        rounds = [[chosen[(i + r) % len(chosen)] for i in range(len(chosen))] for r in range(3)]
        times: dict[Shape, list[float]] = {s: [] for s in chosen}
        for s in itertools.chain(*rounds):
            gpu.idle(gpu.HOST_S)
            times[s] += gpu.iterations(prec, s, 20, 256 * MiB)[5:]
        best = max(chosen, key=lambda s: ms.mean_rate(s, times[s]) or 0.0)
        out[prec] = (best, ms.mean_rate(best, burst(gpu, prec)(best)) or 0.0)
        sustained(gpu, prec, best)
    return out


def mamf_finder(prec: str, budget: bool) -> tuple[float, Shape]:
    """mamf-finder v2 on the model, in its own process: 30 s on its first shape, then each
    shape of the grid with 50 + 100 iterations, 256 MiB zeroed and C rewritten before each;
    the best FLOPs over mean time."""
    gpu = CappedGpu(budget)
    grid = [(m, n, k) for m in (1024, 2048, 4096, 8192) for n in (1024, 2048, 4096, 8192)
            for k in (8192, 13312, 16384)]
    gpu.hold(prec, grid[0], 30.0, 256 * MiB)
    rates = {}
    for s in grid:
        gpu.idle(gpu.HOST_S)
        rates[s] = ms.mean_rate(s, gpu.iterations(prec, s, 150, 256 * MiB + 4 * s[0] * s[1])[50:])
    best = max(rates, key=lambda s: rates[s] or 0.0)
    return rates[best] or 0.0, best


# Every precision first, last and in between, and both directions.
ORDERS = [list(o) for o in [("tf32", "bf16", "fp16", "fp8"), ("bf16", "fp16", "fp8", "tf32"),
                            ("fp16", "fp8", "tf32", "bf16"), ("fp8", "tf32", "bf16", "fp16"),
                            ("fp8", "fp16", "bf16", "tf32"), ("fp16", "bf16", "tf32", "fp8")]]


@pytest.fixture(scope="module", params=[False, True], ids=["fast-limiter", "1s-budget"])
def runs(request):
    budget = request.param
    mamf = {p: mamf_finder(p, budget) for p in PRECISIONS}
    out = {}
    for name, pipeline in [("new", new_quick), ("old", old_quick)]:
        out[name] = []
        for order in ORDERS:
            gpu = CappedGpu(budget)
            gpu.idle(1.0)
            start = gpu.t
            out[name].append((pipeline(gpu, order), gpu.t - start))
    return mamf, out


def test_the_model_reads_like_the_h200():
    """bf16 on 2026-12-01: burst 838.8 and sustained 724.5 at 2816×3072×16384; mamf-finder
    801.1 at best, 684.6 at 8192³ (and do_bench 676.7 there on 11-30); fp16's 10240×8192×8192
    burst 660.7 against 658.2 sustained (ratio 1.004)."""
    gpu = CappedGpu()

    def after_rest(s: Shape) -> tuple[float, float]:
        gpu.idle(1.0)
        return ms.mean_rate(s, burst(gpu, "bf16")(s)) or 0.0, sustained(gpu, "bf16", s)

    b, sus = after_rest((2816, 3072, 16384))
    assert b == pytest.approx(838.8, rel=0.03) and sus == pytest.approx(724.5, rel=0.03)
    b, sus = after_rest((10240, 8192, 8192))
    assert b / sus == pytest.approx(1.004, abs=0.01)
    assert after_rest((8192, 8192, 8192))[1] == pytest.approx(684.6, rel=0.03)
    rate, (m, n, _) = mamf_finder("bf16", budget=False)
    assert rate == pytest.approx(801.1, rel=0.03) and m * n <= 8192 * 1024


def test_the_quick_search_finds_at_least_what_mamf_finder_finds_in_every_order(runs):
    mamf, out = runs
    for prec, (ref, where) in mamf.items():
        got = [result[prec][1] for result, _ in out["new"]]
        assert min(got) >= ref, (prec, ref, where, got)
        # not biased by order: the same figure whichever precision ran before (within 0.5 %
        # with the fast limiter alone, 2.3 % with the 1 s budget; the old search: up to 23 %)
        assert max(got) / min(got) < 1.03, (prec, got)


def test_the_old_search_depended_on_the_order_and_fell_short(runs):
    mamf, out = runs
    ratios = {p: [result[p][1] / mamf[p][0] for result, _ in out["old"]] for p in PRECISIONS}
    assert min(min(r) for r in ratios.values()) < 0.95, ratios
    assert max(max(r) / min(r) for r in ratios.values()) > 1.1, ratios


def test_the_quick_search_costs_at_most_a_third_of_a_second_more_per_precision(runs):
    _, out = runs
    new = statistics.fmean(t for _, t in out["new"])
    old = statistics.fmean(t for _, t in out["old"])
    assert new - old < 0.35 * len(PRECISIONS), (new, old)


@pytest.mark.parametrize("budget", [False, True])
def test_fp16s_leaders_ranked_by_their_burst_whatever_their_order(budget):
    """fp16's leaders of 2026-12-01 (the real run re-timed them in short rotated rounds, which
    keep each shape behind the same one: 10240×8192×8192 won at 651.6, its burst then 660.7),
    right after bf16's sustained run: ranked by their burst after the idle pause, in any
    order, the pick is the same, and it is not the large shape."""
    lead = [(10240, 8192, 8192), (4096, 4096, 12288), (8192, 8192, 8192), (3072, 2816, 16384),
            (2048, 2048, 13312)]
    picks = set()
    for order in (lead, lead[::-1], lead[2:] + lead[:2]):
        gpu = CappedGpu(budget)
        gpu.hold("bf16", (2816, 3072, 16384), 0.6, SMALL_FLUSH)  # bf16's sustained run
        best, rates = ms.rank_bursts(burst(gpu, "fp16"), order)
        picks.add(best)
        assert rates[(10240, 8192, 8192)] < 0.9 * rates[best]
    assert len(picks) == 1 and ms.family(picks.pop(), SMS, 16384) != "large"


def test_the_long_k_family_alone_comes_within_1_pct_of_mamf_finder():
    """Where wave-quantized layouts bring nothing (another tile, another SM count), the
    one-wave long-K leader alone gets within 1 % of mamf-finder's figure. Not above it in the
    model: there two-wave outputs (1024×8192×13312) read up to 1 % higher in mamf-finder's
    short runs, and the family leaves them out because on the H200 they read below the
    one-wave ones (bf16 1024×8192×8192 751.5 against 1024×4096×16384 801.1; fp8 1355.8 at
    1024×8192×13312 against 1427.9). On the H200 the wave layout is what put us above."""
    gpu = CappedGpu()
    gpu.idle(1.0)
    for prec in PRECISIONS:
        _, tried = ms.search(brief(gpu, prec, 256 * MiB), [2048, 4096, 8192], 16384, 3)
        best, _ = ms.rank_bursts(burst(gpu, prec),
                                 ms.leaders(tried, 3, lambda s: ms.family(s, 0, 16384)))
        got = ms.mean_rate(best, burst(gpu, prec)(best)) or 0.0
        ref = mamf_finder(prec, budget=False)[0]
        assert ms.family(best, SMS, 16384) == "long-K" and got >= 0.99 * ref, (prec, best, got)


def test_every_burst_comes_before_any_sustained_run(monkeypatch):
    """A sustained run holds the GPU at its limit (0.6 s quick, 8 s full): the next
    precision's search and burst must not start in the state it leaves."""
    calls = []

    class Torch:  # what run() touches outside the two phases
        class backends:
            class cuda:
                class matmul:
                    allow_tf32 = False

            class cudnn:
                allow_tf32 = False

    def burst_phase(ctx, torch, prec):
        calls.append(("burst", prec.name))
        yield from ()
        return None if prec.name == "int8" else matmul._Choice(prec, (256, 256, 256), {})

    def sustained_phase(ctx, torch, choice):
        calls.append(("sustained", choice.prec.name))
        yield from ()

    monkeypatch.setattr(matmul, "import_torch", lambda: Torch)
    monkeypatch.setattr(matmul, "_burst_phase", burst_phase)
    monkeypatch.setattr(matmul, "_sustained_phase", sustained_phase)

    class Ctx:
        on_gpu = True

    assert list(matmul.run(Ctx())) == []  # type: ignore[arg-type]
    names = list(matmul.PRECISIONS)
    assert calls == [("burst", n) for n in names] + [("sustained", n) for n in names
                                                     if n != "int8"]
