"""Precisions and training modes: what each means in PyTorch, and where it cannot run.

fp32: float32 everywhere, TF32 off (matmuls and cuDNN convolutions). tf32: float32 tensors,
TF32 tensor cores on. bf16 / fp16: automatic mixed precision (float32 weights, matmuls and
convolutions in 16 bits), fp16 with a GradScaler; a model whose build made its weights
16-bit trains in that precision only (`weights_precision`). Inference casts the model itself
to bf16 / fp16; fp8 and int8 inference replace its Linear layers (see `quant`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gpuaudit.errors import BadInputError

TRAIN_PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
INFER_PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
MIN_CAPABILITY = {"tf32": (8, 0), "bf16": (8, 0), "fp16": (7, 0), "fp8": (8, 9), "int8": (8, 0)}


def unsupported(precision: str, capability: tuple[int, int] | None, *, training: bool,
                image_model: bool = False, uses_linear: bool = True) -> str | None:
    """Why `precision` cannot run here (None: it can). `capability` None means the CPU."""
    if precision in ("fp8", "int8"):
        if training:
            return f"{precision} training is not a mode of plain PyTorch (inference only)"
        if image_model or not uses_linear:
            return (f"{precision} applies to Linear layers; PyTorch has no {precision} "
                    "convolution")
    if capability is None:
        if precision in ("tf32", "fp8"):
            return f"{precision} is a tensor-core format of NVIDIA GPUs; not on the CPU"
        if precision == "fp16" and training:
            return "fp16 with a GradScaler is a GPU mode; the CPU has no fast fp16 path"
        return None
    need = MIN_CAPABILITY.get(precision)
    if need and capability < need:
        return (f"{precision} needs compute capability {need[0]}.{need[1]} or newer "
                f"(this GPU: {capability[0]}.{capability[1]})")
    return None


@contextlib.contextmanager
def float32_matmuls(torch: Any, tf32: bool) -> Iterator[None]:
    """TF32 on or off for float32 matmuls and cuDNN convolutions, restored afterwards."""
    old = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cudnn.allow_tf32 = tf32
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old[0])
        torch.backends.cudnn.allow_tf32 = old[1]


def autocast_dtype(torch: Any, precision: str) -> Any | None:
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)


def weights_precision(torch: Any, model: Any) -> str | None:
    """The 16-bit precision a model's trainable weights are held in where its build made
    them so (`model.to(torch.bfloat16)`: pure 16-bit training, no float32 master copy);
    None for float32 weights, the training modes' own."""
    held = {p.dtype for p in model.parameters() if p.requires_grad and p.is_floating_point()}
    for dtype, name in ((torch.bfloat16, "bf16"), (torch.float16, "fp16")):
        if dtype in held:
            return name
    return None


def check_scaler(torch: Any, precision: str, model: Any) -> None:
    """fp16's GradScaler unscales the gradients with a kernel for real floating types only:
    a complex weight's gradient (a Fourier layer's) fails it at the first step."""
    if precision != "fp16":
        return
    complex_weights = sum(1 for p in model.parameters() if p.requires_grad and p.is_complex())
    if complex_weights:
        raise ValueError(f"fp16's GradScaler cannot unscale the gradients of the model's "
                         f"{complex_weights} complex weight(s) (torch has no kernel for "
                         "them); measure bf16, which needs no scaler")


def check_weights(precision: str, held: str | None) -> None:
    """A training mode whose precision the model's own 16-bit weights would contradict: its
    step would run in the weights' precision under another name."""
    if held is not None and precision in TRAIN_PRECISIONS and precision != held:
        raise ValueError(f"the model's weights are {held}, as its build made them: its step "
                         f"in {precision} would run in {held}; measure --precision {held}, or "
                         f"cast the model to float32 in build() to measure {precision}")


def model_dtype(torch: Any, precision: str) -> Any:
    """The dtype an inference model is cast to (fp8/int8 keep bf16 around their matmuls)."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16,
            "int8": torch.bfloat16}.get(precision, torch.float32)


def cast_model(torch: Any, model: Any, precision: str) -> Any:
    """The model's floating-point weights and buffers in `model_dtype`; complex ones (a Fourier
    layer's) kept, which `model.to(dtype)` would cast to real, dropping their imaginary
    part (`.float()`, `.half()` and `.bfloat16()` cast the floating ones only)."""
    dtype = model_dtype(torch, precision)
    return {torch.bfloat16: model.bfloat16, torch.float16: model.half}.get(dtype, model.float)()


@dataclass(frozen=True)
class TrainMode:
    precision: str
    compile: bool = False
    fused: bool = True  # fused optimizer step (one kernel family) vs foreach
    channels_last: bool = False

    @property
    def id(self) -> str:
        parts = [self.precision]
        if self.channels_last:
            parts.append("cl")
        if self.compile:
            parts.append("compile")
        if not self.fused:
            parts.append("foreach")
        return "+".join(parts)


def parse_mode(text: str) -> TrainMode:
    """'bf16+cl+compile' → TrainMode; the parts after the precision in any order."""
    precision, *flags = text.strip().lower().split("+")
    if precision not in TRAIN_PRECISIONS:
        raise BadInputError(f"training mode {text!r}: precision must be one of "
                            f"{', '.join(TRAIN_PRECISIONS)}")
    unknown = set(flags) - {"cl", "compile", "foreach", "fused"}
    if unknown:
        raise BadInputError(f"training mode {text!r}: unknown part {sorted(unknown)[0]!r} "
                            "(cl, compile, foreach)")
    return TrainMode(precision, compile="compile" in flags, fused="foreach" not in flags,
                     channels_last="cl" in flags)


def check_precisions(names: list[str] | tuple[str, ...]) -> list[str]:
    unknown = [p for p in names if p not in INFER_PRECISIONS]
    if unknown:
        raise BadInputError(f"unknown precision {', '.join(unknown)} (choose from "
                            f"{', '.join(INFER_PRECISIONS)})")
    return list(names)
