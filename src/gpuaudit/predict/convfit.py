"""A convolution group's time under a size change, from its own units timed alone.

cuDNN's convolutions at the channel counts of most CNNs run far below their FLOP roofline,
and their time does not follow their FLOPs when the width changes: in one H200's steps the
zoo's convolutions moved × 1.81 (a diffusion U-Net, FLOPs × 2.25), × 1.94 (a U-Net, FLOPs
× 4), × 1.35 (ConvNeXt, × 1.94) and × 0.55 (ResNet-18 at half its width, × 0.25). Swept alone
(3×3, N·H·W fixed), their forward + backward took a + b·C + c·C² in the channels C, the C²
term at the GPU's matmul rate and the C term, the activations', far from their traffic's.

So each convolution call of the recording is taken as a latency, a time per activation
element (each call's input and output) and a time per FLOP, the three fitted (least squares,
none negative) to the group's units timed alone in the recorded precision, at every batch
timed; the group then moves by each term's share of its time here times that term's ratio
there ÷ here (its calls, its traffic, its FLOPs: `predict.retarget`). The FLOP term can also
be held at the GPU's matmul rate, the other two fitted around it: the rate wider calls reach
(`predict.retarget` takes a wider model between the two).

A recording that timed its convolutions at twice their channels too (`workloads.widen`)
measured how their time follows their width, which these terms, fitted across both widths,
do not follow (`width_ratio`): the group moves by that width response instead.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

from gpuaudit.model.opprofile import TimedUnit
from gpuaudit.workloads.widen import WIDTH_SCALE, widening

from .alone import all_busy, batch_ratio, scaled_time, trusted, unit_time

MIN_POINTS = 6  # timings (units × batches) to fit three terms to
_TENSOR = re.compile(r"(\w+)\[([\d,]*)\]")
_STRIDES = (1, 2, 4, 0.5)
# an unpadded ("valid") convolution's outputs short of its stride's, at most: above a third,
# 3 passes could read as 2 (or one stride as another)
VALID_SHORTER = 0.15


@dataclass(frozen=True)
class ConvCost:
    """One call's time: `latency_ms` + `ms_per_gelement` × activation elements / 1e9 +
    `ms_per_tflop` × FLOPs / 1e12."""

    latency_ms: float
    ms_per_gelement: float
    ms_per_tflop: float
    points: int

    def parts(self, calls: float, elements: float, flops: float) -> tuple[float, float, float]:
        return (self.latency_ms * calls, self.ms_per_gelement * elements / 1e9,
                self.ms_per_tflop * flops / 1e12)


def shapes(signature: str) -> list[tuple[int, ...]]:
    """The tensors' shapes of a unit's signature ("bf16[64,128,32,32] · fp32[128] · …")."""
    return [tuple(int(x) for x in dims.split(",") if x) for _, dims in _TENSOR.findall(signature)]


def activations(unit: TimedUnit) -> float | None:
    """Elements of a convolution's input and output (`elements`) together."""
    found = elements(unit)
    return None if found is None else found[0] + found[1]


def elements(unit: TimedUnit) -> tuple[float, float] | None:
    """Elements of a convolution's input and of its output (1-, 2- or 3-D), from its signature
    (input, weight shapes) and its counted forward + backward FLOPs, which give the output's
    size (2 or 3 passes of 2·N·outputs·Cout·Cin/groups·kernel); None where they do not fit
    one stride. An input padded beforehand (`F.pad` before a causal or reflection-padded
    convolution, the convolution itself unpadded) has up to `VALID_SHORTER` fewer outputs
    than its stride says: WaveNet's dilation of 512 over 8,192 samples, 6 %."""
    found = shapes(unit.signature)[:2]
    if len(found) < 2 or len(found[0]) != len(found[1]) or len(found[0]) not in (3, 4, 5) \
            or unit.flops <= 0:
        return None
    (n, c_in, *space), (c_out, c_group, *kernel) = found
    per_output = 2 * n * c_out * c_group * math.prod(kernel)
    for passes in (3, 2):
        outputs = unit.flops / (passes * per_output)
        for s in _STRIDES:
            expect = math.prod(space) / s ** len(space)
            if (1 - VALID_SHORTER) * expect - 1 <= outputs <= 1.02 * expect + 1:
                return float(n * c_in * math.prod(space)), float(n * c_out * outputs)
    return None


def fit(units: list[TimedUnit], precision: str,
        ms_per_tflop: float | None = None) -> ConvCost | None:
    """The three terms fitted to `units`' timings in `precision` (module docstring), each
    timing's error relative to its time (every shape timed is equal evidence of how the
    time follows the width; how much of the step it is, its calls, weighs the terms' parts
    in `parts_here`); with `ms_per_tflop`, the FLOP term held at it and the other two
    fitted. None with fewer than `MIN_POINTS` timings or none of the terms found.
    Weighted by calls, the shapes that make most of a step set the terms: WaveNet's 64-channel
    layers, 90 calls of dilated and 1×1 convolutions of one width, fitted a FLOP term that
    took its 256-channel head (2 calls) at twice its time, and at twice the width its
    convolutions came out × 2.43 where its step measured × 1.91 (× 2.01 so)."""
    import numpy as np

    rows, times, weights = [], [], []
    for u in units:
        found = elements(u)
        if found is None:
            continue
        for t in u.times:
            if t.precision == precision and t.width_scale == 1.0 and t.ms > 0:
                s = t.batch_scale
                rows.append((1.0, sum(found) * s / 1e9, u.flops * s / 1e12))
                times.append(t.ms)
                weights.append(1 / t.ms)
    if len(rows) < MIN_POINTS:
        return None
    x = np.array(rows) * np.array(weights)[:, None]
    y = np.array(times) * np.array(weights)
    free = range(3)
    if ms_per_tflop is not None:
        y = y - ms_per_tflop * x[:, 2]
        free = range(2)
    best: tuple[float, np.ndarray] | None = None
    # least squares with no term negative: the best of the fits on each subset of terms
    for k in range(1, len(free) + 1):
        for cols in itertools.combinations(free, k):
            sol = np.linalg.lstsq(x[:, cols], y, rcond=None)[0]
            if (sol < 0).any():
                continue
            full = np.zeros(3)
            full[list(cols)] = sol
            res = float(np.linalg.norm(x @ full - y))
            if best is None or res < best[0]:
                best = (res, full)
    if ms_per_tflop is not None:  # neither term positive: the held FLOP term is the time
        a, b = (float(v) for v in best[1][:2]) if best is not None else (0.0, 0.0)
        return ConvCost(a, b, ms_per_tflop, len(rows))
    if best is None or not best[1].any():
        return None
    a, b, c = (float(v) for v in best[1])
    return ConvCost(a, b, c, len(rows))


