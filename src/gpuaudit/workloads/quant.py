"""fp8 and int8 inference for Linear layers, in plain PyTorch (no torchao, no TensorRT).

fp8: weights stored as float8 e4m3 with one scale per tensor; activations quantized on the fly
with one scale per tensor (their absolute maximum / 448); `torch._scaled_mm` multiplies with
bf16 output and fast accumulation. int8: weights with one scale per output channel,
activations one scale per row (absolute maximum / 127), `torch._int_mm` (int32 accumulation),
rescaled to bf16. Layers whose shape the kernels cannot take stay in bf16.
Imported only when a model is quantized (see nets.py on the torch import).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

FP8_MAX = 448.0  # largest float8 e4m3fn value
_EPS = 1e-12


def _fits(layer: nn.Linear) -> bool:
    n, k = layer.weight.shape
    return n % 16 == 0 and k % 16 == 0


class Fp8Linear(nn.Module):
    def __init__(self, layer: nn.Linear) -> None:
        super().__init__()
        w = layer.weight.detach().float()
        scale = w.abs().amax().clamp(min=_EPS) / FP8_MAX
        self.out_features, self.in_features = w.shape
        self.register_buffer("weight", (w / scale).to(torch.float8_e4m3fn))
        self.register_buffer("weight_scale", scale.reshape(()).float())
        bias = layer.bias.detach().to(torch.bfloat16) if layer.bias is not None else None
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        m = x2.shape[0]
        pad = (-m) % 16
        if pad:
            x2 = F.pad(x2, (0, 0, 0, pad))
        scale = x2.abs().amax().float().clamp(min=_EPS) / FP8_MAX
        xq = (x2.float() / scale).to(torch.float8_e4m3fn)
        y = torch._scaled_mm(xq, self.weight.t(), scale_a=scale, scale_b=self.weight_scale,
                             bias=self.bias, out_dtype=torch.bfloat16, use_fast_accum=True)
        if isinstance(y, tuple):  # torch < 2.5 returned (out, amax)
            y = y[0]
        return y[:m].reshape(*lead, self.out_features)


class Int8Linear(nn.Module):
    def __init__(self, layer: nn.Linear) -> None:
        super().__init__()
        w = layer.weight.detach().float()
        scale = w.abs().amax(dim=1).clamp(min=_EPS) / 127.0
        self.out_features, self.in_features = w.shape
        q = (w / scale[:, None]).round().clamp(-127, 127).to(torch.int8)
        self.register_buffer("weight", q)  # (n, k); used transposed: column-major (k, n)
        self.register_buffer("weight_scale", scale)
        bias = layer.bias.detach().to(torch.bfloat16) if layer.bias is not None else None
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        m = x2.shape[0]
        rows = max(32, m + (-m) % 8)  # _int_mm on CUDA takes more than 16 rows, a multiple of 8
        if rows != m:
            x2 = F.pad(x2, (0, 0, 0, rows - m))
        xs = x2.abs().amax(dim=1, keepdim=True).float().clamp(min=_EPS) / 127.0
        xq = (x2.float() / xs).round().clamp(-127, 127).to(torch.int8)
        acc = torch._int_mm(xq, self.weight.t())
        y = (acc.float() * xs * self.weight_scale).to(torch.bfloat16)
        if self.bias is not None:
            y = y + self.bias
        return y[:m].reshape(*lead, self.out_features)


def quantize(model: nn.Module, precision: str) -> tuple[int, int]:
    """Replace the Linear layers of `model` (in place) by fp8 or int8 ones where their shape
    allows; returns (replaced, Linear layers in all)."""
    cls = {"fp8": Fp8Linear, "int8": Int8Linear}[precision]
    replaced = total = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                total += 1
                if _fits(child):
                    setattr(parent, name, cls(child))
                    replaced += 1
    return replaced, total
