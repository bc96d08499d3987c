"""The prediction of a step recorded with its unit groups and timeline: the group changes
(`predict.groups`) kept per group, the classes' times and work in the step state updated from
them (for the changes that follow: another GPU, more GPUs), and the step replayed from its
timeline with every kernel's new time (`predict.timeline`), with the band replayed at every
group's low and high end."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from gpuaudit.errors import BadInputError
from gpuaudit.model.opprofile import BATCH_SCALES, MEMORY_CLASSES, TENSOR_CLASSES, OpProfile

from . import groups as grp
from . import timeline as tlm
from .ideal import ELEMENT_BYTES, ideal_seconds
from .precision import _in_width
from .profile import StepProfile
from .state import StepState

# The host's own work per step when autocast is switched off (a 16-bit step → fp32 or tf32;
# the inverse when it is switched on), for recordings that did not time it (`host_ratio`):
# every operator of a 16-bit step passes autocast's dispatch and its casts' cache. The
# development families' profiled steps, fp32 ÷ bf16 host time: 0.68–1.05, geometric mean
# 0.85; the band covers their spread.
AUTOCAST_OFF_HOST = 0.85
U_AUTOCAST_HOST = 0.22
# Counted work at two batches this close is the same work (the optimizer's traffic alone
# differs by nothing; a batch's activations by far more)
SAME_WORK = 1e-3
# The least uncertainty on a ratio the recording timed: the host's timing itself
# (`timeline.U_ALPHA`).
U_HOST_RATIO = 0.05


@dataclass
class Grouped:
    record: OpProfile
    changes: dict[int, grp.GroupChange]
    # per class, later changes that act on whole classes (another GPU model): time × factor,
    # and the uncertainty they add
    class_factor: dict[str, float] = field(default_factory=lambda: defaultdict(lambda: 1.0))
    class_unc: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    # group → its kernels' µs over the profiled steps (`steps`): a kernel's fixed latency
    # (`groups.FLOOR_US`) is of each kernel as it ran, not of its share of one step
    kernels: dict[int, list[float]] = field(default_factory=dict)
    steps: int = 1
    host_scale: float = 1.0  # the host's work per step, × (another size launches more)
    host_unc: float = 0.0  # the relative uncertainty on it
    notes: list[str] = field(default_factory=list)  # said with the prediction

    def recorded_us(self, i: int) -> float:
        """A group's recorded time per step (µs): its kernels' as `group_us` reads them."""
        ks = self.kernels.get(i)
        return sum(ks) / self.steps if ks is not None else self.changes[i].group.kernel_us

    def group_us(self, i: int) -> float:
        """A group's new time per step (µs), its kernels each changed."""
        c = self.changes[i]
        ks = self.kernels.get(i)
        if ks is not None:
            return sum(c.apply(d) for d in ks) / self.steps
        g = c.group
        if not g.kernels:
            return g.kernel_us * c.ratio
        mean = g.kernel_us / g.kernels
        return g.kernels * c.apply(mean)


def repair_flops(record: OpProfile) -> tuple[OpProfile, str | None]:
    """FLOPs counted under a memory-bound unit are a matmul-bound unit's backward charged to
    its neighbour (torch's formulas give FLOPs to matmuls, convolutions and attention only;
    the fp32 recordings of ResNet-18 and a U-Net on CUDA tallied their convolutions'
    gradients under the ReLU after them): they join the matmul-bound group that took the
    most time, and a note says so."""
    stray = [(i, g) for i, g in enumerate(record.groups)
             if g.op_class in MEMORY_CLASSES and g.flops > 0]
    tensor = [(g.kernel_us, i) for i, g in enumerate(record.groups)
              if g.op_class in TENSOR_CLASSES and g.flops > 0]
    if not stray or not tensor:
        return record, None
    moved = sum(g.flops for _, g in stray)
    to = max(tensor)[1]
    groups = list(record.groups)
    for i, g in stray:
        groups[i] = g.model_copy(update={"flops": 0.0, "alt_batch_flops": None})
    dest = groups[to]
    alts = [g.alt_batch_flops for _, g in stray]
    alt = None if dest.alt_batch_flops is None or None in alts else \
        dest.alt_batch_flops + sum(a for a in alts if a is not None)
    groups[to] = dest.model_copy(update={"flops": dest.flops + moved, "alt_batch_flops": alt})
    note = (f"{moved / 1e12:.3g} TFLOP a step counted under "
            f"{', '.join(sorted({f'{g.op_class}/{g.unit}' for _, g in stray}))} (units "
            f"without FLOPs of their own) taken as {dest.op_class}/{dest.unit}'s")
    return record.model_copy(update={"groups": tuple(groups)}), note


