"""Precision and batch changes of a step recorded with its unit groups (`model.OpProfile`
since schema 3): each group's kernels get a new time, from what the recording measured of
that group, and the timeline is replayed with them (`predict.timeline`).

- Matmul-bound groups, normalizations and embeddings with units timed alone: their time ×
  Σ count × time there ÷ Σ count × time here over the group's units timed in both (another
  precision: its dtypes, autocast and TF32; another batch: interpolated between the batch
  sizes timed, log-log, and extrapolated along the last two beyond them; a linear group
  that grows keeps its step's time past theirs; `predict.alone`). A group without its own
  timing takes its class's timed ratio; a class without any, the ratio of the
  measured matmul rates (precision) or of its counted FLOPs (batch), with a wide band.
- cuDNN's RNNs run their directions and layers on streams of their own: the step's kernels
  overlap, and the group's time is their union. Timed alone, a GRU's and an LSTM's call
  came out 9–18 % above that union in bf16 and 2–5 % above it in fp32 (one H200, two
  recordings each), so the ratio of two timings alone carried a bf16 step's RNN to fp32
  short by up to 10 %: from a 16-bit step an RNN group takes its units' time alone in the
  other precision for its union here (`RNN_CLASSES`); from fp32, whose timing alone is
  near its union, the ratio of the two.
- Memory-bound groups: their traffic there ÷ here (the step counted under the other
  precision family; at another batch size, the line through the two batch sizes counted),
  applied to each kernel past a fixed latency (`FLOOR_US`: a kernel of a few µs is its launch
  and its first wave, whatever it moves).
  Across precisions, the part of it strided operators moved follows that ratio to a power
  (`STRIDED_POWER`).
- Traffic the other precision family moves past what a width change explains (its casts to
  fp32 of what is fp32 here, no kernel here) at a cast's rate (`CAST_OF_COPY`), spread over
  the class's groups.
- Time no operator or an unknown operator took is carried unchanged, ±50 %.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuaudit.model.opprofile import (
    ACTIVATION,
    MEMORY_CLASSES,
    OPAQUE_CLASSES,
    TENSOR_CLASSES,
    OpProfile,
    TimedUnit,
    UnitGroup,
)

from .alone import all_busy, batch_ratio, grown_in_step, timed_ratio, unit_time
from .timeline import queued_gap_us

FLOOR_US = 2.5  # of every kernel's time, what does not follow its traffic
RNN_CLASSES = ("rnn",)  # groups whose kernels overlap on streams of their own (above)
U_RNN_ALONE = 0.05  # an RNN's time alone against its union in the step, in fp32: 2–5 %
U_TIMED = 0.06  # a ratio of units timed alone, carried into the step
U_CLASS_TIMED = 0.12  # a group moved by the timed ratio of its class's other units
U_UNTIMED = 0.5  # a matmul-bound group moved by its counted FLOPs alone (batch changes)
# A matmul-bound group without a trusted timing, moved to another precision by its share of
# the roofline there (`efficiency_ratio`): the lower a precision's matmul rate, the larger the
# share of it the same shapes reach. ln share there = ln share here × (rate there ÷ rate
# here)^δ, δ per class fitted to the development families' bf16 and fp32 recordings (the
# time-weighted least squares over their groups; on the H200 of 2026-12-02: linear 0.51,
# convolutions 0.55, cuDNN's RNNs 0.08 (their recurrent steps are latency-bound at every
# precision), attention 0.08 (fp32 runs another algorithm than flash)); the held-out
# families' own fits came out 0.60, 0.46, 0.16 and 0.13.
DELTA = {"gemm": 0.51, "conv": 0.55, "rnn": 0.08, "attention": 0.08}
# Its band: towards a higher rate (fp32 → tf32 or bf16) the share there is a power > 1 of the
# share here and amplifies its error; towards a lower one it shrinks it.
U_EFFICIENCY = {True: 0.35, False: 0.15}  # (to a higher rate?)
U_BYTES = 0.05  # traffic counted under the target
U_BYTES_BATCH = 0.08  # traffic from the line through two batch sizes
U_OPAQUE = 0.5
# Traffic the other precision family's step moves past what a width change explains: casts.
# A cast to fp32 of what is fp32 already (`x.float()`, `.to(torch.float32)`, `type_as`) is no
# kernel, or no operator, in an fp32 step and a kernel under autocast, and a cast of what
# needs a gradient has that gradient cast back, as many bytes the other way. Timed alone on an
# H100 at 1 GiB: fp32 → bf16 at 1.00 × the memory copy rate, bf16 → fp32 at 0.65 (either way
# 6 bytes an element); half the traffic each way runs at 0.79 ×, the band reaching one way
# only. The 16-bit steps' cast groups of the zoo ran at 0.75–0.79 × on the same GPU.
CAST_DOWN_OF_COPY, CAST_UP_OF_COPY = 1.0, 0.65
CAST_OF_COPY = 2 / (1 / CAST_DOWN_OF_COPY + 1 / CAST_UP_OF_COPY)
U_CAST = 0.25
# Traffic moved by operators with an operand out of one dense layout (`UnitGroup.
# strided_bytes`: a slice, a broadcast, a repeat, a transpose made contiguous) is loaded
# element by element, and its time follows its bytes only in part: timed alone on an H100
# (validation/predict/strided_kernels.py), such operators took 0.61–1.05 of their fp32 time
# in bf16, median 0.78, where dense ones took 0.43–0.57. Their traffic's ratio is taken to
# the power ln 0.78 ÷ ln 0.5, ±30 % (17 of the 18 timings).
STRIDED_POWER = 0.354
U_STRIDED = 0.3
WIDEST = 2.0  # the largest ratio of two precision families' element widths (fp32 : 16-bit)
U_EXTRAPOLATED = 0.05  # per doubling of the batch past the sizes timed
# A normalization without a timing alone, across the fp32 ↔ 16-bit families: its kernels
# compute in fp32 whatever they read and are bound by their rows' or channels' latency more
# than by their bytes (batch norm: one block per channel), and the implementation changes
# (cuDNN's batch norm in fp32, PyTorch's own in bf16). The development families' norm groups,
# fp32 ÷ bf16 in their steps: 0.69–0.99, geometric mean 0.83; the band covers their spread.
NORM_FP32_OVER_16 = 0.83
U_NORM = 0.2


@dataclass
class GroupChange:
    """How a group's kernels change: each kernel's time t → min(t, floor) + (t − floor)⁺ ×
    ratio; its uncertainty; why."""

    group: UnitGroup
    ratio: float = 1.0
    floor_us: float = 0.0
    unc: float = 0.0
    basis: list[str] = field(default_factory=list)
    fallback: bool = False  # moved by its roofline or FLOPs: no trusted timing

    def apply(self, us: float) -> float:
        fixed = min(us, self.floor_us)
        return fixed + (us - fixed) * self.ratio

    def then(self, ratio: float, floor_us: float, unc: float, why: str) -> None:
        """Compose another change after this one."""
        if floor_us and not self.floor_us:
            self.floor_us = floor_us
        self.ratio *= ratio
        self.unc = math.sqrt(self.unc**2 + unc**2)
        self.basis.append(why)

    def moved_us(self) -> float:
        """Its time per step past its kernels' fixed latency, after the change."""
        g = self.group
        return max(0.0, g.kernel_us - g.kernels * self.floor_us) * self.ratio

    def carry(self, share: float, unc: float) -> None:
        """Take on work that ran beside it only in the other step: its moved time × (1 +
        `share`), the added part ±`unc`. Said in its class's basis, not its own."""
        self.ratio *= 1 + share
        self.unc = math.hypot(self.unc, unc * share / (1 + share))


