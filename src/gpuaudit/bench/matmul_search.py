"""Where the maximum achievable matmul rate sits: the candidate shapes and the search over them.
Pure (no torch, no GPU): the suite hands in functions that time a shape; CI tests the search on
made-up rate surfaces, including a power-capped GPU whose readings depend on what ran before.

Candidates come in three families, each a place mamf-finder's sweeps have found the best shape
on some GPU: large outputs (squares, shapes stretched along one axis, and what the hill-climb
reaches from them); one-wave long-K shapes (an output of at most one wave of tiles, M, N in
{1024, 2048, 4096}, with a long reduction: on the H200 mamf-finder's best bf16 and fp8 shape is
1024×4096×16384, fp16 2048×2048×13312, tf32 1024×4096×13312); and wave-quantized layouts,
whose output tiles fill 1 or 2 whole waves of the GPU's SMs (e.g. 2816×3072 on 132 SMs).

A brief timing of each candidate ranks the shapes within a family, a hill-climb refines the
best. The brief timings run back to back, so a reading carries the clock the shapes before it
left (a GPU at its power limit lowers the clock under a large shape for tens of ms), and at a
common clock large outputs win (fewer partial waves). So the brief ranking only picks each
family's leader; the light families are timed first, before the large squares that would pull
the clock down under them. The leaders are then ranked by the figure we report (`rank_bursts`):
each after the same idle pause, mamf-finder's 50 + 100 iterations, FLOPs over the mean time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache

ALIGN = 256  # tensor-core friendly; every searched dimension is a multiple of it
TILE = (128, 256)  # a representative cuBLAS output tile (M, N): only seeds and sorts shapes

Shape = tuple[int, int, int]


def align(x: float) -> int:
    return max(ALIGN, round(x / ALIGN) * ALIGN)


def flops(shape: Shape) -> float:
    return 2.0 * math.prod(shape)


def tiles(m: int, n: int, tile: tuple[int, int] = TILE) -> int:
    return math.ceil(m / tile[0]) * math.ceil(n / tile[1])


def neighbours(shape: Shape, step: float, max_side: int) -> list[Shape]:
    """The shapes one step (a factor of 1 ± step) away along each axis, aligned, in bounds."""
    out = []
    for axis in range(3):
        for f in (1 + step, 1 - step):
            s = list(shape)
            s[axis] = min(max_side, align(s[axis] * f))
            if tuple(s) != shape and tuple(s) not in out:
                out.append(tuple(s))
    return out  # type: ignore[return-value]


def stretched(side: int, max_side: int) -> list[Shape]:
    """Around a good square: the same work laid out long along one axis."""
    half, double = align(side / 2), min(max_side, align(side * 2))
    return [(half, half, min(max_side, align(side * 4))), (side, side, double),
            (double, side, side), (side, double, side)]


LONG_K_SIDES = (1024, 2048, 4096)
LONG_KS = (8192, 13312, 16384)  # mamf-finder's comparison grid's K
LONG_K_MAX_OUTPUT = 2048 * 2048  # M·N: 128 tiles of 128×256, one wave on 128+ SMs


def long_k(max_side: int) -> list[Shape]:
    """Small outputs with a long reduction, M ≠ N included: mamf-finder's grid
    {1024, 2048, 4096}² × {8192, 13312, 16384} where M·N is 2 to 4 Mi (1024² never led there,
    4096² and 2048×4096 are large outputs). Until 2026-12-01 only M = N was tried, so the
    1024×4096 shapes mamf-finder found best for bf16, tf32 and fp8 were never timed."""
    sides = [(m, n) for m in LONG_K_SIDES for n in LONG_K_SIDES
             if 2 * 1024 * 1024 <= m * n <= LONG_K_MAX_OUTPUT]
    return [(m, n, k) for k in LONG_KS if k <= max_side for m, n in sides]


@lru_cache(maxsize=64)
def wave_layouts(sms: int, max_side: int, waves: tuple[int, ...] = (1, 2), count: int = 2,
                 tile: tuple[int, int] = TILE, min_efficiency: float = 0.97
                 ) -> list[tuple[int, int]]:
    """(M, N) whose output tiles fill `waves` whole waves of `sms` SMs (at least
    `min_efficiency` of the last wave busy), the `count` most square per wave count."""
    if sms < 1:
        return []
    found: list[tuple[int, int]] = []
    for w in waves:
        layouts = []
        for m in range(ALIGN, max_side + 1, ALIGN):
            for n in range(ALIGN, max_side + 1, ALIGN):
                t = tiles(m, n, tile)
                if math.ceil(t / sms) == w and t / (w * sms) >= min_efficiency:
                    layouts.append((m, n))
        layouts.sort(key=lambda mn: (max(mn) / min(mn), -mn[0] * mn[1]))
        found += [mn for mn in layouts[:count] if mn not in found]
    return found


def wave_shapes(sms: int, max_side: int) -> list[Shape]:
    """The wave layouts with a long K (their best K is long, as for the long-K family)."""
    ks = [k for k in (12288, 16384) if k <= max_side] or [max_side]
    return [(m, n, k) for m, n in wave_layouts(sms, max_side) for k in ks]


def family(shape: Shape, sms: int, max_side: int) -> str:
    """"wave", "long-K" (an output of at most one wave of tiles, K at least twice M and N) or
    "large" (the rest: squares, stretched shapes, what the hill-climb reached from them)."""
    m, n, k = shape
    if (m, n) in wave_layouts(sms, max_side) and k >= max(m, n):
        return "wave"
    if m * n <= LONG_K_MAX_OUTPUT and k >= 2 * max(m, n):
        return "long-K"
    return "large"


def search(time_shape: Callable[[Shape], float | None], squares: Sequence[int], max_side: int,
           refine_rounds: int, seeds: Sequence[Shape] = (), stretch: bool = True
           ) -> tuple[Shape, dict[Shape, float]]:
    """Rank candidate shapes by a brief timing. `time_shape` gives a rate (higher is better) or
    None when the shape cannot run (out of memory). Returns the best shape and every rate.
    `stretch`: also time the best square laid out long along each axis."""
    tried: dict[Shape, float] = {}

    def best_of(shapes: Sequence[Shape]) -> None:
        for s in shapes:
            if s not in tried and max(s) <= max_side:
                r = time_shape(s)
                if r is not None:
                    tried[s] = r

    # Light shapes first: timed after the large squares they read at the clock those left.
    best_of(long_k(max_side) + list(seeds))
    cubes = [(s, s, s) for s in squares if s <= max_side]
    best_of(cubes)
    if not tried:
        raise RuntimeError("no shape could run (out of memory?)")
    ran = [c for c in cubes if c in tried]
    if ran and stretch:
        best_of(stretched(max(ran, key=tried.__getitem__)[0], max_side))
    step = 0.25
    for _ in range(refine_rounds):
        best = max(tried, key=tried.__getitem__)
        best_of(neighbours(best, step, max_side))
        if max(tried, key=tried.__getitem__) == best:
            step /= 2  # no neighbour won: look closer
    return max(tried, key=tried.__getitem__), tried


def leaders(tried: dict[Shape, float], count: int, kind: Callable[[Shape], str]) -> list[Shape]:
    """The shapes worth timing again: the brief timing's best of every family first (a family
    timed in a worse power state must still get its fair re-run), then the best overall."""
    ranked = sorted(tried, key=tried.__getitem__, reverse=True)
    chosen: list[Shape] = []
    for fam in dict.fromkeys(kind(s) for s in ranked):
        chosen.append(next(s for s in ranked if kind(s) == fam))
    chosen.sort(key=tried.__getitem__, reverse=True)
    for s in ranked:
        if len(chosen) >= count:
            break
        if s not in chosen:
            chosen.append(s)
    return chosen[:max(count, 1)]


def mean_rate(shape: Shape, times_ms: Sequence[float]) -> float | None:
    """mamf-finder's headline statistic: FLOPs over the mean iteration time, in TFLOP/s."""
    ts = [t for t in times_ms if t > 0]
    return flops(shape) / (sum(ts) / len(ts) / 1e3) / 1e12 if ts else None


