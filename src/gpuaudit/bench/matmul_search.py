"""Where the maximum achievable matmul rate sits: the candidate shapes and the search over them.
Pure (no torch, no GPU): the suite hands in functions that time a shape; CI tests the search on
made-up rate surfaces, including ones whose readings depend on what ran just before.

Candidates come in families, each a place mamf-finder's sweeps have found the best shape on
some GPU: squares; shapes stretched along one axis; the long-K family (small M, N, long K: few
output tiles, streaming operands, less power per FLOP; mamf-finder's H200 bf16 best
2048×2048×13312 sits there); and wave-quantized layouts, whose output tiles fill whole waves of
the GPU's SMs (mamf-finder v4's auto search seeds from them: e.g. 1536×2816 is exactly one wave
of 128×256 tiles on 132 SMs). A brief timing of each candidate (L2 flushed between iterations)
ranks them, a hill-climb refines the best, then the leaders, the best of every family among
them, are timed again in interleaved rounds: every round times each leader once, so none is
favoured by the power state the previous shape left (a brief timing right after a large shape
reads low, right after a small one high). The winner has the highest mean (FLOPs over the mean
iteration time: mamf-finder's headline statistic) over its rounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache

ALIGN = 256  # tensor-core friendly; every searched dimension is a multiple of it
TILE = (128, 256)  # a representative cuBLAS output tile (M, N): only seeds the wave layouts

Shape = tuple[int, int, int]


def align(x: float) -> int:
    return max(ALIGN, round(x / ALIGN) * ALIGN)


def flops(shape: Shape) -> float:
    return 2.0 * math.prod(shape)


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
LONG_KS = (8192, 12288, 13312, 16384)


def long_k(max_side: int) -> list[Shape]:
    """Small outputs with a long reduction (on H100/H200 bf16 this ridge beats every square by
    10–15 %; mamf-finder's published best shapes sit there too)."""
    return [(mn, mn, k) for mn in LONG_K_SIDES for k in LONG_KS if k <= max_side]


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
                tiles = math.ceil(m / tile[0]) * math.ceil(n / tile[1])
                if math.ceil(tiles / sms) == w and tiles / (w * sms) >= min_efficiency:
                    layouts.append((m, n))
        layouts.sort(key=lambda mn: (max(mn) / min(mn), -mn[0] * mn[1]))
        found += [mn for mn in layouts[:count] if mn not in found]
    return found


def wave_shapes(sms: int, max_side: int) -> list[Shape]:
    """The wave layouts with a long K (their best K is long, as for the long-K family)."""
    ks = [k for k in (12288, 16384) if k <= max_side] or [max_side]
    return [(m, n, k) for m, n in wave_layouts(sms, max_side) for k in ks]


def family(shape: Shape, sms: int, max_side: int) -> str:
    m, n, k = shape
    if shape in long_k(max_side):
        return "long-K"
    if (m, n) in wave_layouts(sms, max_side) and k >= max(m, n):
        return "wave"
    if m == n == k:
        return "square"
    return "other"


def search(time_shape: Callable[[Shape], float | None], squares: Sequence[int], max_side: int,
           refine_rounds: int, seeds: Sequence[Shape] = ()) -> tuple[Shape, dict[Shape, float]]:
    """Rank candidate shapes by a brief timing. `time_shape` gives a rate (higher is better) or
    None when the shape cannot run (out of memory). Returns the best shape and every rate."""
    tried: dict[Shape, float] = {}

    def best_of(shapes: Sequence[Shape]) -> None:
        for s in shapes:
            if s not in tried and max(s) <= max_side:
                r = time_shape(s)
                if r is not None:
                    tried[s] = r

    best_of([(s, s, s) for s in squares if s <= max_side])
    if not tried:
        raise RuntimeError("no shape could run (out of memory?)")
    side = max(tried, key=tried.__getitem__)[0]
    best_of(stretched(side, max_side) + long_k(max_side) + list(seeds))
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


def confirm(time_iters: Callable[[Shape], list[float] | None], shapes: Sequence[Shape],
            rounds: int) -> tuple[Shape, dict[Shape, float]]:
    """Time `shapes` again in `rounds` interleaved rounds (rotated, so a shape does not always
    follow the same one); `time_iters` gives one round's
    per-iteration times (ms) or None (the shape cannot run: dropped). Returns the shape with
    the highest mean rate (FLOPs / mean time, in TFLOP/s) and every shape's mean rate."""
    times: dict[Shape, list[float]] = {s: [] for s in shapes}
    for r in range(rounds):
        order = list(times)
        k = r % len(order) if order else 0
        for s in order[k:] + order[:k]:  # each round starts one later: different predecessors
            got = time_iters(s)
            if got is None:
                del times[s]
            else:
                times[s] += [t for t in got if t > 0]
    rates = {s: flops(s) / (sum(ts) / len(ts) / 1e3) / 1e12 for s, ts in times.items() if ts}
    if not rates:
        raise RuntimeError("none of the leading shapes could run again")
    return max(rates, key=rates.__getitem__), rates
