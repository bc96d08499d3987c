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

The device also spends time between kernels queued back to back (the median over those
queued 10 µs or more ahead, 1.0–2.6 µs; 0.15–2.8 ms a step), which the kernels' own times
leave out. A host-bound replay keeps it where the step has room (`_with_gap`). Where the
host's pace is measured (its step at batch 1), α is that pace and this gap, up to the
trace's own median (up to `GAP_MAX_US` where the device never waits on the host;
past the trace's median, unless the host's work was timed held at the batch, a host slower
there than at batch 1 would fill it as well, and the band reaches that reading), fills what
the replay lacks of the timed step: a change keeps it per kernel (the zoo's fp32 and bf16
steps showed the same gaps a step, 1.5 and 1.7 ms for BERT), where scaling the step by the
timed ÷ replayed ratio scaled it with the kernels, and raising α to fill it made the host,
not the device, pay for it.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuaudit.model.opprofile import Timeline

DEFAULT_LATENCY_US = 4.0  # launch to start on an idle GPU, where the trace cannot say
ALPHA_RANGE = (0.1, 1.0)
# The host's pace without the profiler ÷ with it, where a recording cannot say (its device
# was never waiting on the host): the mean of the host-bound development recordings on the
# H200 (0.65–0.91), ±`U_ALPHA_DEFAULT`.
DEFAULT_ALPHA = 0.76
U_ALPHA = 0.05
U_ALPHA_DEFAULT = 0.2
IDENTIFIED_SHARE = 0.1  # α is found where the device waits on the host this much at it
QUEUE = 1024  # launches the host can be ahead of the device before a launch blocks
GAP_MAX_US = 4.2  # the largest median gap after every queued kernel in the zoo's H200 traces
QUEUED_DEEP_US = 10.0  # a kernel queued this long before the one ahead of it ended
GAP_ROOM = 1.02  # a host-bound replay with the device's gap this near the step has room for it


@dataclass(frozen=True)
class Replay:
    period_us: float  # one step, in steady state
    alpha: float  # the host's scale
    host_bound_share: float  # of the period, the device waiting for launches
    identified: bool = True  # α found from the recording (else assumed)
    gap_us: float = 0.0  # the device's time between kernels queued back to back
    # how far the host's pace moved while the recording was made: within its timed steps
    # (half their interquartile range ÷ their median), between its own measurements (its
    # step at batch 1, the host alone, over its timed step at the batch, past 1 — a host
    # alone slower than the whole step was slower at one of the two), or over the rounds
    # its step at batch 1 was timed in (half their range ÷ their median), the largest
    unsteady: float = 0.0
    # how much slower than its measured pace (`host_step_us` ÷ the recorded host) α had to
    # make the host to fill the timed step (0 where the measured pace filled it, or none was
    # measured): time the replay places nowhere
    host_short: float = 0.0
    # where the gap that fills the step passed the trace's own median and no step was timed
    # held at the recorded batch: the α that fills it instead with the trace's median gap
    # (the missing time read as the host's, slower at the batch than measured), which the
    # recording cannot rule out (0: none); or, `host_outlying`, where a host as slow as its
    # outlying rounds fills it with no gap at all
    host_alpha: float = 0.0
    host_gap_us: float = 0.0
    host_outlying: bool = False

    @property
    def alpha_unc(self) -> float:
        return math.hypot(U_ALPHA if self.identified else U_ALPHA_DEFAULT, self.unsteady)


@dataclass(frozen=True)
class Segment:
    """Kernels that ran at once (cuDNN's RNNs spread a layer over several streams) replay as
    one: launched with the first of them, lasting their union."""

    launch: float
    start: float
    span: float
    members: tuple[int, ...]
    blocked: float = 0.0  # host time blocked in runtime calls before its launches


_SEGMENTS: dict[int, tuple[Timeline, list[Segment]]] = {}


def segments(tl: Timeline) -> list[Segment]:
    """The timeline's kernels, overlapping ones merged, in launch order."""
    hit = _SEGMENTS.get(id(tl))
    if hit is not None and hit[0] is tl:
        return hit[1]
    order = sorted(range(len(tl.start_us)), key=lambda i: tl.start_us[i])
    out: list[Segment] = []
    members: list[int] = []
    end = -1e18
    for i in order:
        s, d = tl.start_us[i], tl.dur_us[i]
        if members and s < end - 0.01:
            members.append(i)
            end = max(end, s + d)
            continue
        if members:
            out.append(_segment(tl, members, end))
        members, end = [i], s + d
    if members:
        out.append(_segment(tl, members, end))
    out.sort(key=lambda g: g.launch)
    _SEGMENTS[id(tl)] = (tl, out)
    return out