def union_ms(p: OpProfile, index: int) -> float | None:
    """The time a step the group's kernels covered (their shares of it, `shared_us`: their
    intervals' union), from the recorded timeline; None without one."""
    from gpuaudit.workloads.kernelview import shared_us

    tl = p.timeline
    if tl is None or not tl.steps:
        return None
    covered = sum(s for s, g in zip(shared_us(tl.start_us, tl.dur_us, tl.group), tl.group,
                                    strict=True) if g == index)
    return covered / tl.steps / 1e3 if covered > 0 else None


def _units(p: OpProfile, g: UnitGroup) -> list[TimedUnit]:
    return [u for u in p.timed if u.op_class == g.op_class and u.unit == g.unit]


def _width(precision: str) -> str:
    return ACTIVATION.get(precision, "float32")


def roofline_ratio(g: UnitGroup, rates: tuple[float, float], memory_gbps: float,
                   alt_bytes: float | None) -> float:
    """A group's time there ÷ here on its roofline: max(FLOPs at the matmul rate, traffic at
    the memory rate) in each precision (`rates`: TFLOP/s here, there; `alt_bytes`: its traffic
    there)."""
    def ideal(rate: float, moved: float) -> float:
        return max(g.flops / (rate * 1e12), moved / (memory_gbps * 1e9))

    here = ideal(rates[0], g.bytes)
    there = ideal(rates[1], alt_bytes if alt_bytes is not None else g.bytes)
    return there / here if here > 0 else 1.0


