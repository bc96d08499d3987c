"""torch.compile in a job: its warm-up, its recompiles and their causes, from the compile
events the bootstrap wrote (dynamo's start/end callbacks, its recompile reasons), and where the
steady state begins.

The steady state begins at the end of the first step after which `STEADY_STEPS` steps run with
no compilation in them; before it is warm-up, left out of the diagnosis window. A job that
never gets there (it recompiles every few steps, or ended while compiling) has no steady
state: its whole run is the window, and compilation is its finding.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass

from .channel import JobEvent, StepTimes

STEADY_STEPS = 3


@dataclass(frozen=True)
class CompileStats:
    compiles: int  # compilations started (the first of each function, and recompiles)
    recompiles: int  # those dynamo gave a guard failure for
    compile_s: float  # time compiling (intervals merged), over the whole job
    window_compile_s: float  # of it, inside the diagnosis window
    window_s: float  # the diagnosis window's length
    warmup_s: float | None  # from the job's start to the steady state (None: never steady)
    steady_from_s: float | None  # time.monotonic() where the steady state begins
    still_compiling: bool  # a compilation had not ended when the job did
    reasons: tuple[tuple[str, int], ...] = ()  # dynamo's recompile reasons, most common first
    where: tuple[str, ...] = ()  # the functions recompiled
    limit_hit: str | None = None  # dynamo's message when it stopped recompiling

    @property
    def window_share(self) -> float:
        return min(1.0, self.window_compile_s / self.window_s) if self.window_s > 0 else 0.0


def _intervals(events: Sequence[JobEvent], end_s: float) -> list[tuple[float, float]]:
    """Compile intervals, nested or overlapping ones merged; an open one ends at `end_s`."""
    raw: list[tuple[float, float]] = []
    open_at: list[float] = []
    for e in events:
        if e.kind == "compile_start":
            open_at.append(e.t_s)
        elif e.kind == "compile_end" and open_at:
            raw.append((open_at.pop(0), e.t_s))
    raw += [(t, end_s) for t in open_at]
    merged: list[tuple[float, float]] = []
    for a, b in sorted(raw):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _overlap(intervals: Sequence[tuple[float, float]], a: float, b: float) -> float:
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in intervals)


def steady_start(intervals: Sequence[tuple[float, float]], steps: StepTimes | None
                 ) -> float | None:
    """The end of the first step after which STEADY_STEPS steps have no compilation."""
    if not intervals:
        return None
    if steps is None or len(steps.end_s) < STEADY_STEPS + 1:
        return None
    ends = steps.end_s
    for i in range(len(ends) - STEADY_STEPS):
        a, b = ends[i], ends[i + STEADY_STEPS]
        if a >= intervals[0][1] and _overlap(intervals, a, b) == 0.0:
            return a
    return None


def compile_stats(events: Sequence[JobEvent], *, job_start_s: float, job_end_s: float,
                  steps: StepTimes | None) -> CompileStats | None:
    """None when nothing was compiled."""
    starts = [e for e in events if e.kind == "compile_start"]
    if not starts:
        return None
    intervals = _intervals(events, job_end_s)
    steady = steady_start(intervals, steps)
    window_from = steady if steady is not None else job_start_s
    reasons = collections.Counter(r.split("\n")[0][:160] for e in events
                                  if e.kind == "recompile" for r in e.reasons[:1])
    where = tuple(dict.fromkeys(e.code for e in events if e.kind == "recompile" and e.code))
    limit = next((e.message for e in events if e.kind == "limit"), None)
    ends = sum(1 for e in events if e.kind == "compile_end")
    return CompileStats(
        compiles=len(starts), recompiles=sum(1 for e in events if e.kind == "recompile"),
        compile_s=round(sum(b - a for a, b in intervals), 3),
        window_compile_s=round(_overlap(intervals, window_from, job_end_s), 3),
        window_s=round(max(0.0, job_end_s - window_from), 3),
        warmup_s=round(steady - job_start_s, 3) if steady is not None else None,
        steady_from_s=steady, still_compiling=ends < len(starts),
        reasons=tuple(reasons.most_common(3)), where=where[:3], limit_hit=limit)
