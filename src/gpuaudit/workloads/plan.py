"""What a train or infer run measures, by profile and device, and the options that narrow it
(`BenchContext.options`: models, precisions, modes, batch_size, parts, …)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuaudit.bench.context import BenchContext, Profile
from gpuaudit.workloads.flops import PEAK_KEY
from gpuaudit.workloads.precision import TRAIN_PRECISIONS, TrainMode, parse_mode

# Training modes per reference model on a GPU (standard profile). The optimizer comparison
# (fused vs foreach) and the channels_last one are eager: their effect is the same compiled,
# and each compilation costs tens of seconds.
GPU_TRAIN = {
    "gpt-124m": ("fp32", "tf32", "bf16", "bf16+foreach", "fp16", "bf16+compile"),
    "bert-base": ("fp32", "bf16", "bf16+compile"),
    "resnet50": ("fp32", "tf32", "bf16", "bf16+cl", "fp16+cl", "bf16+cl+compile"),
    "gpt-1.3b": ("bf16",),
}
FULL_EXTRA = {"gpt-1.3b": ("bf16+compile",)}
TRANSFORMER_MODES = ("fp32", "tf32", "bf16", "fp16", "bf16+compile")
IMAGE_MODES = ("fp32", "tf32", "bf16+cl", "fp16+cl", "bf16+cl+compile")
CPU_TRAIN = {"gpt-tiny": ("fp32", "bf16"), "bert-tiny": ("fp32", "bf16"),
             "resnet-tiny": ("fp32", "bf16")}


@dataclass(frozen=True)
class Target:
    """Where single-device work runs: the first chosen GPU, or the CPU."""

    device: Any  # torch.device
    gpu_index: int | None  # NVML index
    capability: tuple[int, int] | None  # None: the CPU
    label: str  # "cuda" or "cpu"


def target(ctx: BenchContext) -> Target:
    import torch

    if ctx.on_gpu:
        dev, idx = ctx.devices[0]
        # CUDA events, streams and graphs follow the current device: make it this one.
        torch.cuda.set_device(dev.cuda_index)
        # cuDNN picks the fastest convolution per shape during the warm-up steps.
        torch.backends.cudnn.benchmark = True
        return Target(torch.device("cuda", dev.cuda_index), idx, dev.capability, "cuda")
    return Target(torch.device("cpu"), None, None, "cpu")


def peak_tflops(ctx: BenchContext, gpu_index: int | None, precision: str) -> float | None:
    if gpu_index is None or precision not in PEAK_KEY:
        return None
    spec = ctx.spec(gpu_index)
    return spec.peak(PEAK_KEY[precision]) if spec else None


def opt_list(ctx: BenchContext, key: str) -> list[str] | None:
    value = ctx.options.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        return [v for v in value.split(",") if v]
    return [str(v) for v in value]


def opt_int(ctx: BenchContext, key: str, default: int) -> int:
    value = ctx.options.get(key)
    return default if value is None else int(value)


def opt_float(ctx: BenchContext, key: str, default: float) -> float:
    value = ctx.options.get(key)
    return default if value is None else float(value)  # type: ignore[arg-type]


def parts(ctx: BenchContext, by_profile: dict[Profile, tuple[str, ...]]) -> set[str]:
    chosen = opt_list(ctx, "parts")
    return set(chosen) if chosen is not None else set(by_profile[ctx.profile])


def train_plan(ctx: BenchContext) -> list[tuple[str, list[TrainMode]]]:
    """(model, modes) in the order they run."""
    from gpuaudit.workloads.models import PRESETS, ResnetPreset

    models = opt_list(ctx, "models")
    if models is None:
        if ctx.profile is Profile.QUICK:
            models = ["gpt-124m" if ctx.on_gpu else "gpt-tiny"]
        else:
            models = list(GPU_TRAIN if ctx.on_gpu else CPU_TRAIN)
    explicit = opt_list(ctx, "modes")
    precisions = opt_list(ctx, "precisions")
    plan = []
    for name in models:
        if explicit is not None:
            ids: tuple[str, ...] = tuple(explicit)
        elif ctx.profile is Profile.QUICK:
            ids = ("bf16" if ctx.on_gpu else "fp32",)
        elif not ctx.on_gpu:
            ids = CPU_TRAIN.get(name, ("fp32", "bf16"))
        elif name in GPU_TRAIN:
            ids = GPU_TRAIN[name] + (FULL_EXTRA.get(name, ())
                                     if ctx.profile is Profile.FULL else ())
        else:
            image = isinstance(PRESETS.get(name), ResnetPreset)
            ids = IMAGE_MODES if image else TRANSFORMER_MODES
        modes = [parse_mode(i) for i in ids]
        if precisions is not None:
            modes = [m for m in modes if m.precision in precisions]
            have = {m.precision for m in modes}
            modes += [TrainMode(p) for p in precisions
                      if p in TRAIN_PRECISIONS and p not in have]
        plan.append((name, modes))
    return plan


def quick_batch(ctx: BenchContext, model: str) -> int | None:
    """The batch for the quick profile's small figure (None: the preset's)."""
    if ctx.options.get("batch_size") is not None:
        return opt_int(ctx, "batch_size", 1)
    if ctx.profile is Profile.QUICK and model == "gpt-124m":
        return 8
    return None
