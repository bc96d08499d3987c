"""GPU memory a task needs: training, fine-tuning, inference; and whether it fits a GPU.

Formulas (docs/cost-recommend.md has the derivations):

- Model states (Rajbhandari et al., "ZeRO", SC'20, §3.1): mixed-precision Adam keeps 2 B of
  16-bit weights + 2 B of 16-bit gradients + 12 B of fp32 master weights, momentum and variance
  per parameter: 16 B/param. ZeRO stage 1 shards the optimizer state over the data-parallel
  GPUs, stage 2 the gradients too, stage 3 (= FSDP full shard) the weights too.
- Activations (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
  Models", 2022, eq. 2): s·b·h·(34 + 5·a·s/h) bytes per layer with 16-bit activations; with
  selective recomputation (or FlashAttention, which never stores the s×s scores) 34·s·b·h;
  with full checkpointing only each layer's 2·s·b·h input stays, plus one layer being
  recomputed.
- KV cache: 2 (K and V) × batch × context × layers × kv_heads × head_dim × bytes.
"""

from __future__ import annotations

from typing import Literal

from gpuaudit.errors import BadInputError
from gpuaudit.model.recommendation import MemoryEstimate, MemoryFit, ModelShape, TaskKind

Checkpointing = Literal["none", "selective", "full"]

# Bytes per element of a dtype; int4 for weight-only quantized inference (QLoRA, AWQ, GPTQ).
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5,
}

# Optimizer state in bytes per trainable parameter, for (mixed precision, fp32 training).
# Mixed precision keeps an fp32 master copy (4 B) beside the moments, fp32 training does not.
OPTIMIZER_BYTES: dict[str, tuple[float, float]] = {
    "adam": (12, 8),  # master 4 + momentum 4 + variance 4 (ZeRO §3.1: K = 12)
    "adamw": (12, 8),
    "adam8bit": (6, 2),  # bitsandbytes: 1-byte momentum and variance, master still fp32
    "sgd": (8, 4),  # master + momentum
    "none": (0, 0),
}

# LoRA adapts these matrices of each layer by default (q, k, v, o: h×h each, Hu et al. 2021).
LORA_TARGETS_PER_LAYER = 4

def dtype_bytes(dtype: str) -> float:
    key = dtype.strip().lower()
    if key not in DTYPE_BYTES:
        raise BadInputError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[key]


def activation_bytes(shape: ModelShape, *, micro_batch: int, seq_len: int,
                     checkpointing: Checkpointing = "selective", precision: str = "bf16"
                     ) -> float:
    """Activation memory of one GPU's micro-batch (Korthikanti et al. 2022, eq. 2 and §4)."""
    s, b, h, a, n = seq_len, micro_batch, shape.hidden, shape.heads, shape.layers
    full_layer = s * b * h * (34 + 5 * a * s / h)
    if checkpointing == "none":
        total = n * full_layer
    elif checkpointing == "selective":
        total = n * 34 * s * b * h
    elif checkpointing == "full":
        total = n * 2 * s * b * h + full_layer
    else:
        raise BadInputError(f"unknown checkpointing {checkpointing!r}; "
                            "expected none, selective or full")
    # The coefficients count 16-bit activations; fp32 training stores twice the bytes.
    return total * (2.0 if dtype_bytes(precision) >= 4 else 1.0)


def _check_common(gpus: int, zero_stage: int) -> None:
    if gpus < 1:
        raise BadInputError(f"GPU count must be at least 1, not {gpus}")
    if zero_stage not in (0, 1, 2, 3):
        raise BadInputError(f"ZeRO stage must be 0, 1, 2 or 3, not {zero_stage}")