def _segment(tl: Timeline, members: list[int], end: float) -> Segment:
    start = min(tl.start_us[i] for i in members)
    blocked = sum(tl.blocked_us[i] for i in members) if tl.blocked_us else 0.0
    return Segment(min(tl.launch_us[i] for i in members), start, end - start, tuple(members),
                   blocked)


def latency_us(tl: Timeline) -> float:
    """Launch to start of kernels launched while the device was idle: the lower decile."""
    gaps = []
    prev_end = -1e18
    for seg in sorted(segments(tl), key=lambda g: g.start):
        if seg.launch >= prev_end and seg.start >= seg.launch:
            gaps.append(seg.start - seg.launch)
        prev_end = max(prev_end, seg.start + seg.span)
    if not gaps:
        return DEFAULT_LATENCY_US
    gaps.sort()
    return max(0.5, gaps[len(gaps) // 10])


def simulate(tl: Timeline, durs: Sequence[float], alpha: float = 1.0,
             latency: float | None = None, gap: float = 0.0) -> tuple[list[float], float]:
    """Each segment's end (µs, in launch order) with kernel durations `durs` (the recorded
    order), and the device's idle time waiting on launches; `gap`: the device's time
    between a kernel and the next one queued behind it."""
    lat = latency_us(tl) if latency is None else latency
    segs = segments(tl)
    syncs = sorted((s.start_us, s.end_us) for s in tl.syncs)
    launches = [g.launch for g in segs]
    # recorded: when the device had run everything launched before each sync started
    done = []
    latest = -1e18
    for g in segs:
        latest = max(latest, g.start + g.span)
        done.append(latest)
    rec_drain = []
    for s, _ in syncs:
        i = bisect.bisect_left(launches, s)
        rec_drain.append(done[i - 1] if i else s)
    ends = [0.0] * len(segs)
    host_rec = host_new = 0.0  # the last host event's time, recorded and replayed
    free = -1e18
    idle = 0.0
    k = 0  # next sync
    for i, g in enumerate(segs):
        while k < len(syncs) and syncs[k][0] <= g.launch:
            s, e = syncs[k]
            arrive = host_new + (s - host_rec) * alpha
            tail = max(0.0, e - max(s, rec_drain[k]))
            host_new = max(arrive, free) + tail
            host_rec = e
            k += 1
        host_new += max(0.0, g.launch - host_rec - g.blocked) * alpha
        host_rec = max(host_rec, g.launch)
        if i >= QUEUE:
            host_new = max(host_new, ends[i - QUEUE])  # a full launch queue
        ready = host_new + lat
        if ready > free and free > -1e18:
            idle += ready - free
        start = max(ready, free + gap)
        old = sum(tl.dur_us[m] for m in g.members)
        new = sum(durs[m] for m in g.members)
        free = start + (g.span * new / old if old > 0 else g.span)
        ends[i] = free
    return ends, idle


def _period(tl: Timeline, ends: list[float]) -> float:
    """One step's length in steady state: between the ends of the first and the last step's
    last kernels, ÷ the steps between them (the whole window for one step)."""
    marks = list(tl.step_start_us)
    launches = [g.launch for g in segments(tl)]
    if len(marks) < 2 or not ends:
        return max(ends, default=0.0) - (launches[0] if launches else 0.0)
    last_of = []
    for m in marks[1:]:
        i = bisect.bisect_left(launches, m) - 1
        last_of.append(max(ends[: i + 1], default=0.0))
    last_of.append(max(ends))
    return (last_of[-1] - last_of[0]) / (len(last_of) - 1)


def period(tl: Timeline, durs: Sequence[float], alpha: float, latency: float | None = None,
           gap: float = 0.0) -> tuple[float, float]:
    """One step replayed (`_period`), never shorter than the host's own time per step at
    `alpha`: between the first and the last profiled step's ends the device can catch up
    on work queued before the first (a user's T5-small, 2,800 operators a step: its three
    bf16 steps replayed 4 % shorter with their kernels than its host alone issued them, so
    a smaller batch came out slower than the recorded one); in steady state it cannot, and
    every step takes at least its host's issue."""
    ends, idle = simulate(tl, durs, alpha, latency, gap)
    launches = [g.launch for g in segments(tl)]
    span = max(ends, default=0.0) - (launches[0] if launches else 0.0)
    steady = _period(tl, ends)
    if any(durs):
        steady = max(steady, _host_period(tl, alpha, latency))
    return steady, (idle / span if span > 0 else 0.0)


_HOST_PERIODS: dict[tuple[int, float, float | None], tuple[Timeline, float]] = {}


def _host_period(tl: Timeline, alpha: float, latency: float | None) -> float:
    """The host's own time per step at `alpha` (kernels of no length), kept per timeline:
    a prediction replays one timeline many times at few paces."""
    key = (id(tl), alpha, latency)
    hit = _HOST_PERIODS.get(key)
    if hit is not None and hit[0] is tl:
        return hit[1]
    if len(_HOST_PERIODS) > 4096:
        _HOST_PERIODS.clear()
    got = _period(tl, simulate(tl, [0.0] * len(tl.dur_us), alpha, latency)[0])
    _HOST_PERIODS[key] = (tl, got)
    return got


def queued_gap_us(tl: Timeline) -> float:
    """The device's time between a kernel and the next one already queued behind it, launched
    `QUEUED_DEEP_US` or more before it ended: the median over the recording (0 where none
    was). One launched just before carries what is left of its launch: in host-bound traces
    the median over every queued kernel came out 4.0–5.6 µs (an MoE's on one H100, a Llama's
    on one H200), over those queued that deep 1.1–1.3, as their device-bound fp32 traces'
    (1.1–1.5, whichever depth)."""
    gaps = []
    prev_end = None
    for seg in sorted(segments(tl), key=lambda g: g.start):
        if prev_end is not None and seg.launch <= prev_end - QUEUED_DEEP_US and \
                prev_end <= seg.start:
            gaps.append(seg.start - prev_end)
        end = seg.start + seg.span
        prev_end = end if prev_end is None else max(prev_end, end)
    gaps.sort()
    return gaps[len(gaps) // 2] if gaps else 0.0


def host_us(tl: Timeline, latency: float | None = None) -> float:
    """The host's own time per step in the recording (its launches replayed with kernels of
    no length: what is left is the host)."""
    return _host_period(tl, 1.0, latency)


def calibrate(tl: Timeline, step_us: float, host_step_us: float | None = None,
              spread: float = 0.0, held: bool = False, typical: float | None = None) -> Replay:
    """`_calibrate` with the host's unsteadiness (`Replay.unsteady`; `spread`: how far the
    host moved otherwise: the timed steps' half interquartile range ÷ their median, or its
    rounds at batch 1 (`rounds_moved`), the larger; `typical`: how far it moved in most
    rounds (`rounds_typical`), `spread` where not given). `held`: `host_step_us` is the step
    at the recorded batch issued with the device held, not the step at batch 1."""
    lat = latency_us(tl)
    recorded = host_us(tl, lat)
    rep = _calibrate(tl, step_us, host_step_us, held, spread,
                     spread if typical is None else typical, lat, recorded)
    apart = host_step_us / step_us - 1 if host_step_us and step_us > 0 else 0.0
    if max(apart, spread) > 0:
        rep = dataclasses.replace(rep, unsteady=max(apart, spread))
    paced = host_step_us / recorded if host_step_us and recorded > 0 else None
    if paced and rep.alpha > paced:
        rep = dataclasses.replace(rep, host_short=rep.alpha / paced - 1)
    return rep


def half_iqr(values: Sequence[float]) -> float:
    """Half the interquartile range of `values` (two or more) ÷ their median."""
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return (q3 - q1) / 2 / statistics.median(values)


def rounds_typical(rounds_ms: Sequence[float]) -> float:
    """How far the host's pace moved in most of its rounds: `half_iqr` (`rounds_moved` with
    fewer than 4). Which of two readings fills a step is decided on it; the band, which must
    hold wherever a later process runs, on the range."""
    r = [x for x in rounds_ms if x > 0]
    return half_iqr(r) if len(r) >= 4 else rounds_moved(r)


def rounds_moved(rounds_ms: Sequence[float]) -> float:
    """How far the host's pace moved over the rounds its step at batch 1 was timed in: half
    their range ÷ their median (0 with fewer than 2). The range, not the quartiles: on a
    host whose pace wanders, a later process may run at any pace the rounds visited (the
    lent machine's host went from 3.3 to 4.5 ms a round for one model while profiling, and
    ran 30 % slower than profiled in the next process)."""
    r = [x for x in rounds_ms if x > 0]
    if len(r) < 2:
        return 0.0
    return (max(r) - min(r)) / 2 / statistics.median(r)


def _calibrate(tl: Timeline, step_us: float, host_step_us: float | None, held: bool,
               spread: float, typical: float, lat: float, recorded: float) -> Replay:
    """α such that the recorded kernels replay in the timed step (module docstring). Where
    they do at the profiled pace already (the device never waited on the host), α is the
    host's time per step measured without the profiler ÷ the recorded one (`host_step_us`,
    the step at a batch whose kernels hide nothing), else `DEFAULT_ALPHA`; where the device
    waited under `IDENTIFIED_SHARE` at the α found, that α only bounds it from above, and the
    measured ratio (else `DEFAULT_ALPHA`) below the bound is taken. `lat`: the trace's
    launch latency; `recorded`: the host's own time per step in it (`host_us`)."""
    durs = tl.dur_us
    # the host's own time per step measured without the profiler, as a share of the recorded
    measured = (min(1.0, max(ALPHA_RANGE[0], host_step_us / recorded))
                if host_step_us and recorded > 0 else None)
    if measured is not None:
        gapped = _gap_at(tl, durs, measured, lat, step_us, held, spread, typical)
        if gapped is not None:
            return gapped
    full, share = period(tl, durs, 1.0, lat)
    if full <= step_us * 1.02:
        if measured is not None:
            return Replay(period(tl, durs, measured, lat)[0], measured, share, True)
        return Replay(period(tl, durs, DEFAULT_ALPHA, lat)[0], DEFAULT_ALPHA, share, False)
    lo, hi = ALPHA_RANGE
    low_period, _ = period(tl, durs, lo, lat)
    if low_period >= step_us:
        p, share = period(tl, durs, lo, lat)
        return _with_gap(tl, Replay(p, lo, share), step_us, lat)
    lo = _longest_within(lo, hi, lambda a: period(tl, durs, a, lat)[0] > step_us)
    p, share = period(tl, durs, lo, lat)
    if share < IDENTIFIED_SHARE:
        # the device hardly waited on the host even at α: α is only bounded above by it;
        # below that bound, the host's own time measured without the profiler says more than
        # the development recordings' mean
        alpha = min(lo, measured if measured is not None else DEFAULT_ALPHA)
        return Replay(period(tl, durs, alpha, lat)[0], alpha, share, False)
    return _with_gap(tl, Replay(p, lo, share), step_us, lat)


def _with_gap(tl: Timeline, rep: Replay, step_us: float, lat: float) -> Replay:
    """A host-bound replay at its α with the device's own gap between the kernels it ran back
    to back (the trace's median) where the step has room for it: the device's gaps hide in
    its waits for the host, and a change that lets the device bind shows them (a user's T5
    v1.1, host-bound on one H100 at 3,210 kernels a step, ran 4,869 at its base size with
    1.5 µs between them, 7.3 ms of its 158 ms step). Where they would lengthen the step
    instead, the gap and the host's pace cannot be told apart, and the host's reading stands:
    a VAE's ×0.5 on one H200 came out −4.6 % so and +23.9 % with its gaps."""
    gap = queued_gap_us(tl)
    if gap <= 0:
        return rep
    p, share = period(tl, tl.dur_us, rep.alpha, lat, gap)
    if p > step_us * GAP_ROOM:
        return rep
    return dataclasses.replace(rep, period_us=p, host_bound_share=share, gap_us=gap)


def _gap_at(tl: Timeline, durs: Sequence[float], alpha: float, lat: float, step_us: float,
            held: bool = False, spread: float = 0.0, typical: float = 0.0) -> Replay | None:
    """At the host's measured pace `alpha`, the device's gap between queued kernels (up to
    the trace's own median) that makes the replay last the timed step. None, and α found
    instead, where the replay without it already outlasts the step (the host measured
    slower than the step allows), where the device waits on the host for
    `IDENTIFIED_SHARE` of it or more at a pace from the step at batch 1 (the host binds: a
    gap and a host slower at the recorded batch cannot be told apart; a pace `held` at that
    batch tells them apart: MobileNetV2's fp32 step, 25.7 ms, replays in 25.2 at its held
    15.96 ms, the device waiting on launches 10 % of it, and a gap of 0.9 µs between its
    kernels fills the rest, where an α raised to fill it made the host 25 ms), or where even
    the trace's gap (or, the device never waiting on the host, `GAP_MAX_US`) leaves it short
    by more than 2 % (the host ran slower in the step than alone), or where a host slower by
    no more than its pace moved in most rounds (`typical`) fills the step too: a shortfall
    the host's own unsteadiness explains is not the device's (the DLRM's bf16 step on one
    H200 replayed 2 % short at its held pace, which moved ±4 % in most rounds: a gap put
    there made its fp32 prediction 9 % slow; read as a host 2 % slower, it came within 3 %).
    A host slower only by as much as its outlying rounds (`spread`) is not taken, but the
    band reaches it (a user's DeiT-S: its bf16 step replayed 4 % short at its held pace,
    which moved ±11 % in most rounds and ±30 % over all, the first round slowest; read as
    the host's, batch 64 came out 20 % slow, the host pinned at 28 ms; the trace's own gap
    between queued kernels, 1.5 µs, fills it, and batch 64 came within 6 %)."""
    most = queued_gap_us(tl)
    bare, share = period(tl, durs, alpha, lat)
    if bare > step_us or (share >= IDENTIFIED_SHARE and not held):
        return None
    def slower_fills(moved: float) -> bool:
        return moved > 0 and period(tl, durs, min(1.0, alpha * (1 + moved)), lat)[0] >= step_us

    if slower_fills(typical):
        return None
    traced = most
    full, share_full = period(tl, durs, alpha, lat, most)
    if full < step_us / 1.02 and share_full < IDENTIFIED_SHARE:
        # the device hardly waited on the host: what the replay lacks is the device's own,
        # between its kernels, past the trace's median up to the largest median seen
        most = max(most, GAP_MAX_US)
        full, share_full = period(tl, durs, alpha, lat, most)
    if full < step_us / 1.02:
        return None
    rep = Replay(full, alpha, share_full, True, gap_us=most)
    if full > step_us:
        gap = _longest_within(0.0, most,
                              lambda g: period(tl, durs, alpha, lat, g)[0] > step_us)
        p, share = period(tl, durs, alpha, lat, gap)
        rep = Replay(p, alpha, share, True, gap_us=gap)
    if rep.gap_us > traced * 1.02 and not held:
        # past the trace's own gap, with the host's pace at the batch untimed, the rest may
        # as well be a host slower there than at batch 1 (a user's GIN, four syncs a step:
        # its bf16 step ran between the two readings)
        rep = dataclasses.replace(rep, host_alpha=_alpha_filling(tl, durs, alpha, lat,
                                                                step_us, traced),
                                  host_gap_us=traced)
    elif slower_fills(spread):
        rep = dataclasses.replace(rep, host_alpha=_alpha_filling(tl, durs, alpha, lat,
                                                                step_us, 0.0),
                                  host_outlying=True)
    return rep


def _alpha_filling(tl: Timeline, durs: Sequence[float], lo: float, lat: float,
                   step_us: float, gap: float) -> float:
    """The α from `lo` up to 1 at which the replay with `gap` between queued kernels lasts
    `step_us` (1 where even that falls short)."""
    if period(tl, durs, 1.0, lat, gap)[0] <= step_us:
        return 1.0
    return _longest_within(lo, 1.0, lambda a: period(tl, durs, a, lat, gap)[0] > step_us)


def _longest_within(lo: float, hi: float, too_long: Callable[[float], bool]) -> float:
    """The largest x in [lo, hi] that `too_long` (rising with x) leaves false, by bisection."""
    for _ in range(30):
        mid = (lo + hi) / 2
        if too_long(mid):
            hi = mid
        else:
            lo = mid
    return lo