def rank_bursts(burst: Callable[[Shape], list[float] | None], shapes: Sequence[Shape]
                ) -> tuple[Shape, dict[Shape, float]]:
    """Measure each shape as the reported burst figure is measured and keep the one with the
    highest mean rate. `burst` gives the per-iteration times (ms) of that measurement — the
    same idle pause first, then mamf-finder's 50 + 100 iterations — or None (the shape cannot
    run: dropped).

    A shorter re-timing would rank another quantity: a large shape's 50 + 100 iterations last
    100-300 ms on an H200, long enough for the power limiter to pull the clock down (fp16 at
    10240×8192×8192: burst 660.7, sustained 658.2 TFLOP/s), a one-wave long-K shape's 20-60 ms
    mostly are not (bf16 at 2816×3072×16384: 838.8 against 724.5)."""
    rates: dict[Shape, float] = {}
    for s in shapes:
        got = burst(s)
        r = mean_rate(s, got) if got else None
        if r is not None:
            rates[s] = r
    if not rates:
        raise RuntimeError("none of the leading shapes could run again")
    return max(rates, key=rates.__getitem__), rates


def interleaved(count: int, rounds: int) -> list[list[int]]:
    """Orders of `count` items for `rounds` rounds in which an item follows a different one
    each round where it can: round r steps through the items by a stride coprime with
    `count` (1, then the next, ...). A rotation would not do: rotating A B C D E keeps every
    shape behind the same predecessor in every round."""
    strides = [s for s in range(1, count) if math.gcd(s, count) == 1] or [1]
    out = []
    for r in range(rounds):
        stride, start = strides[r % len(strides)], r // len(strides)
        out.append([(start + i * stride) % count for i in range(count)] if count else [])
    return out


def confirm(time_iters: Callable[[Shape], list[float] | None], shapes: Sequence[Shape],
            rounds: int) -> tuple[Shape, dict[Shape, float]]:
    """Time `shapes` again in `rounds` interleaved rounds (`interleaved`), for fp32 and fp64,
    whose bursts take seconds; `time_iters` gives one round's per-iteration times (ms) or None
    (the shape cannot run: dropped). Returns the shape with the highest mean rate (FLOPs /
    mean time, in TFLOP/s) and every shape's mean rate."""
    times: dict[Shape, list[float]] = {s: [] for s in shapes}
    for order in interleaved(len(shapes), rounds):
        for s in (shapes[i] for i in order):
            if s not in times:
                continue  # could not run
            got = time_iters(s)
            if got is None:
                del times[s]
            else:
                times[s] += [t for t in got if t > 0]
    rates = {s: r for s, ts in times.items() if (r := mean_rate(s, ts)) is not None}
    if not rates:
        raise RuntimeError("none of the leading shapes could run again")
    return max(rates, key=rates.__getitem__), rates
