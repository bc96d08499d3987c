"""Units timed alone (`model.TimedUnit`, `workloads.units`): how a group's time moves from
their timings, across precisions and batch sizes. Each ratio is Σ count × time there ÷ Σ count
× time here over the units timed in both, their kernels' own time where every timing has one
(a step's group times hold no gaps between kernels), else their times back to back."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from gpuaudit.model.opprofile import TimedUnit, UnitGroup

# Units timed alone that took more than this × what their group took in the step are not
# trusted: their timing held something the step did not (the host's launches).
TRUST = 1.5


def unit_time(u: TimedUnit, precision: str, scale: float = 1.0, busy: bool = False,
              width: float = 1.0) -> float | None:
    """The unit's time in `precision` at `scale`, at `width` × its own channels: its
    kernels' own (`busy`) or back to back."""
    t = next((t for t in u.times if t.precision == precision and t.width_scale == width
              and abs(t.batch_scale - scale) < 1e-9), None)
    return None if t is None else (t.busy_ms if busy else t.ms)


def all_busy(units: Sequence[TimedUnit]) -> bool:
    """Whether every timing of `units` has its kernels' own time: ratios take those (a
    step's group times hold no gaps between kernels), never a mix of the two."""
    return all(t.busy_ms for u in units for t in u.times)


def trusted(before_ms: float, held: float, in_step_us: float | None) -> bool:
    """Units timed alone no slower than `TRUST` × their share of the group's time in the
    step (`in_step_us`, all its units; None: not checked)."""
    return in_step_us is None or in_step_us <= 0 or \
        before_ms * 1e3 <= TRUST * in_step_us * max(held, 0.05)


def _flop_share(units: Sequence[TimedUnit], held_flops: float) -> float:
    """`held_flops` as a share of `units`' counted FLOPs (1 where none are counted)."""
    if not any(u.flops for u in units):
        return 1.0
    return held_flops / (sum(u.count * u.flops for u in units) or 1.0)


def _in_both(units: Sequence[TimedUnit], src: str, target: str
             ) -> list[tuple[TimedUnit, float, float]]:
    """The units timed in both precisions, with their times there: their kernels' own where
    every timing has one (`all_busy`), else back to back."""
    busy = all_busy(units)
    both = [(u, unit_time(u, src, busy=busy), unit_time(u, target, busy=busy)) for u in units]
    return [(u, a, b) for u, a, b in both if a and b]


def timed_ratio(units: Sequence[TimedUnit], src: str, target: str,
                in_step_us: float | None = None) -> tuple[float, float] | None:
    """(Σ count × time in `target` ÷ Σ count × time in `src` over the units timed in both,
    the share of the units' counted FLOPs those hold), or None (none timed in both, or their
    timing not trusted: `TRUST`)."""
    both = _in_both(units, src, target)
    if not both:
        return None
    before = sum(u.count * a for u, a, _ in both)
    after = sum(u.count * b for u, _, b in both)
    held = _flop_share(units, sum(u.count * u.flops for u, _, _ in both))
    if not trusted(before, held, in_step_us):
        return None
    return after / before, held


def grown_in_step(units: Sequence[TimedUnit], src: str, target: str, g: UnitGroup,
                  ratio: float) -> float:
    """A linear group's time there ÷ here where its units alone take `ratio` × longer there:
    its step's time past theirs (or short of it) is kept, not multiplied. It is not the
    matmuls' (a 16-bit step's autocast casts and bias-gradient reductions, slower in the step
    than alone and gone in fp32; a timing back to back's gaps between kernels): 24 linear
    groups bf16 → fp32, multiplied −6 … +21 %, kept −2 … +2 % (docs/predict.md). The units'
    time stands for the group's FLOPs where fewer were timed (an MoE's routed experts)."""
    if ratio <= 1 or g.kernel_us <= 0 or g.flops <= 0:
        return ratio
    both = _in_both(units, src, target)
    covered = min(1.0, sum(u.count * u.flops for u, _, _ in both) / g.flops)
    alone_us = 1e3 * sum(u.count * t for u, t, _ in both)
    if alone_us <= 0 or covered <= 0:
        return ratio
    return 1 + (ratio - 1) * alone_us / covered / g.kernel_us


def _curve(u: TimedUnit, precision: str, busy: bool = False) -> list[tuple[float, float]]:
    pts = {t.batch_scale: (t.busy_ms if busy else t.ms) for t in u.times
           if t.precision == precision and t.width_scale == 1.0 and t.ms > 0}
    return sorted((s, v) for s, v in pts.items() if v)


def scaled_time(points: list[tuple[float, float]], scale: float) -> tuple[float, float] | None:
    """The time at `scale` × the batch from (scale, time) points: log-log between two, along
    the last two beyond them (time = a + b × scale); and how many doublings past them.
    Below them, no less than the nearest point's time in proportion (a smaller batch takes
    no less time a sample). Above them, where the two timings fell as the batch grew (a
    layer norm at ×0.5 slower than at ×1), they say nothing of the slope: the nearest
    point's time in proportion (extended, they made ConvNeXt's norms at ×2 barely slower
    than at ×1). A steeper line is kept: a larger batch can take more a sample (its tensors
    past the L2 cache)."""
    if not points:
        return None
    if len(points) == 1:
        s0, t0 = points[0]
        return t0 * scale / s0, abs(math.log2(scale / s0))
    for (s0, t0), (s1, t1) in itertools.pairwise(points):
        if s0 <= scale <= s1:
            f = math.log(scale / s0) / math.log(s1 / s0)
            return math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0))), 0.0
    below = scale < points[0][0]
    (s0, t0), (s1, t1) = (points[:2] if below else points[-2:])
    slope = (t1 - t0) / (s1 - s0)
    edge, at_edge = points[0] if below else points[-1]
    t = t0 + slope * (scale - s0)
    if below:
        t = max(t, min(t0, t1) * scale / max(s0, s1))
    elif slope <= 0:
        t = at_edge * scale / edge
    return max(t, 1e-6), abs(math.log2(scale / edge))


def batch_ratio(units: Sequence[TimedUnit], precision: str, scale: float,
                in_step_us: float | None = None) -> tuple[float, float, float] | None:
    """(Σ count × time at `scale` ÷ Σ count × time at the recorded batch, the share of the
    units' FLOPs timed at more than one batch, doublings past the sizes timed)."""
    before = after = 0.0
    held = 0.0
    past = 0.0
    busy = all_busy(units)
    for u in units:
        pts = _curve(u, precision, busy)
        if len(pts) < 2 or not any(abs(s - 1.0) < 1e-9 for s, _ in pts):
            continue
        at = scaled_time(pts, scale)
        if at is None:
            continue
        base = dict(pts)[1.0]
        before += u.count * base
        after += u.count * at[0]
        held += u.count * u.flops
        past = max(past, at[1])
    if before <= 0:
        return None
    share = _flop_share(units, held)
    if not trusted(before, share, in_step_us):
        return None
    return after / before, share, past