def efficiency_ratio(g: UnitGroup, rates: tuple[float, float], memory_gbps: float,
                     alt_bytes: float | None) -> float:
    """A group's time there ÷ here from its share of the roofline here (module docstring,
    `DELTA`): its roofline there ÷ its share there, over its time here. Without a time here
    (or at its roofline), the roofline ratio."""
    def ideal(rate: float, moved: float) -> float:
        return max(g.flops / (rate * 1e12), moved / (memory_gbps * 1e9))

    here = ideal(rates[0], g.bytes)
    there = ideal(rates[1], alt_bytes if alt_bytes is not None else g.bytes)
    took = g.kernel_us * 1e-6
    if here <= 0 or took <= 0:
        return there / here if here > 0 else 1.0
    share = min(0.999, here / took)
    share_there = math.exp(math.log(share) * (rates[1] / rates[0]) ** DELTA.get(g.op_class,
                                                                                 0.5))
    ratio = there / share_there / took
    # The same shapes at a higher matmul rate never take longer, at a lower one never less
    # time (a group far below its roofline, ResNet's classifier at 7 % of fp32's, would
    # otherwise take the power of its share to nothing: 0.04 ms → 15 ms in bf16).
    return min(ratio, 1.0) if rates[1] > rates[0] else max(ratio, 1.0)


