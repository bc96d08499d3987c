"""Model FLOPs: PaLM's formula for transformers, an exact count for ResNets, MFU, and the
cross-check against `torch.utils.flop_counter.FlopCounterMode`.

PaLM (Chowdhery et al. 2022, appendix B): a decoder with N parameters, L layers, H heads of
size Q and a context of T tokens does 6N + 12·L·H·Q·T FLOPs per token in training (forward
2N + 4·L·H·Q·T, backward twice that). The attention term counts QKᵀ and AV over the whole
T×T matrix, causal or not, as FlopCounterMode does. N here is the weights that take part in
matrix multiplies (the tied token embedding once, as the output layer; no position embedding,
biases or norms): with it the formula equals what FlopCounterMode counts, exactly.

MFU = model FLOPs per second / the GPU's dense datasheet peak for the precision the matmuls
ran in. Recomputation (activation checkpointing, flash attention's backward) is not model
FLOPs: FlopCounterMode counts flash attention's recomputed QKᵀ, so `FlopCount.model` removes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuaudit.model.presets import palm_forward_flops_per_token, palm_train_flops_per_token

# The datasheet peak an MFU is judged against, per training/inference precision.
PEAK_KEY = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8",
            "int8": "int8"}

__all__ = ["PEAK_KEY", "FlopCount", "ResnetFlops", "count_flops", "mfu", "missing_formulas",
           "palm_forward_flops_per_token", "palm_train_flops_per_token", "resnet_flops"]


def mfu(model_flops_per_s: float, peak_tflops: float | None) -> float | None:
    """Model FLOPs utilisation as a fraction of the dense peak; None without a peak."""
    if not peak_tflops:
        return None
    return model_flops_per_s / (peak_tflops * 1e12)


@dataclass(frozen=True)
class ResnetFlops:
    forward: int  # FLOPs of one image's forward pass (convolutions and the classifier)
    stem: int  # of which the first convolution (its input needs no gradient)

    @property
    def train(self) -> int:
        """Model FLOPs of one training image: 3 × forward (the convention behind 6N)."""
        return 3 * self.forward

    @property
    def train_executed(self) -> int:
        """What a training step really multiplies: the first convolution computes no input
        gradient, so FlopCounterMode sees 3 × forward − stem."""
        return 3 * self.forward - self.stem


def _conv_out(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


def resnet_flops(layers: Sequence[int] = (3, 4, 6, 3), *, width: int = 64,
                 image_size: int = 224, num_classes: int = 1000) -> ResnetFlops:
    """Per-image FLOPs of a bottleneck ResNet (v1.5: stride on the 3×3 convolution, as
    torchvision's), counting 2 FLOPs per multiply-add of convolutions and the classifier."""
    h = _conv_out(image_size, 7, 2, 3)
    stem = 2 * 7 * 7 * 3 * width * h * h
    total = stem
    h = _conv_out(h, 3, 2, 1)  # max pool
    inp = width
    for i, blocks in enumerate(layers):
        planes = width * 2**i
        out = planes * 4
        for b in range(blocks):
            stride = 2 if (i > 0 and b == 0) else 1
            h_out = _conv_out(h, 3, stride, 1)
            total += 2 * inp * planes * h * h  # 1×1 reduce
            total += 2 * 9 * planes * planes * h_out * h_out  # 3×3
            total += 2 * planes * out * h_out * h_out  # 1×1 expand
            if b == 0:
                total += 2 * inp * out * h_out * h_out  # 1×1 projection shortcut
            inp, h = out, h_out
    total += 2 * inp * num_classes
    return ResnetFlops(forward=total, stem=stem)


@dataclass(frozen=True)
class FlopCount:
    """What FlopCounterMode counted, split so that attention can be judged by PaLM's rule."""

    total: int
    attention_forward: int = 0
    attention_backward: int = 0

    @property
    def dense(self) -> int:
        return self.total - self.attention_forward - self.attention_backward

    @property
    def model(self) -> int:
        """Model FLOPs: torch counts a flash-attention backward as five T×T matmuls, one of
        them the recomputed QKᵀ; model FLOPs leave that one out (backward = 2 × forward)."""
        return self.dense + self.attention_forward + self.attention_backward * 4 // 5


def _grouped_mm_flops(a: Any, b: Any, *_a: Any, out_shape: Any = None, **_k: Any) -> int:
    """A grouped GEMM's FLOPs from its operands' shapes: each output element contracts the
    left operand's last dimension, except where both are 2-D (a weight gradient: the groups
    split that dimension, so the output's G blocks share it)."""
    if len(a) == 2 and len(b) == 2:
        return 2 * a[0] * a[1] * b[1]
    n = 1
    for d in out_shape or ():
        n *= d
    return 2 * n * a[-1]


def missing_formulas(torch: Any) -> dict[Any, Callable[..., int]]:
    """Formulas FlopCounterMode lacks (it counts 0 for these): the CPU flash-attention
    kernels (torch's own formulas for the CUDA ones, so CPU and GPU count alike) and the
    grouped GEMMs of mixture-of-experts layers; and the fused attention kernels' formulas
    again, for grouped-query attention (`enable_gqa=True`: fewer key/value heads than
    query heads, which the kernels broadcast), whose shapes torch's formula refused before
    torch 2.13 ("sdpa_flop_count: query/key/value shapes are incompatible"), failing the
    count and with it every mode; and a convolution's backward, which torch's formula counts
    through transposed shapes that lose the groups (a depthwise 7×7 convolution over 256
    channels: its backward 52.8 GFLOP where its forward is 0.21, torch 2.13), so a grouped
    convolution's backward counted up to its channels over 2 times its work."""
    from torch.utils import flop_counter as fc

    aten = torch.ops.aten

    def forward(q: Any, k: Any, v: Any, *_a: Any, out_shape: Any = None, **_k: Any) -> int:
        return int(fc.sdpa_flop_count(q, _kv_heads(q, k), _kv_heads(q, v)))

    def backward(g: Any, q: Any, k: Any, v: Any, *_a: Any, out_shape: Any = None,
                 **_k: Any) -> int:
        return int(fc.sdpa_backward_flop_count(g, q, _kv_heads(q, k), _kv_heads(q, v)))

    found: dict[Any, Callable[..., int]] = {}
    for kind in ("flash_attention", "efficient_attention", "cudnn_attention",
                 "flash_attention_for_cpu"):
        for op, formula in ((f"_scaled_dot_product_{kind}", forward),
                            (f"_scaled_dot_product_{kind}_backward", backward)):
            if getattr(aten, op, None) is not None:
                found[getattr(aten, op)] = formula
    for name in ("_grouped_mm", "_scaled_grouped_mm", "_scaled_grouped_mm_v2"):
        op = getattr(aten, name, None)
        if op is not None:
            found[op] = _grouped_mm_flops

    def conv_backward(grad_out: Any, x: Any, w: Any, _bias: Any, _stride: Any, _padding: Any,
                      _dilation: Any, transposed: bool, _output_padding: Any, _groups: Any,
                      output_mask: Any, *_a: Any, out_shape: Any = None, **_k: Any) -> int:
        # the input's gradient is a convolution of the output's with the weights, the
        # weights' one of the output's with the input: each the forward's work, per group
        # as the forward counts it (its weights' shape holds the channels per group)
        forward = fc.conv_flop_count(x, w, grad_out, transposed=transposed)
        return int(forward * (bool(output_mask[0]) + bool(output_mask[1])))

    found[aten.convolution_backward] = conv_backward
    return found


def _kv_heads(q: Any, kv: Any) -> Any:
    """A key's or value's shape (B, H_kv, S, D) with the query's heads where the kernel
    broadcasts fewer (grouped-query attention): the work is the query heads'."""
    if len(q) == 4 and len(kv) == 4 and 0 < kv[1] < q[1] and q[1] % kv[1] == 0:
        return (kv[0], q[1], kv[2], kv[3])
    return kv


def count_flops(fn: Callable[[], Any]) -> FlopCount:
    """Run `fn` (eager: compiled kernels bypass the counter) under FlopCounterMode."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False, custom_mapping=missing_formulas(torch)) as mode:
        fn()
    fwd = bwd = 0
    for op, n in mode.get_flop_counts().get("Global", {}).items():
        name = str(op)
        if "scaled_dot_product" in name:
            if "backward" in name:
                bwd += int(n)
            else:
                fwd += int(n)
    return FlopCount(total=int(mode.get_total_flops()), attention_forward=fwd,
                     attention_backward=bwd)