@dataclass(frozen=True)
class WidthMove:
    """A convolution group's time there ÷ here from its units timed at two widths
    (`width_ratio`)."""

    ratio: float
    width: float  # its calls' width there ÷ here (FLOPs ÷ activations a call)
    spatial: float  # their activations a channel there ÷ here (a larger image, a batch)
    timed_width: float  # the width its units were timed at, as `width` counts it
    held: float  # the share of its units' FLOPs timed at both widths
    past: float  # doublings of width past the widths timed


def width_ratio(units: list[TimedUnit], precision: str, calls: float, activations: float,
                flops: float, in_step_us: float | None = None) -> WidthMove | None:
    """A convolution group's time there ÷ here, its units timed at their own width and at a
    wider one (`workloads.widen`): `calls`, `activations` and `flops` are its counted ratios
    there ÷ here. A call's FLOPs grow with its width × its activations, its activations with
    its width × the values a channel (its image, its batch): there, each call's width is
    ×(FLOPs ÷ activations a call) and its values a channel ×(activations² ÷ FLOPs a call).
    Its time a call follows the width as its units did between the two widths timed
    (log-log through them, along their line past them), narrower no less than its
    activations (ResNet-18 at half its width on one H100: its units' line said × 0.31 for
    its convolutions, its activations × 0.5, its steps × 0.55), the values a channel as its
    units did between the batches timed (`alone.batch_ratio`), and the calls in proportion.
    Fitted latency, activation and FLOP terms (`fit`) over both widths said × 2.88 for one
    H100's VAE at twice its width, its step's convolutions × 2.26 and its units' own times
    at twice their width × 2.19: their time does not follow their FLOPs at a fixed rate.
    None where no unit was timed wider, or their timing is not trusted (`alone`)."""
    busy = all_busy(units)
    here = [0.0, 0.0, 0.0]  # time, activations, FLOPs of the units timed at both widths
    wide = [0.0, 0.0, 0.0]
    for u in units:
        found = elements(u)
        t1 = unit_time(u, precision, busy=busy)
        tw = unit_time(u, precision, busy=busy, width=WIDTH_SCALE)
        if found is None or not t1 or not tw:
            continue
        tensors = shapes(u.signature)
        how = widening(tensors[0], tensors[1], WIDTH_SCALE)
        if how is None:
            continue
        for acc, t, moved, f in ((here, t1, sum(found), u.flops),
                                 (wide, tw, found[0] * how.inputs + found[1] * how.outputs,
                                  u.flops * how.flops)):
            acc[0] += u.count * t
            acc[1] += u.count * moved
            acc[2] += u.count * f
    if here[0] <= 0 or calls <= 0 or activations <= 0 or flops <= 0:
        return None
    held = min(1.0, here[2] / (sum(u.count * u.flops for u in units) or here[2]))
    if not trusted(here[0], held, in_step_us):
        return None

    def split(moved: float, f: float) -> tuple[float, float]:  # (width, values a channel)
        return f / moved, moved * moved / f

    timed_width, timed_spatial = split(wide[1] / here[1], wide[2] / here[2])
    width, spatial = split(activations / calls, flops / calls)
    if timed_width <= 1.05:
        return None

    def along_batch(s: float) -> float:
        moved = batch_ratio(units, precision, s)
        return moved[0] if moved is not None else s

    # the units' time at the wider width with its values a channel as here
    wider = wide[0] / here[0] / along_batch(timed_spatial)
    per_call = scaled_time([(1.0, 1.0), (timed_width, wider)], width)
    if per_call is None:
        return None
    # narrower, no less than its activations a call: a narrow call's time follows its traffic
    ratio = calls * max(per_call[0], min(width, 1.0)) * along_batch(spatial)
    past = max(0.0, math.log2(width / timed_width), math.log2(1 / width))
    return WidthMove(ratio, width, spatial, timed_width, held, past)


def parts_here(cost: ConvCost, units: list[TimedUnit]) -> tuple[float, float, float]:
    """Each term's share of the units' fitted time per step in the recorded precision."""
    here = [0.0, 0.0, 0.0]
    for u in units:
        elements = activations(u)
        if elements is not None:
            for i, part in enumerate(cost.parts(u.count, elements * u.count,
                                                u.flops * u.count)):
                here[i] += part
    total = sum(here) or 1.0
    return here[0] / total, here[1] / total, here[2] / total

