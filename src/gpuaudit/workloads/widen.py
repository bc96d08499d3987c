"""A convolution call at `WIDTH_SCALE` × its channels, as a wider model of the same layers
would make it: how a recording times its convolutions at a width its step did not run.

cuDNN's convolutions at a CNN's usual channel counts run far below the GPU's matmul rate, and
a wider call reaches more of it: on one H100 a VAE's convolutions at twice its width took
× 2.26 the time in its step where a fit of its units timed at its own width alone said × 2.73
(their FLOPs × 4). Timed alone at the wider width too, they said × 2.19. So a recording
times each convolution unit once more at `WIDTH_SCALE` × its channels (`workloads.units`),
and `predict.convfit` moves a size change by how their time followed the width.

A channel count of `DATA_CHANNELS` or fewer is the data's (an image's colours, a latent's
channels, a mono waveform), which a wider model keeps; every other one is widened. Grouped
convolutions keep their channels per group (a depthwise one stays depthwise, its groups
widened with its channels).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from gpuaudit.workloads.calls import Call, TensorSpec, dense_strides

WIDTH_SCALE = 2.0
DATA_CHANNELS = 4
CONVOLUTIONS = ("conv1d", "conv2d", "conv3d")
# positional index of `groups` in `F.convNd(input, weight, bias, stride, padding, dilation,
# groups)`
_GROUPS_AT = 6


@dataclass(frozen=True)
class Widening:
    """How a convolution's channels and work grow at a wider width (× each)."""

    inputs: float  # its input's channels (and elements)
    outputs: float  # its output's
    groups: float
    flops: float


def widening(input_shape: tuple[int, ...], weight_shape: tuple[int, ...], scale: float
             ) -> Widening | None:
    """How the convolution of an input and a weight of these shapes (`[N, Cin, …]`,
    `[Cout, Cin / groups, …]`) widens at `scale` × its channels (module docstring); None
    where its channels cannot all be widened alike (a grouped convolution whose input is
    the data's and whose output is not)."""
    if len(input_shape) < 3 or len(weight_shape) != len(input_shape) or weight_shape[1] <= 0:
        return None
    c_in, c_out, per_group = input_shape[1], weight_shape[0], weight_shape[1]
    if c_in % per_group:
        return None
    groups = c_in // per_group
    inputs = scale if c_in > DATA_CHANNELS else 1.0
    outputs = scale if c_out > DATA_CHANNELS else 1.0
    if groups == 1:
        return Widening(inputs, outputs, 1.0, inputs * outputs)
    if inputs != outputs:
        return None
    # channels per group kept: its groups grow, each group's work does not
    return Widening(inputs, outputs, inputs, outputs)


def _widened(spec: TensorSpec, dims: dict[int, float]) -> TensorSpec:
    shape = tuple(round(n * dims.get(d, 1.0)) for d, n in enumerate(spec.shape))
    return dataclasses.replace(spec, shape=shape, stride=dense_strides(shape, spec.stride))


def widened(call: Call, scale: float = WIDTH_SCALE) -> Call | None:
    """`call` at `scale` × its channels (module docstring), its tensors' memory formats
    kept; None where it is not a convolution this knows how to widen (a transposed one, its
    arguments not as `F.convNd` takes them, its channels all the data's)."""
    if call.name not in CONVOLUTIONS or len(call.args) < 2:
        return None
    x, w = call.args[0], call.args[1]
    if not isinstance(x, TensorSpec) or not isinstance(w, TensorSpec):
        return None
    how = widening(x.shape, w.shape, scale)
    if how is None or (how.inputs == 1.0 and how.outputs == 1.0):
        return None
    args: list[Any] = list(call.args)
    kwargs = dict(call.kwargs)
    args[0] = _widened(x, {1: how.inputs})
    args[1] = _widened(w, {0: how.outputs, 1: how.inputs / how.groups})
    bias = args[2] if len(args) > 2 else kwargs.get("bias")
    if isinstance(bias, TensorSpec):
        if len(args) > 2:
            args[2] = _widened(bias, {0: how.outputs})
        else:
            kwargs["bias"] = _widened(bias, {0: how.outputs})
    if how.groups != 1.0:
        if len(args) > _GROUPS_AT:
            args[_GROUPS_AT] = round(args[_GROUPS_AT] * how.groups)
        elif "groups" in kwargs:
            kwargs["groups"] = round(kwargs["groups"] * how.groups)
        else:
            return None
    return dataclasses.replace(call, args=tuple(args), kwargs=kwargs,
                               flops=round(call.flops * how.flops))
