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
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

from gpuaudit.model.opprofile import TimedUnit

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
    """Elements of a convolution's input and output (1-, 2- or 3-D), from its signature
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
                return float(n * c_in * math.prod(space) + n * c_out * outputs)
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
        elements = activations(u)
        if elements is None:
            continue
        for t in u.times:
            if t.precision == precision and t.ms > 0:
                s = t.batch_scale
                rows.append((1.0, elements * s / 1e9, u.flops * s / 1e12))
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

