"""Choosing a batch size, the precision and the gradient accumulation: pure functions over
measured trials (the measuring is `runner`'s).

The batch search doubles the batch from `start` while the step fits in memory with the margin
and throughput still grows, then tries one batch between the last that fitted and the first
that did not. The chosen batch is not the largest that fits: it is the smallest whose
throughput is within `tolerance` of the best measured (past that point a bigger batch buys
memory pressure, not speed), among those whose peak memory leaves `margin` of the device free.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Trial:
    batch: int
    precision: str
    ok: bool
    step_s: float | None = None  # median step time
    samples_per_s: float | None = None
    peak_memory_bytes: int | None = None
    reason: str | None = None  # why it did not run (out of memory, error)
    spread: float | None = None  # (p90 − p10) ÷ median of the step times

    @property
    def oom(self) -> bool:
        return not self.ok and (self.reason or "").startswith("out of memory")


@dataclass(frozen=True)
class SearchConfig:
    start: int = 1
    max_batch: int = 4096
    margin: float = 0.10  # of device memory kept free at the chosen batch
    tolerance: float = 0.03  # within this of the best throughput counts as "as fast"
    plateau: float = 0.02  # stop doubling when two doublings in a row gain less than this
    multiple: int = 8  # the in-between batch is rounded to this (tensor-core tiles)


@dataclass
class Choice:
    trials: list[Trial]
    chosen: Trial | None
    reason: str
    memory_limit_bytes: int | None = None
    notes: list[str] = field(default_factory=list)


def fits(t: Trial, limit: int | None) -> bool:
    return t.ok and (limit is None or t.peak_memory_bytes is None
                     or t.peak_memory_bytes <= limit)


def search(measure: Callable[[int], Trial], capacity_bytes: int | None,
           cfg: SearchConfig = SearchConfig(), precision: str = "") -> Choice:
    """Measure batches (doubling, then one in between) and choose one."""
    limit = int(capacity_bytes * (1 - cfg.margin)) if capacity_bytes else None
    trials: list[Trial] = []
    batch = max(1, cfg.start)
    small_gains = 0
    while batch <= cfg.max_batch:
        t = measure(batch)
        trials.append(t)
        if not fits(t, limit):
            break
        ok = [x for x in trials if fits(x, limit)]
        if len(ok) >= 2:
            gain = (ok[-1].samples_per_s or 0) / max(ok[-2].samples_per_s or 1e-12, 1e-12) - 1
            small_gains = small_gains + 1 if gain < cfg.plateau else 0
            if small_gains >= 2:
                break
        batch *= 2
    ok = [x for x in trials if fits(x, limit)]
    failed = [x for x in trials if not fits(x, limit)]
    if ok and failed and ok[-1].batch == max(x.batch for x in ok) \
            and _best(ok).batch == ok[-1].batch:
        lo, hi = ok[-1].batch, failed[0].batch
        mid = _between(lo, hi, cfg.multiple)
        if mid is not None:
            trials.append(measure(mid))
    return choose(trials, limit, cfg, precision)


def _between(lo: int, hi: int, multiple: int) -> int | None:
    mid = (lo + hi) // 2
    if mid >= multiple:
        mid = mid // multiple * multiple
    return mid if lo < mid < hi else None


def _best(ok: list[Trial]) -> Trial:
    return max(ok, key=lambda t: (t.samples_per_s or 0.0, -t.batch))


def choose(trials: list[Trial], limit: int | None, cfg: SearchConfig = SearchConfig(),
           precision: str = "") -> Choice:
    trials = sorted(trials, key=lambda t: t.batch)
    ok = [t for t in trials if fits(t, limit)]
    if not ok:
        why = next((t.reason for t in trials if t.reason), None)
        over = [t for t in trials if t.ok and not fits(t, limit)]
        if over:
            why = (f"batch {over[0].batch} already needs "
                   f"{(over[0].peak_memory_bytes or 0) / 1e9:.1f} GB, over the "
                   f"{cfg.margin:.0%} margin")
        return Choice(trials, None, f"no batch ran{': ' + why if why else ''}", limit)
    best = _best(ok)
    floor = (best.samples_per_s or 0) * (1 - cfg.tolerance)
    chosen = min((t for t in ok if (t.samples_per_s or 0) >= floor), key=lambda t: t.batch)
    parts = [f"batch {chosen.batch}"]
    if chosen is best:
        parts.append("has the highest throughput measured")
    else:
        parts.append(f"reaches {(chosen.samples_per_s or 0) / (best.samples_per_s or 1):.1%} "
                     f"of the best (batch {best.batch}) within {cfg.tolerance:.0%}")
        if chosen.peak_memory_bytes and best.peak_memory_bytes:
            parts.append(f"with {chosen.peak_memory_bytes / 1e9:.1f} GB instead of "
                         f"{best.peak_memory_bytes / 1e9:.1f} GB")
    failed = [t for t in trials if t.batch > chosen.batch and not fits(t, limit)]
    if failed:
        f = failed[0]
        parts.append(f"batch {f.batch} " + ("ran out of memory" if f.oom else
                                            f"leaves less than the {cfg.margin:.0%} margin"
                                            if f.ok else f"failed ({f.reason})"))
    reason = "; ".join([", ".join(parts[:3]), *parts[3:]])
    return Choice(trials, chosen, reason, limit)


@dataclass(frozen=True)
class Accumulation:
    micro_batch: int
    world_size: int
    steps: int  # micro-batches per optimizer step
    global_batch: int  # what it reaches
    target: int
    note: str | None = None


def accumulation(target_global: int, micro_batch: int, world_size: int = 1) -> Accumulation:
    """Accumulation steps so that micro-batch × world size × steps is the target global
    batch, with the fewest steps and a micro-batch no larger than the chosen one (it fits in
    memory); when no split is exact, the chosen micro-batch and the nearest global batch above
    the target."""
    if target_global < 1 or micro_batch < 1 or world_size < 1:
        raise ValueError("batches and world size must be at least 1")
    steps = max(1, math.ceil(target_global / (micro_batch * world_size)))
    if target_global % world_size == 0:
        per_rank = target_global // world_size
        for s in range(steps, 2 * steps + 1):
            if per_rank % s == 0 and per_rank // s <= micro_batch:
                m = per_rank // s
                return Accumulation(m, world_size, s, target_global, target_global,
                                    None if m == micro_batch else
                                    f"micro-batch {m} (not {micro_batch}): exactly "
                                    f"{target_global} per optimizer step")
    reached = micro_batch * world_size * steps
    return Accumulation(micro_batch, world_size, steps, reached, target_global,
                        f"{reached} per optimizer step: no split gives exactly {target_global}")


@dataclass(frozen=True)
class WorkersChoice:
    workers: int | None
    needed_samples_per_s: float
    reason: str


def choose_workers(rates: dict[int, float], needed_samples_per_s: float,
                   headroom: float = 1.2) -> WorkersChoice:
    """The fewest loader workers whose measured samples/s is `headroom` × what training
    consumes; or the fastest when none is enough."""
    want = needed_samples_per_s * headroom
    enough = sorted(w for w, r in rates.items() if r >= want)
    if enough:
        w = enough[0]
        return WorkersChoice(w, needed_samples_per_s,
                             f"{w} workers load {rates[w]:.0f} samples/s, ≥ {headroom:.1f} × "
                             f"the {needed_samples_per_s:.0f} samples/s training consumes")
    if not rates:
        return WorkersChoice(None, needed_samples_per_s, "no worker count measured")
    w = max(rates, key=lambda k: (rates[k], -k))
    return WorkersChoice(w, needed_samples_per_s,
                         f"no worker count keeps up: {w} workers load {rates[w]:.0f} samples/s "
                         f"of the {needed_samples_per_s:.0f} needed; make samples cheaper")