def precision_change(p: OpProfile, changes: dict[int, GroupChange], src: str, target: str,
                     rates: tuple[float, float], memory_gbps: float) -> dict[str, Casts]:
    """Every group moved from `src` to `target` (module docstring); `rates`: the measured
    matmul rates here and there (the untimed matmul-bound groups' roofline). Returns, per
    class, the casts it does only there, carried by its groups."""
    by_class: dict[str, list[TimedUnit]] = {}
    for u in p.timed:
        by_class.setdefault(u.op_class, []).append(u)
    same_width = _width(src) == _width(target)
    alt_matches = p.alt_precision is not None and _width(p.alt_precision) == _width(target)
    class_us: dict[str, float] = {}
    for g in p.groups:
        class_us[g.op_class] = class_us.get(g.op_class, 0.0) + g.kernel_us
    # Casts to fp32 of what is fp32 already appear only in a 16-bit target: its traffic there
    # that no width change explains, per class
    to_16 = alt_matches and _width(target) != "float32"
    casts: dict[str, float] = {}
    for i, g in enumerate(p.groups):
        c = changes[i]
        own = timed_ratio(_units(p, g), src, target, g.kernel_us)
        pooled = timed_ratio(by_class.get(g.op_class, []), src, target, class_us[g.op_class])
        compute = g.op_class in TENSOR_CLASSES and g.flops > 0
        timed_kind = compute or g.op_class == "norm"
        if g.op_class in OPAQUE_CLASSES:
            c.then(1.0, 0.0, U_OPAQUE, f"{src} → {target}: not understood, carried ±50 %")
        elif timed_kind and own is not None and g.op_class in RNN_CLASSES and \
                _width(src) != "float32" and own[1] >= 0.999 and (covered := union_ms(p, i)):
            units = _units(p, g)
            busy = all_busy(units)
            there = sum(u.count * (unit_time(u, target, busy=busy) or 0.0) for u in units)
            if not busy:  # back to back, it holds the gaps the replay puts between them
                there = max(there - g.kernels * queued_gap_us(p.timeline) / 1e3, covered)
            c.then(there / covered, 0.0, math.hypot(U_TIMED, U_RNN_ALONE),
                   f"{src} → {target}: its units timed alone there ({there:.3g} ms a step) "
                   f"for the union of its kernels here ({covered:.3g} ms: its streams "
                   f"overlap), ×{there / covered:.3g}")
        elif timed_kind and own is not None:
            alone, held = own
            ratio = grown_in_step(_units(p, g), src, target, g, alone) \
                if g.op_class == "gemm" else alone
            kept = f", the step's time past theirs kept: ×{ratio:.3g}" if ratio != alone else ""
            c.then(ratio, 0.0, math.hypot(U_TIMED, (1 - held) * 2 * U_CLASS_TIMED),
                   f"{src} → {target}: its units timed alone ×{alone:.3g} ({held:.0%} of "
                   f"its FLOPs){kept}")
        elif timed_kind and pooled is not None:
            c.then(pooled[0], 0.0, U_CLASS_TIMED,
                   f"{src} → {target}: its class's units timed alone ×{pooled[0]:.3g}")
        elif compute:
            moved = g.alt_bytes if alt_matches else (g.bytes if same_width else None)
            ratio = efficiency_ratio(g, rates, memory_gbps, moved)
            c.fallback = True
            c.then(ratio, 0.0, U_EFFICIENCY[rates[1] > rates[0]],
                   f"{src} → {target}: not timed (or its timing alone slower than its "
                   f"step); its share of the roofline carried to the other rate ×{ratio:.3g}")
        elif same_width:
            c.then(1.0, 0.0, 0.02, f"{src} → {target}: the same traffic")
        elif g.op_class == "norm":
            ratio = NORM_FP32_OVER_16 if _width(target) == "float32" else 1 / NORM_FP32_OVER_16
            c.then(ratio, 0.0, U_NORM, f"{src} → {target}: not timed; a normalization's "
                   f"time follows its elements, not its bytes: ×{ratio:.3g} (the development "
                   "families' norms)")
        elif to_16 and g.alt_bytes is not None and g.alt_bytes > WIDEST * g.bytes:
            casts[g.op_class] = casts.get(g.op_class, 0.0) + g.alt_bytes - g.bytes
            c.then(1.0, 0.0, 0.02, f"{src} → {target}: {g.alt_bytes / 1e9:.3g} GB there "
                   f"against {g.bytes / 1e9:.3g} here, more than a width change moves: kept, "
                   "the rest carried as casts")
        elif alt_matches and g.alt_bytes is not None and g.bytes > 0:
            ratio, unc, why = _traffic_ratio(g)
            c.then(ratio, FLOOR_US, unc, f"{src} → {target}: traffic counted under "
                   f"{p.alt_precision} ×{ratio:.3g}{why} past {FLOOR_US:g} µs a kernel")
        elif g.bytes > 0 and g.op_class in MEMORY_CLASSES:
            ratio = 0.6 if _width(target) != "float32" else 1.6
            c.then(ratio, FLOOR_US, 0.25, f"{src} → {target}: traffic not counted there: "
                   f"×{ratio:g} assumed")
        else:
            c.then(1.0, 0.0, 0.05, f"{src} → {target}: moves nothing counted: kept")
    if not to_16:
        return {}
    for rec in p.classes:  # units called only there: no group here holds their traffic
        if rec.op_class in MEMORY_CLASSES and rec.alt_bytes is not None:
            held = sum(g.alt_bytes or 0.0 for g in p.groups if g.op_class == rec.op_class)
            if rec.alt_bytes > held:
                casts[rec.op_class] = casts.get(rec.op_class, 0.0) + rec.alt_bytes - held
    return {cls: _carry_casts(changes, cls, b, memory_gbps) for cls, b in casts.items()
            if b > 0}


def _traffic_ratio(g: UnitGroup) -> tuple[float, float, str]:
    """A memory-bound group's time there ÷ here from its traffic counted in both: the share
    of its traffic its strided operators moved (`UnitGroup.strided_bytes`) follows that
    ratio to the power `STRIDED_POWER`, the rest the ratio itself. Its uncertainty, and
    what it says."""
    ratio = (g.alt_bytes or 0.0) / g.bytes
    if not g.strided_bytes:
        return ratio, U_BYTES, ""
    share = min(1.0, g.strided_bytes / g.bytes)
    own = ratio ** STRIDED_POWER
    return ((1 - share) * ratio + share * own, math.hypot(U_BYTES, share * U_STRIDED),
            f" ({share:.0%} of it strided: ×{own:.3g})")