def training_memory(shape: ModelShape, *, precision: str = "bf16", optimizer: str = "adam",
                    zero_stage: int = 0, gpus: int = 1, micro_batch: int = 1,
                    seq_len: int = 2048, checkpointing: Checkpointing = "selective",
                    trainable_params: float | None = None,
                    frozen_dtype: str | None = None) -> MemoryEstimate:
    """Memory per GPU to train ``shape`` data-parallel over ``gpus`` GPUs with ZeRO sharding.

    ``trainable_params`` below ``shape.params`` makes the rest frozen (fine-tuning): frozen
    weights are held in ``frozen_dtype`` (default: the training precision's 16-bit type) and
    have neither gradients nor optimizer state.
    """
    _check_common(gpus, zero_stage)
    opt_key = optimizer.strip().lower()
    if opt_key not in OPTIMIZER_BYTES:
        raise BadInputError(f"unknown optimizer {optimizer!r}; "
                            f"expected one of {', '.join(OPTIMIZER_BYTES)}")
    if micro_batch < 1 or seq_len < 1:
        raise BadInputError("micro-batch and sequence length must be at least 1")
    width = dtype_bytes(precision)
    mixed = width < 4
    # Mixed precision keeps 16-bit weights and gradients (fp8 training too: its master
    # weights and gradients stay in 16 bits); fp32 training keeps them in 4 bytes.
    w = 2.0 if mixed else 4.0
    trainable = shape.params if trainable_params is None else trainable_params
    if not 0 < trainable <= shape.params:
        raise BadInputError(f"trainable parameters {trainable:g} must be in (0, {shape.params:g}]")
    frozen = shape.params - trainable
    frozen_w = w if frozen_dtype is None else dtype_bytes(frozen_dtype)
    opt_b = OPTIMIZER_BYTES[opt_key][0 if mixed else 1]

    weights = trainable * w + frozen * frozen_w
    grads = trainable * w
    opt = trainable * opt_b
    states = weights + grads + opt
    if zero_stage >= 1:
        opt /= gpus
    if zero_stage >= 2:
        grads /= gpus
    if zero_stage >= 3:
        weights /= gpus
    act = activation_bytes(shape, micro_batch=micro_batch, seq_len=seq_len,
                           checkpointing=checkpointing, precision=precision)
    kind = TaskKind.TRAIN if frozen == 0 else TaskKind.FINETUNE
    basis = (
        f"{shape.params:.4g} params ({trainable:.4g} trainable), {w:g} B weights + {w:g} B "
        f"gradients + {opt_b:g} B {opt_key} state per trainable param (ZeRO §3.1)",
        f"activations: Korthikanti et al. 2022, {checkpointing} recomputation, micro-batch "
        f"{micro_batch} × {seq_len} tokens, {shape.layers} layers × hidden {shape.hidden}"
        + (" (shape derived from the parameter count)" if shape.derived else ""),
    )
    return MemoryEstimate(kind=kind, params=shape.params, gpus=gpus,
                          sharding="none" if zero_stage == 0 or gpus == 1 else
                          f"zero-{zero_stage}",
                          weights_bytes=weights, gradients_bytes=grads, optimizer_bytes=opt,
                          activations_bytes=act, states_total_bytes=states,
                          checkpointing=checkpointing, basis=basis)


def lora_trainable_params(shape: ModelShape, rank: int = 16,
                          targets_per_layer: int = LORA_TARGETS_PER_LAYER) -> float:
    """Adapter parameters: r·(d_in + d_out) per adapted h×h matrix (Hu et al. 2021)."""
    if rank < 1:
        raise BadInputError(f"LoRA rank must be at least 1, not {rank}")
    return float(shape.layers * targets_per_layer * rank * 2 * shape.hidden)