def start(record: OpProfile | None) -> Grouped | None:
    if record is None or record.legacy or not record.groups:
        return None
    record, note = repair_flops(record)
    out = Grouped(record, {i: grp.GroupChange(g) for i, g in enumerate(record.groups)})
    if note:
        out.notes.append(note)
    tl = record.timeline
    if tl is not None and tl.dur_us:
        from gpuaudit.workloads.kernelview import shared_us

        # each kernel's share of the time its group's kernels held the device (those that
        # ran side by side share it), as the group's time was read from the trace
        per: dict[int, list[float]] = defaultdict(list)
        for d, gi in zip(shared_us(tl.start_us, tl.dur_us, tl.group), tl.group, strict=True):
            per[gi].append(d)
        out.kernels, out.steps = dict(per), max(1, tl.steps)
    return out


def _fallback_note(g: Grouped, state: StepState, what: str) -> None:
    """Matmul-bound time no trusted timing moved: a note with its share of the step and the
    band it took."""
    moved = sum(ch.group.kernel_us for ch in g.changes.values() if ch.fallback) / 1e3
    unc = max((ch.unc for ch in g.changes.values() if ch.fallback), default=grp.U_UNTIMED)
    how = "its share of the roofline" if what.startswith("precision") else "its counted FLOPs"
    total = sum(ch.group.kernel_us for ch in g.changes.values()) / 1e3
    if total > 0 and moved / total >= 0.1:
        names = sorted({f"{ch.group.op_class}/{ch.group.unit}" for ch in g.changes.values()
                        if ch.fallback and ch.group.kernel_us / 1e3 >= 0.05 * total})
        state.notes.append(f"{100 * moved / total:.0f} % of the step's device time "
                           f"({', '.join(names)}) has no trusted timing alone for the {what}: "
                           f"moved by {how}, ±{100 * unc:.0f} %")


def _refresh(g: Grouped, state: StepState, why: str) -> None:
    """Each class's time and uncertainty from its groups."""
    by_class: dict[str, list[int]] = defaultdict(list)
    for i, ch in g.changes.items():
        by_class[ch.group.op_class].append(i)
    for cls, idx in by_class.items():
        c = state.classes.get(cls)
        if c is None:
            continue
        new = [g.group_us(i) for i in idx]
        total = sum(new)
        recorded = sum(g.recorded_us(i) for i in idx) / 1e3
        # the start's trim of a profile that outlasted the timed step (engine._start)
        scale = min(1.0, c.measured_ms / recorded) if recorded > 0 else 1.0
        c.ms = total / 1e3 * scale * g.class_factor[cls]
        c.unc = math.hypot(sum(u * g.changes[i].unc for u, i in zip(new, idx, strict=True))
                           / total if total else 0.0, g.class_unc[cls])
        top = sorted(zip(new, idx, strict=True), reverse=True)[:3]
        c.basis.append(f"{why}: " + "; ".join(
            f"{g.changes[i].group.unit} {g.changes[i].basis[-1].split(': ', 1)[-1]}"
            for _, i in top if g.changes[i].basis))


