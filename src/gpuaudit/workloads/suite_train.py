"""`gpuaudit bench train`: the reference models (or the user's) trained in each mode, then the
data-loading pipeline against the measured image rate, then DDP scaling (full profile)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

from gpuaudit.bench.context import BenchContext, Profile
from gpuaudit.bench.stats import skipped
from gpuaudit.model import Measurement
from gpuaudit.model.opprofile import OpProfile
from gpuaudit.percentile import percentile
from gpuaudit.workloads import records
from gpuaudit.workloads.models import PRESETS, ResnetPreset, check_model
from gpuaudit.workloads.plan import (
    Target,
    opt_float,
    opt_int,
    opt_list,
    parts,
    peak_tflops,
    quick_batch,
    target,
    train_plan,
)
from gpuaudit.workloads.precision import TRAIN_PRECISIONS, TrainMode, unsupported
from gpuaudit.workloads.results import TrainResult
from gpuaudit.workloads.stats import rates

SUITE = records.TRAIN
PARTS = {Profile.QUICK: ("modes",), Profile.STANDARD: ("modes", "data"),
         Profile.FULL: ("modes", "data", "scaling")}
NO_TORCH = "torch is not installed (pip install 'gpuaudit[torch]')"


def run(ctx: BenchContext) -> Iterator[Measurement | OpProfile]:
    plan = train_plan(ctx)
    for name, _ in plan:
        check_model(name)  # a bad --model is bad input before anything runs
    if importlib.util.find_spec("torch") is None:
        yield skipped(SUITE, "train", "samples/s", NO_TORCH)
        return
    chosen = parts(ctx, PARTS)
    tgt = target(ctx)
    image_rate: float | None = None
    if "modes" in chosen:
        for name, modes in plan:
            for m in _train_model(ctx, tgt, name, modes):
                yield m
                if isinstance(m, OpProfile):
                    continue
                if m.name.endswith("/throughput") and m.value and m.params.get("image_size"):
                    image_rate = max(image_rate or 0.0, m.value)
    if "data" in chosen:
        explicit = opt_list(ctx, "parts") is not None
        images = any(isinstance(PRESETS.get(n), ResnetPreset) for n, _ in plan)
        if explicit or images:
            from gpuaudit.workloads.data import run_data

            rate = opt_float(ctx, "train_rate", 0.0) or image_rate
            yield from run_data(ctx, tgt, train_rate=rate)
    if "scaling" in chosen:
        from gpuaudit.workloads.ddp import run_scaling

        yield from run_scaling(ctx, plan)


def _train_model(ctx: BenchContext, tgt: Target, name: str, modes: list[TrainMode]
                 ) -> Iterator[Measurement | OpProfile]:
    from gpuaudit.workloads.train import measure_mode

    on_gpu = tgt.capability is not None
    steps = opt_int(ctx, "steps", ctx.pick(10, 20, 30) if on_gpu else 3)
    warmup = opt_int(ctx, "warmup_steps", 3 if on_gpu else 1)
    min_warm = opt_float(ctx, "min_warmup_s", ctx.pick(0.5, 1.0, 2.0) if on_gpu else 0.0)
    backend = str(ctx.options.get("compile_backend", "inductor"))
    compile_mode = ctx.options.get("compile_mode")
    profile_to = ctx.options.get("profile_to")
    op_profile = bool(ctx.options.get("op_profile"))
    traces = ctx.options.get("op_profile_traces")  # a folder to keep the profiled traces in
    batch = quick_batch(ctx, name)
    precisions = opt_list(ctx, "precisions") or []
    for p in precisions:
        if p not in TRAIN_PRECISIONS:
            yield records.train_skipped(name, p, unsupported(p, tgt.capability, training=True)
                                        or "not a training precision",
                                        gpu_index=tgt.gpu_index, device=tgt.label)
    fp32_rate: float | None = None
    counted = False
    counted_per_sample: float | None = None  # a user model's FLOPs, counted once
    timed: list[tuple[TrainMode, TrainResult]] = []
    for mode in modes:
        why = unsupported(mode.precision, tgt.capability, training=True)
        if why:
            yield records.train_skipped(name, mode.id, why, gpu_index=tgt.gpu_index,
                                        device=tgt.label)
            continue
        ctx.step(f"train {name} {mode.id}")
        result = measure_mode(
            name, mode, tgt.device, batch_size=batch, steps=steps, warmup_steps=warmup,
            min_warmup_s=min_warm, count=not counted and not mode.compile,
            compile_backend=backend, compile_mode=str(compile_mode) if compile_mode else None,
            profile_to=str(profile_to) if profile_to and mode.compile else None,
            host_step=op_profile)
        if isinstance(result, str):
            yield records.train_skipped(name, mode.id, result, gpu_index=tgt.gpu_index,
                                        device=tgt.label)
            continue
        if result.flop_count is not None:
            counted = True
            counted_per_sample = result.flop_count.model / result.batch_size
            yield records.flop_check(result.model, result.flop_count, result.batch_size,
                                     result.expected_count_per_sample,
                                     result.flops_source if result.expected_count_per_sample
                                     else "no formula for this model",
                                     gpu_index=tgt.gpu_index, device=tgt.label)
        if result.model_flops_per_step is None and counted_per_sample:
            result.model_flops_per_step = round(counted_per_sample * result.batch_size)
        rate = percentile(rates(result.batch_size, result.step_times_s), 50)
        if mode.precision == "fp32" and not mode.compile and fp32_rate is None:
            fp32_rate = rate
        yield from records.train_measurements(
            result, peak_tflops=peak_tflops(ctx, tgt.gpu_index, mode.precision),
            fp32_rate=fp32_rate, gpu_index=tgt.gpu_index, device=tgt.label)
        if op_profile:
            timed.append((mode, result))
    # The op profiles come after every mode is timed: a process that has run torch.profiler
    # launches slower (CUPTI stays attached), and host-bound steps timed after a profile ran
    # up to 1.8x long on an H200. Each profile keeps its mode's step and host time as timed
    # above.
    for mode, result in timed:
        ctx.step(f"op profile {name} {mode.id}")
        captured = measure_mode(
            name, mode, tgt.device, batch_size=batch, steps=1, warmup_steps=warmup,
            min_warmup_s=min_warm, count=False, compile_backend=backend,
            compile_mode=str(compile_mode) if compile_mode else None, op_profile=True,
            keep_trace=_trace_path(traces, name, mode), host=result.host)
        if isinstance(captured, str) or captured.ops is None:
            why = captured if isinstance(captured, str) else "the profiler captured nothing"
            yield records.train_skipped(name, f"{mode.id}/op-profile", why,
                                        gpu_index=tgt.gpu_index, device=tgt.label)
            continue
        from gpuaudit.workloads import opcapture

        prof = opcapture.op_profile(
            captured.ops, workload=f"{result.model}/{mode.id}", model=result.model,
            mode=mode, batch=result.batch_size, tokens_per_sample=result.tokens_per_sample,
            step_ms=1e3 * percentile(result.step_times_s, 50),
            device="cuda" if on_gpu else "cpu",
            model_params={**result.params, "channels_last": mode.channels_last,
                          "entry": name if ":" in name else None},
            peak_memory_gb=(result.peak_memory_bytes / 1e9
                            if result.peak_memory_bytes is not None else None))
        yield from opcapture.measurements(prof, base=records.mode_params(result, tgt.label),
                                          gpu_index=tgt.gpu_index)
        yield prof


def _trace_path(folder: object, model: str, mode: TrainMode) -> str | None:
    """Where to keep a mode's profiled trace (option `op_profile_traces`), or None."""
    if not folder:
        return None
    import os
    import re

    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{model}-{mode.id}")
    os.makedirs(str(folder), exist_ok=True)
    return os.path.join(str(folder), f"{safe}.json.gz")
