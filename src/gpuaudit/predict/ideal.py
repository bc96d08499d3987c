"""The ideal time of an operator class's work on a GPU: what the measured (or scaled)
rates allow, before the calibration divides it by the share the class achieved."""

from __future__ import annotations

from gpuaudit.errors import BadInputError
from gpuaudit.model.opprofile import MEMORY_CLASSES, TENSOR_CLASSES

from .attention import attention_seconds
from .hardware import Roofs
from .hardware import wave_efficiency as wave_eff
from .kernels import LAYOUT
from .profile import Gemm, OpWork

ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
MEMORY_BOUND = (*MEMORY_CLASSES, LAYOUT)


def matmul_rate(roofs: Roofs, precision: str) -> float:
    r = roofs.matmul(precision)
    if r is None:
        where = "measured" if roofs.measured else "published"
        raise BadInputError(f"no {precision} matmul rate {where} for {roofs.gpu.name}: "
                            f"cannot time matmuls in {precision} there")
    return r


def model_rate(g: Gemm, roofs: Roofs, precision: str) -> float:
    """A matmul's rate: the GPU's matmul rate × its efficiency after wave quantization and
    its best split of K (the partial sums' traffic counted), capped by the roofline on its
    operands' and result's bytes.

    The shapes the recording timed alone are not used: each was one call between a start
    event and a synchronize, in the NN layout, and that timing's bias differs between
    precisions (gpt-124m on an H200: fp32/bf16 time ratio 12.9 timed alone, 14.7 in the
    steps) — docs/predict.md."""
    rate = matmul_rate(roofs, precision)
    ridge = rate * 1e12 / (roofs.memory_gbps * 1e9)
    r = rate * wave_eff(g.m, g.n, g.k, g.batch, roofs.sms, ridge)
    if g.bytes > 0 and g.flops > 0:
        r = min(r, g.flops / g.bytes * roofs.memory_gbps / 1e3)
    return r


def tensor_seconds(cls: str, work: OpWork, roofs: Roofs, precision: str) -> float:
    """Ideal time of a matmul-bound class: each shape at its modeled rate, FLOPs past the
    kept shapes at the plain matmul rate; a convolution at least its tensors' traffic (the
    class's roofline: its per-shape bytes are not recorded, the implicit GEMM's A being the
    im2col matrix, kh·kw times what is read); attention as `attention.attention_seconds`."""
    rate = matmul_rate(roofs, precision)
    if cls == "attention":
        return attention_seconds(work, roofs, rate)
    t, covered = 0.0, 0.0
    for g in work.shapes:
        t += g.flops / (model_rate(g, roofs, precision) * 1e12)
        covered += g.flops
    t += max(0.0, work.flops - covered) / (rate * 1e12)
    if cls == "conv":
        t = max(t, memory_seconds(work, roofs))
    return t


def memory_seconds(work: OpWork, roofs: Roofs) -> float:
    return work.bytes / (roofs.memory_gbps * 1e9)


def ideal_seconds(cls: str, work: OpWork, roofs: Roofs, precision: str) -> float:
    if cls in TENSOR_CLASSES:
        return tensor_seconds(cls, work, roofs, precision)
    if cls in MEMORY_BOUND:
        return memory_seconds(work, roofs)
    return 0.0