def precision(g: Grouped, state: StepState, target: str) -> None:
    src = state.precision
    rates = (state.roofs.matmul(src) or 1.0, state.roofs.matmul(target) or 1.0)
    only = grp.precision_change(g.record, g.changes, src, target, rates,
                                state.roofs.memory_gbps)
    state.notes.extend(n for n in g.notes if n not in state.notes)
    held = held_ratio(g.record, src, target)
    if held is not None:
        ratio, unc = held
        g.host_scale *= ratio
        g.host_unc = math.hypot(g.host_unc, unc)
        state.basis.append(f"the host's work per step × {ratio:.2f} ±{100 * unc:.0f} %: its "
                           "step at this batch issued with the device held, in both, round "
                           "by round")
    elif _autocast(src) != _autocast(target):
        timed = host_ratio(g.record)
        how = (f"its step at batch {g.record.host_batch} timed in both, round by round"
               if timed else "the development families' mean")
        ratio, unc = timed or ((AUTOCAST_OFF_HOST if _autocast(src) else 1 / AUTOCAST_OFF_HOST),
                               U_AUTOCAST_HOST)
        g.host_scale *= ratio
        g.host_unc = math.hypot(g.host_unc, unc)
        state.basis.append(f"the host's work per step × {ratio:.2f} ±{100 * unc:.0f} %: "
                           f"autocast switched {'off' if _autocast(src) else 'on'} ({how})")
    _refresh(g, state, f"{src} → {target}")
    for cls, added in only.items():
        if cls in state.classes:
            state.classes[cls].basis.append(
                f"{src} → {target}: +{added.ms:.3g} ms a step for {added.bytes / 1e9:.3g} GB "
                f"moved under {target} past what a width change explains (casts {src} does "
                f"not run), at {grp.CAST_OF_COPY:.2f} × the memory copy rate "
                f"±{100 * grp.U_CAST:.0f} %")
    _fallback_note(g, state, f"precision {src} → {target} change")
    width = ELEMENT_BYTES[target] / ELEMENT_BYTES[src]
    for cls, c in state.classes.items():
        w = c.work
        if cls in TENSOR_CLASSES:
            c.work, _ = _in_width(w, src, target)
        elif w.alt_bytes is not None and w.alt_precision is not None and \
                ELEMENT_BYTES.get(w.alt_precision) == ELEMENT_BYTES[target]:
            c.work = w.with_(bytes=w.alt_bytes, alt_bytes=w.bytes, alt_precision=src)
        elif width != 1:
            c.work = w.with_(bytes=w.bytes * width)
        _recalibrate(state, cls, target)
    state.precision = target
    state.changes.append("precision")
    state.basis.append(f"precision {src} → {target}: each unit group by its units timed alone "
                       "in both precisions (matmul-bound, normalizations, embeddings) or by "
                       "its traffic counted in both (the rest); the step replayed from its "
                       "timeline")


def host_ratio(record: OpProfile) -> tuple[float, float] | None:
    """The host's time per step in the other precision family ÷ in its own, as the
    recording timed it (`OpProfile.alt_host_rounds_ms`): the median of the rounds' ratios,
    each pair a moment apart, and its uncertainty (their half interquartile range ÷ the
    median, at least `U_HOST_RATIO`). None where it was not timed."""
    return paired_ratio(record.host_rounds_ms, record.alt_host_rounds_ms)


def held_ratio(record: OpProfile, src: str, target: str) -> tuple[float, float] | None:
    """The host's work of a step at the recorded batch in `target` ÷ in `src`, each issued
    with the device held (`OpProfile.host_held_ms`): the median of the rounds' ratios and
    its uncertainty, as `host_ratio`. None where either was not timed. Where it was, it
    replaces the step at batch 1: a tf32 LSTM's host work grew with the batch (15 ms to issue
    at batch 1, 21 at 128) more than its fp32 one (16 and 18), and a prediction from batch 1
    missed its host-bound step by a third."""
    return paired_ratio(record.host_held_ms.get(src, ()), record.host_held_ms.get(target, ()))


def source_host_ms(record: OpProfile) -> float | None:
    """The host's time per step of the recorded step: its issue with the device held at the
    recorded batch where timed, else its step at batch 1: the base `held_ratio` scales, where
    a step at batch 1 can take less. Held rounds each timed beside a round at batch 1
    (`OpProfile.host_held_paired`) give it as the step at batch 1 × the median of the rounds'
    ratios, the host's work at the batch over its work at batch 1 read at one pace; others,
    as the median of the held rounds."""
    held = record.host_held_ms.get(record.precision, ())
    if not held:
        return record.host_step_ms
    paired = paired_ratio(record.host_rounds_ms, held) if record.host_held_paired else None
    if paired is not None and record.host_step_ms:
        return record.host_step_ms * paired[0]
    return statistics.median(held)