@dataclass(frozen=True)
class Casts:
    """Traffic a class moves in the other precision family's step past what a width change
    explains (`CAST_OF_COPY`), and its time there."""

    bytes: float
    ms: float


def _carry_casts(changes: dict[int, GroupChange], cls: str, moved_bytes: float,
                 memory_gbps: float) -> Casts:
    """The class's casts at a cast's rate, spread over its groups' moved time: their kernels
    run in the same stream, so a device-bound step takes them whole and a host-bound one
    hides them where its kernels wait on the host (a class with no kernel here: the step's
    groups)."""
    ms = moved_bytes / (memory_gbps * 1e9 * CAST_OF_COPY) * 1e3
    mine = [c for c in changes.values() if c.group.op_class == cls and c.moved_us() > 0] or \
        [c for c in changes.values() if c.moved_us() > 0]
    total = sum(c.moved_us() for c in mine)
    for c in mine:
        c.carry(ms * 1e3 / total, U_CAST)
    return Casts(moved_bytes, ms if mine else 0.0)


def _line(here: float, there: float | None, batch: int, alt_batch: int, target: int
          ) -> float | None:
    """A quantity at `target` from the line through it at `batch` and `alt_batch`."""
    if there is None or batch == alt_batch:
        return None
    return max(0.0, here + (here - there) * (target - batch) / (batch - alt_batch))


def batch_change(p: OpProfile, changes: dict[int, GroupChange], precision: str,
                 target: int) -> None:
    """Every group moved from the recorded batch to `target` (module docstring)."""
    scale = target / p.batch
    alt = p.alt_batch
    by_class: dict[str, list[TimedUnit]] = {}
    for u in p.timed:
        by_class.setdefault(u.op_class, []).append(u)
    class_us: dict[str, float] = {}
    for g in p.groups:
        class_us[g.op_class] = class_us.get(g.op_class, 0.0) + g.kernel_us
    for i, g in enumerate(p.groups):
        c = changes[i]
        own = batch_ratio(_units(p, g), precision, scale, g.kernel_us)
        pooled = batch_ratio(by_class.get(g.op_class, []), precision, scale,
                             class_us[g.op_class])
        how = f"batch {p.batch} → {target}"
        flops = _line(g.flops, g.alt_batch_flops, p.batch, alt or p.batch, target)
        moved = _line(g.bytes, g.alt_batch_bytes, p.batch, alt or p.batch, target)
        if g.op_class in OPAQUE_CLASSES:
            c.then(scale, 0.0, U_OPAQUE, f"{how}: not understood, ×{scale:.3g} ±50 %")
        elif own is not None and own[1] >= 0.5:
            ratio, held, past = own
            u = math.hypot(U_TIMED, (1 - held) * U_CLASS_TIMED, past * U_EXTRAPOLATED)
            c.then(ratio, 0.0, u, f"{how}: its units timed alone ×{ratio:.3g}"
                   + (f" ({past:.1f} doublings past the sizes timed)" if past else ""))
        elif g.op_class in TENSOR_CLASSES and g.flops > 0 and pooled is not None:
            ratio, _, past = pooled
            c.then(ratio, 0.0, math.hypot(U_CLASS_TIMED, past * U_EXTRAPOLATED),
                   f"{how}: its class's units timed alone ×{ratio:.3g}")
        elif g.op_class in TENSOR_CLASSES and flops is not None and g.flops > 0:
            ratio = flops / g.flops
            c.fallback = True
            c.then(ratio, FLOOR_US, U_UNTIMED, f"{how}: not timed; its counted FLOPs "
                   f"×{ratio:.3g}")
        elif moved is not None and g.bytes > 0:
            ratio = moved / g.bytes
            c.then(ratio, FLOOR_US, U_BYTES_BATCH, f"{how}: its traffic ×{ratio:.3g} (counted "
                   f"at {p.batch} and {alt}) past {FLOOR_US:g} µs a kernel")
        elif g.bytes > 0 or g.flops > 0:
            c.then(scale, FLOOR_US, U_UNTIMED, f"{how}: ×{scale:.3g} assumed (counted at one "
                   "batch only)")
        else:
            c.then(1.0, 0.0, 0.05, f"{how}: moves nothing counted: kept")