def finetune_memory(shape: ModelShape, *, method: str = "lora", lora_rank: int = 16,
                    precision: str = "bf16", optimizer: str = "adam", zero_stage: int = 0,
                    gpus: int = 1, micro_batch: int = 1, seq_len: int = 2048,
                    checkpointing: Checkpointing = "selective") -> MemoryEstimate:
    """Full fine-tuning is training; LoRA freezes the base weights (16-bit), QLoRA (4-bit)."""
    key = method.strip().lower()
    if key == "full":
        est = training_memory(shape, precision=precision, optimizer=optimizer,
                              zero_stage=zero_stage, gpus=gpus, micro_batch=micro_batch,
                              seq_len=seq_len, checkpointing=checkpointing)
        return est.model_copy(update={"kind": TaskKind.FINETUNE})
    if key not in ("lora", "qlora"):
        raise BadInputError(f"unknown fine-tuning method {method!r}; expected lora, qlora, full")
    return training_memory(shape, precision=precision, optimizer=optimizer,
                           zero_stage=zero_stage, gpus=gpus, micro_batch=micro_batch,
                           seq_len=seq_len, checkpointing=checkpointing,
                           trainable_params=lora_trainable_params(shape, lora_rank),
                           frozen_dtype="int4" if key == "qlora" else None)


def kv_cache_bytes(shape: ModelShape, *, batch: int, context: int, dtype: str = "fp16"
                   ) -> float:
    """K and V for every token of every sequence in every layer."""
    if batch < 0 or context < 1:
        raise BadInputError("batch must be ≥ 0 and context ≥ 1")
    return (2.0 * batch * context * shape.layers * shape.kv_heads * shape.head_dim
            * dtype_bytes(dtype))


def inference_memory(shape: ModelShape, *, dtype: str = "bf16", batch: int = 1,
                     context: int = 4096, kv_dtype: str | None = None, gpus: int = 1
                     ) -> MemoryEstimate:
    """Weights in ``dtype`` plus the KV cache, both split evenly over ``gpus`` (tensor
    parallel shards the weights and the KV heads). Activations of a decode step are small
    beside these and are left to the margin."""
    _check_common(gpus, 0)
    weights = shape.params * dtype_bytes(dtype)
    kv_key = kv_dtype or ("fp16" if dtype_bytes(dtype) < 2 else dtype)
    kv = kv_cache_bytes(shape, batch=batch, context=context, dtype=kv_key)
    basis = (
        f"weights {shape.params:.4g} × {dtype_bytes(dtype):g} B ({dtype})",
        f"KV cache 2 × batch {batch} × context {context} × {shape.layers} layers × "
        f"{shape.kv_heads} kv-heads × {shape.head_dim} head-dim × "
        f"{dtype_bytes(kv_key):g} B ({kv_key})",
    )
    return MemoryEstimate(kind=TaskKind.INFER, params=shape.params, gpus=gpus,
                          sharding="none" if gpus == 1 else "tensor-parallel",
                          weights_bytes=weights / gpus, kv_cache_bytes=kv / gpus,
                          states_total_bytes=weights, basis=basis)


def gb(n: float) -> str:
    """Bytes as GB (10^9), three significant figures: 112 GB, 31.4 GB, 1.88 GB."""
    return f"{n / 1e9:.3g} GB"


def fit(estimate: MemoryEstimate, gpu_memory_bytes: float, margin: float = 0.10) -> MemoryFit:
    """Whether the estimate fits a GPU of ``gpu_memory_bytes`` with ``margin`` kept free."""
    if gpu_memory_bytes <= 0:
        raise BadInputError("GPU memory must be more than zero")
    if not 0 <= margin < 1:
        raise BadInputError(f"memory margin must be in [0, 1), not {margin:g}")
    usable = gpu_memory_bytes * (1 - margin)
    need = estimate.per_gpu_bytes
    fits = need <= usable
    where = (f" ({estimate.sharding} over {estimate.gpus} GPUs)" if estimate.gpus > 1
             else "")
    verdict = "fits" if fits else "does not fit"
    reason = (f"{verdict}: needs {gb(need)} per GPU{where}; {gb(usable)} usable of "
              f"{gb(gpu_memory_bytes)} ({margin:.0%} kept free)")
    return MemoryFit(estimate=estimate, gpu_memory_bytes=gpu_memory_bytes, margin=margin,
                     fits=fits, usable_bytes=usable, reason=reason)