def paired_ratio(here: tuple[float, ...], there: tuple[float, ...]
                  ) -> tuple[float, float] | None:
    """The median of the rounds' ratios there ÷ here, each pair a moment apart, and its
    uncertainty: their half interquartile range ÷ the median, at least `U_HOST_RATIO`."""
    pairs = [(a, b) for a, b in zip(here, there, strict=False) if a > 0 and b > 0]
    if len(pairs) < 2:
        return None
    ratios = [b / a for a, b in pairs]
    return statistics.median(ratios), max(U_HOST_RATIO, tlm.half_iqr(ratios))


def _autocast(precision: str) -> bool:
    """Whether a step of this precision runs under autocast (the 16-bit families)."""
    return ELEMENT_BYTES.get(precision, 4) < 4


def _same_work_at_both_batches(rec: OpProfile) -> bool:
    """Whether the work counted at the recorded batch and at `alt_batch` is the same: the
    model's make_batch(N) made the same data whatever N (a whole graph a step)."""
    if rec.alt_batch is None or rec.alt_batch == rec.batch:
        return False
    here = sum(g.flops + g.bytes for g in rec.groups)
    alt = [(g.alt_batch_flops, g.alt_batch_bytes) for g in rec.groups]
    if here <= 0 or any(None in pair for pair in alt):
        return False
    there = sum((f or 0.0) + (b or 0.0) for f, b in alt)
    return abs(there - here) <= SAME_WORK * here


def batch(g: Grouped, state: StepState, target: int) -> None:
    rec = g.record
    if _same_work_at_both_batches(rec):
        raise BadInputError(
            f"--batch-size {target}: {rec.workload} did the same work at batch {rec.batch} and "
            f"{rec.alt_batch} (its make_batch makes the same data whatever the batch): the "
            "batch does not size this model's step; change what make_batch makes and record "
            "it again")
    grp.batch_change(rec, g.changes, state.precision, target)
    _refresh(g, state, f"batch {state.batch} → {target}")
    _fallback_note(g, state, "batch change")
    scale = target / state.batch
    for cls, c in state.classes.items():
        c.work = c.work.with_(flops=c.work.flops * scale, bytes=c.work.bytes * scale,
                              alt_bytes=(c.work.alt_bytes or 0) * scale or None)
        _recalibrate(state, cls, state.precision)
    state.buckets = state.buckets  # the gradients do not follow the batch
    state.basis.append(f"batch {state.batch} → {target} per GPU: each unit group by its units "
                       f"timed at {', '.join(f'×{s:g}' for s in BATCH_SCALES)} the batch "
                       "(matmul-bound, normalizations, embeddings) or by its traffic counted "
                       "at two batch sizes (the rest); the step replayed from its timeline")
    state.batch = target
    state.changes.append("batch")


def size(g: Grouped, state: StepState, profile: StepProfile, target: str) -> None:
    """The user's model at another size (`predict.retarget`)."""
    from .retarget import OFF_BYTES_PER_SM_CYCLE, OFF_EXPONENT, retarget

    src, tgt, ops, off = retarget(profile, target, state.roofs, g.changes)
    _refresh(g, state, f"{src.name} → {target}")
    if off:
        state.notes.append(f"{', '.join(off)} ran far below its traffic's roofline, under "
                           f"{OFF_BYTES_PER_SM_CYCLE:g} bytes per SM cycle (as batch norm "
                           "does: one block per channel "
                           "leaves SMs idle), so its time under a size change is not its "
                           "traffic's: more calls or more values a channel take longer in "
                           "proportion, but more channels fill idle SMs first (taken as "
                           f"their count to a power of {OFF_EXPONENT:g}, the band reaching "
                           "the powers 0 and 0.5)")
    for cls, c in state.classes.items():
        _recalibrate(state, cls, state.precision)
        del c
    g.host_scale *= ops
    state.model = target
    state.matmul_params = None
    state.buckets = tuple(tgt.buckets)
    state.grad_bytes = sum(b for b, _ in tgt.buckets)
    state.idle_ms *= ops
    state.changes.append("model")
    where = " and ".join(sorted({_WHERE[c.counted_on] for c in (src, tgt)}))
    state.basis.append(f"{src.name} ({src.params / 1e6:,.1f} M parameters) → {target} "
                       f"({tgt.params / 1e6:,.1f} M): counted {where}, each "
                       f"unit group moved by its work there ÷ here; the host's launches × "
                       f"{ops:.3g} (operators per step)")


_WHERE = {"meta": "on the meta device",
          "cpu": "on the CPU with real tensors (its shapes follow its data)"}


