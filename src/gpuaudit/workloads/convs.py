"""Convolutions in the op profile: the step's convolution layers, and those layers timed alone
in both precision families.

A precision change swaps cuDNN's kernel family for convolutions: fp32 runs its FFMA kernels
on CUDA cores, in NCHW; 16-bit (and TF32) runs tensor-core kernels that take NHWC, with a
transform of every NCHW tensor before and after. The two families reach different shares of
their roofline (on an H200, resnet50's fp32 convolutions 70 % and its bf16 ones 60 %, their
transforms excluded), so a step recorded in one family does not say how fast the other runs:
carried over as a roofline share, the convolutions came out 15-17 % off. So the recorder keeps,
under the conv class's detail (`timed_convs`):

- the layers as the eager step ran them: input and weight shapes, stride, padding, dilation,
  groups, bias, whether the input needed its gradient, memory format and dtypes, with their
  count and forward FLOPs per step;
- its `CONV_SHAPES` biggest layers (by FLOPs) timed alone, forward + backward (the gradients
  the step takes) under each precision family's autocast, at that memory format and with the
  dtypes each family's own step fed them, TF32 as that family's step has it (off for fp32):
  four calls queued behind a spin kernel between CUDA events, so that they run back to back
  as in the step and not at Python's launch pace (`timing.held_call_ms`; timed one call at a
  time, with the host in, resnet50's bf16 layers read 1.2-1.3x their time in the step on an
  H200 and its fp32 ones 1.07x), the median of as many samples as `CONV_BUDGET_MS` allows.
  The transforms cuDNN runs around a layer are in its time, as they are not in the conv
  class's: `predict` moves the conv and layout classes together.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from gpuaudit.workloads.norms import ACTIVATION, memory_format
from gpuaudit.workloads.timing import biggest_first, held_call_ms, is_cuda

CONV_SHAPES = 24  # resnet50 has 23 distinct layers at a given batch: all of them
CONV_BUDGET_MS = {True: 6000.0, False: 400.0}  # all layers in both precisions; GPU, CPU
TIMED_FIELDS = ["input", "weight", "stride", "padding", "dilation", "groups", "bias",
                "input_grad", "memory_format", "precision", "dtype", "weight_dtype", "count",
                "ms"]

# (input shape, weight shape, stride, padding, dilation, groups, bias, input needs its
# gradient, memory format) — the layer, whatever the dtypes
Layer = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...],
              tuple[int, ...], int, bool, bool, str]
ConvKey = tuple[Layer, str, str]  # (layer, dtype, weight dtype)


def is_conv_forward(name: str) -> bool:
    """aten.convolution (forward; its backward is aten.convolution_backward)."""
    return name.rsplit(".", 1)[-1] == "convolution"


def _ints(v: Any) -> tuple[int, ...]:
    return tuple(int(x) for x in v) if isinstance(v, list | tuple) else (int(v),)


def conv_key(args: tuple[Any, ...], torch: Any) -> ConvKey | None:
    """The layer and dtypes of an aten.convolution call (input, weight, bias, stride, padding,
    dilation, transposed, output_padding, groups); None for transposed ones (not timed)."""
    if len(args) < 9 or not isinstance(args[0], torch.Tensor) or args[6]:
        return None
    x, w = args[0], args[1]
    layer: Layer = (tuple(int(s) for s in x.shape), tuple(int(s) for s in w.shape),
                    _ints(args[3]), _ints(args[4]), _ints(args[5]), int(args[8]),
                    args[2] is not None, bool(x.requires_grad), memory_format(x, torch))
    return (layer, str(x.dtype).removeprefix("torch."), str(w.dtype).removeprefix("torch."))


def _time_one(torch: Any, device: Any, key: ConvKey, amp: Any, budget_s: float) -> float:
    """Forward + backward of one convolution layer: the gradients the step takes (weight,
    bias, and the input's where it needed one)."""
    import torch.nn.functional as F

    (ishape, wshape, stride, padding, dilation, groups, bias, input_grad, fmt), dt, wdt = key
    conv = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[len(ishape)]
    fmt_of = getattr(torch, fmt, None) if fmt.startswith("channels_last") else None

    def tensor(shape: tuple[int, ...], dtype: str, grad: bool) -> Any:
        t = torch.randn(shape, device=device, dtype=getattr(torch, dtype))
        if fmt_of is not None and t.dim() == len(ishape):
            t = t.contiguous(memory_format=fmt_of)
        return t.requires_grad_(grad)

    x = tensor(ishape, dt, input_grad)
    w = tensor(wshape, wdt, True)
    b = tensor((wshape[0],), wdt, True) if bias else None
    wrt = tuple(t for t in (x, w, b) if t is not None and t.requires_grad)

    def forward() -> Any:
        ctx = torch.autocast(device.type, dtype=amp) if amp is not None else nullcontext()
        with ctx:
            return conv(x, w, b, stride, padding, dilation, groups)

    g = torch.randn_like(forward())
    return held_call_ms(torch, device, lambda: torch.autograd.grad(forward(), wrt, g),
                        budget_s)


def time_convs(torch: Any, device: Any, families: dict[str, dict[ConvKey, list[int]]], *,
               shapes: int = CONV_SHAPES, budget_ms: float | None = None) -> list[list[Any]]:
    """The first family's `shapes` biggest convolution layers (by FLOPs), timed alone in every
    precision family of `families` (precision → its step's tally: key → [count, FLOPs]): rows
    of `TIMED_FIELDS`. A layer takes the dtypes its precision's own step fed it (that
    precision's activation dtype where its tally lacks the layer). Layers that cannot run
    here (out of memory, no kernel for the dtype) are left out."""
    from gpuaudit.workloads.precision import autocast_dtype, float32_matmuls

    budget = (budget_ms if budget_ms is not None else CONV_BUDGET_MS[is_cuda(device)]) / 1e3
    top, each = biggest_first(families, shapes, budget)
    rows: list[list[Any]] = []
    for precision, tally in families.items():
        seen = {k[0]: k for k in tally}
        amp = autocast_dtype(torch, precision)
        act = ACTIVATION.get(precision, "float32")
        for (layer, _, _), (count, _) in top:
            key = seen.get(layer, (layer, act, act))
            try:
                # TF32 as the precision's own step has it: off for fp32 (cuDNN's default is
                # on: a bf16 recording timed its "fp32" layers on tensor cores, 3× too fast)
                with float32_matmuls(torch, tf32=precision != "fp32"):
                    ms = _time_one(torch, device, key, amp, each)
            except (RuntimeError, TypeError, AttributeError, KeyError):
                continue
            (ishape, wshape, stride, padding, dilation, groups, bias, grad, fmt) = layer
            rows.append([list(ishape), list(wshape), list(stride), list(padding),
                         list(dilation), groups, bias, grad, fmt, precision, key[1], key[2],
                         count, round(ms, 6)])
    return rows


def detail(convs: dict[ConvKey, list[int]], timed: list[list[Any]], not_timed: str | None
           ) -> dict[str, Any] | None:
    """The conv class's `timed_convs` entry (module docstring); None when the step ran none."""
    if not convs:
        return None
    total = sum(v[1] for v in convs.values())
    keys = {_layer_of(r) for r in timed}
    covered = sum(v[1] for k, v in convs.items() if k[0] in keys)
    out: dict[str, Any] = {"layers": len({k[0] for k in convs}), "timed": timed,
                           "timed_fields": TIMED_FIELDS,
                           "timed_flops_share": round(covered / total, 4) if total else 0.0}
    if not_timed:
        out["not_timed"] = not_timed
    return out


def _layer_of(row: list[Any]) -> Layer:
    return (tuple(row[0]), tuple(row[1]), tuple(row[2]), tuple(row[3]), tuple(row[4]),
            int(row[5]), bool(row[6]), bool(row[7]), str(row[8]))

