"""The profiled steps replayed with other kernel times: when the host launched each kernel and
waited for the device is kept, each kernel starts when it has been launched and the one
before it has finished (one stream), and a host wait ends when the device has run everything
launched before it. So a step whose host cannot keep up stays as long as its launches take
however fast its kernels get, and one whose kernels are long follows them (Daydream, Zhu et
al., USENIX ATC 2020, simulates a step's dependency graph with changed durations the same
way).

The profiler slows the host (each operator is recorded): a host-bound step is longer under
it than timed without it. The host's own time between its events is scaled by α, found so
that the replay with the recorded kernel times lasts the timed step; the replay with the
changed times then gives the changed step, × the timed step ÷ the replayed one (≈ 1).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from gpuaudit.model.opprofile import Timeline

DEFAULT_LATENCY_US = 4.0  # launch to start on an idle GPU, where the trace cannot say
ALPHA_RANGE = (0.1, 1.0)


@dataclass(frozen=True)
class Replay:
    period_us: float  # one step, in steady state
    alpha: float  # the host's scale
    host_bound_share: float  # of the period, the device waiting for launches


def latency_us(tl: Timeline) -> float:
    """Launch to start of kernels that found the device idle: the lower decile."""
    gaps = []
    prev_end = -1e18
    for launch, start, dur in zip(tl.launch_us, tl.start_us, tl.dur_us, strict=True):
        if start - prev_end > 1.0 and start >= launch:
            gaps.append(start - launch)
        prev_end = max(prev_end, start + dur)
    if not gaps:
        return DEFAULT_LATENCY_US
    gaps.sort()
    return max(0.5, gaps[len(gaps) // 10])


def simulate(tl: Timeline, durs: Sequence[float], alpha: float = 1.0,
             latency: float | None = None) -> tuple[list[float], float]:
    """Each kernel's end (µs) with durations `durs` (the recorded order), and the device's
    idle time waiting on launches."""
    lat = latency_us(tl) if latency is None else latency
    n = len(tl.launch_us)
    syncs = sorted((s.start_us, s.end_us) for s in tl.syncs)
    # recorded: when the device had run everything launched before each sync started
    done = []  # the recorded device's progress: the latest end of the first i kernels
    latest = -1e18
    for start, dur in zip(tl.start_us, tl.dur_us, strict=True):
        latest = max(latest, start + dur)
        done.append(latest)
    rec_drain = []
    for s, _ in syncs:
        i = bisect.bisect_left(tl.launch_us, s)
        rec_drain.append(done[i - 1] if i else s)
    ends = [0.0] * n
    host_rec = host_new = 0.0  # the last host event's time, recorded and replayed
    free = -1e18
    idle = 0.0
    k = 0  # next sync
    for i in range(n):
        launch = tl.launch_us[i]
        while k < len(syncs) and syncs[k][0] <= launch:
            s, e = syncs[k]
            arrive = host_new + (s - host_rec) * alpha
            tail = max(0.0, e - max(s, rec_drain[k]))
            host_new = max(arrive, free) + tail
            host_rec = e
            k += 1
        host_new += max(0.0, launch - host_rec) * alpha
        host_rec = max(host_rec, launch)
        ready = host_new + lat
        if ready > free and free > -1e18:
            idle += ready - free
        start = max(ready, free)
        free = start + durs[i]
        ends[i] = free
    return ends, idle


def _period(tl: Timeline, ends: list[float]) -> float:
    """One step's length in steady state: between the ends of the first and the last step's
    last kernels, ÷ the steps between them (the whole window for one step)."""
    marks = list(tl.step_start_us)
    if len(marks) < 2 or not ends:
        return max(ends, default=0.0) - (tl.launch_us[0] if tl.launch_us else 0.0)
    last_of = []
    for m in marks[1:]:
        i = bisect.bisect_left(tl.launch_us, m) - 1
        last_of.append(max(ends[: i + 1], default=0.0))
    last_of.append(max(ends))
    return (last_of[-1] - last_of[0]) / (len(last_of) - 1)


def period(tl: Timeline, durs: Sequence[float], alpha: float, latency: float | None = None
           ) -> tuple[float, float]:
    ends, idle = simulate(tl, durs, alpha, latency)
    span = max(ends, default=0.0) - (tl.launch_us[0] if tl.launch_us else 0.0)
    return _period(tl, ends), (idle / span if span > 0 else 0.0)


def calibrate(tl: Timeline, step_us: float) -> Replay:
    """α such that the recorded kernels replay in the timed step (module docstring)."""
    lat = latency_us(tl)
    durs = tl.dur_us
    full, share = period(tl, durs, 1.0, lat)
    if full <= step_us:
        return Replay(full, 1.0, share)
    lo, hi = ALPHA_RANGE
    low_period, _ = period(tl, durs, lo, lat)
    if low_period >= step_us:
        p, share = period(tl, durs, lo, lat)
        return Replay(p, lo, share)
    for _ in range(30):
        mid = (lo + hi) / 2
        p, _ = period(tl, durs, mid, lat)
        if p > step_us:
            hi = mid
        else:
            lo = mid
    p, share = period(tl, durs, lo, lat)
    return Replay(p, lo, share)