def _recalibrate(state: StepState, cls: str, precision: str) -> None:
    """The class's achieved share at its new time, for the changes that follow."""
    c = state.classes[cls]
    if c.ms > 0:
        ideal = ideal_seconds(cls, c.work, state.roofs, precision) * 1e3
        c.achieved = ideal / c.ms if ideal > 0 else c.achieved


def class_changed(g: Grouped, state: StepState, before: dict[str, tuple[float, float]]) -> None:
    """Record a whole-class change (another GPU) made on the state since `before` (class →
    (ms, uncertainty))."""
    for cls, (ms, unc) in before.items():
        c = state.classes.get(cls)
        if c is None or ms <= 0:
            continue
        g.class_factor[cls] *= c.ms / ms
        g.class_unc[cls] = math.sqrt(max(0.0, c.unc**2 - unc**2) + g.class_unc[cls] ** 2)


@dataclass(frozen=True)
class Step:
    ms: float
    low_ms: float
    high_ms: float
    host_bound_share: float
    alpha: float
    alpha_measured: bool = True
    host_moved: float = 0.0  # the host's pace over its timed rounds (`tlm.rounds_moved`)
    host_short: float = 0.0  # `tlm.Replay.host_short`
    syncs_per_step: float = 0.0  # the host's waits for the device in each recorded step
    # the step with the missing time read as the host's (`tlm.Replay.host_alpha`), which the
    # band reaches; 0 where the recording tells them apart
    host_read_ms: float = 0.0
    host_read_outlying: bool = False  # `tlm.Replay.host_outlying`


def replay(g: Grouped, state: StepState, spread: float = 0.0) -> Step | None:
    """The step from the recorded timeline with every kernel's new time (module docstring);
    None without a timeline. `spread`: how far the source's timed steps moved (half their
    interquartile range ÷ their median), a floor on the host's uncertainty."""
    rec = g.record
    tl = rec.timeline
    if tl is None or not tl.dur_us:
        return None
    cls_of = {i: ch.group.op_class for i, ch in g.changes.items()}

    def durs(side: float) -> list[float]:
        out = []
        for d, gi in zip(tl.dur_us, tl.group, strict=True):
            ch = g.changes.get(gi)
            if ch is None:
                out.append(d)
                continue
            cls = cls_of[gi]
            u = math.hypot(ch.unc, g.class_unc[cls])
            out.append(ch.apply(d) * g.class_factor[cls] * (1 + side * u))
        return out

    held = rec.host_held_ms.get(rec.precision, ())
    moved = max(tlm.rounds_moved(rec.host_rounds_ms), tlm.rounds_moved(held))
    host_ms = source_host_ms(rec)
    rep = tlm.calibrate(tl, rec.step_ms * 1e3, host_ms * 1e3 if host_ms else None,
                        max(spread, moved), held=bool(held),
                        typical=max(spread, tlm.rounds_typical(rec.host_rounds_ms),
                                    tlm.rounds_typical(held)))
    lat = tlm.latency_us(tl)
    fix = rec.step_ms * 1e3 / rep.period_us if rep.period_us > 0 else 1.0
    alpha = rep.alpha * g.host_scale
    u = math.hypot(rep.alpha_unc, g.host_unc)
    gap = rep.gap_us
    mid, share = tlm.period(tl, durs(0.0), alpha, lat, gap)
    low, _ = tlm.period(tl, durs(-1.0), alpha * (1 - u), lat, gap)
    high, _ = tlm.period(tl, durs(1.0), alpha * (1 + u), lat, gap)
    host_read = 0.0
    if rep.host_alpha:
        base, _ = tlm.period(tl, tl.dur_us, rep.host_alpha, lat, rep.host_gap_us)
        other, _ = tlm.period(tl, durs(0.0), rep.host_alpha * g.host_scale, lat,
                              rep.host_gap_us)
        host_read = other * rec.step_ms * 1e3 / base
        low, high = min(low, host_read / fix), max(high, host_read / fix)
    return Step(mid * fix / 1e3, low * fix / 1e3, high * fix / 1e3, share, rep.alpha,
                rep.identified, moved, rep.host_short, len(tl.syncs) / max(1, tl.steps),
                host_read / 1e3, rep.host_outlying)
