"""`gpuaudit bench infer`: latency and throughput vs batch per model, precision and mode, the
fastest mode at the smallest and largest batch, then max QPS under a p99 SLO."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

from gpuaudit.bench.context import BenchContext, Profile
from gpuaudit.bench.stats import measure, skipped
from gpuaudit.model import Measurement, Params
from gpuaudit.workloads.models import PRESETS, ResnetPreset, check_model
from gpuaudit.workloads.plan import Target, opt_float, opt_list, parts, peak_tflops, target
from gpuaudit.workloads.precision import INFER_PRECISIONS, check_precisions, unsupported
from gpuaudit.workloads.records import single
from gpuaudit.workloads.stats import p50_p90_p99

SUITE = "infer"
PARTS = {Profile.QUICK: ("latency",), Profile.STANDARD: ("latency", "serving"),
         Profile.FULL: ("latency", "serving")}
GPU_MODELS = {  # model: (batches, precisions, sequence length for transformers)
    "resnet50": ((1, 8, 32, 128, 256), ("fp32", "tf32", "fp16", "bf16", "fp8", "int8"), None),
    "bert-base": ((1, 8, 32, 128), ("fp32", "bf16", "fp16", "fp8", "int8"), 128),
    "gpt-124m": ((1, 8), ("fp32", "bf16", "fp8", "int8"), 1024),
}
# Precisions swept at every batch; the others at the smallest, a middle and the largest.
FULL_SWEEP = ("bf16", "fp8")
CPU_MODELS = {
    "resnet-tiny": ((1, 8), ("fp32", "bf16", "fp8"), None),
    "bert-tiny": ((1, 8), ("fp32", "bf16", "int8"), None),
    "gpt-tiny": ((1, 8), ("fp32", "int8"), None),
}
DEFAULT_BATCHES = (1, 8, 32)


COST = {"eager": 0, "cudagraph": 1, "compile": 2, "compile+cudagraph": 3, "max-autotune": 4}


def mode_plan(ctx: BenchContext, model: str, precision: str, batches: tuple[int, ...],
              on_gpu: bool) -> list[tuple[str, int]]:
    """(mode, batch) pairs, cheap ones first (a run cut short keeps the most figures).

    Eager and CUDA graphs at every batch for bf16 and fp8, at the smallest, a middle and the
    largest batch for the other precisions. Compiled modes cost tens of seconds of compilation
    each: for bf16 CNNs, `compile` at the largest batch, `compile+cudagraph` and then
    `max-autotune` (minutes of autotuning) at the smallest (standard); the full profile
    compiles every batch of bf16 and fp8 all three ways."""
    chosen = opt_list(ctx, "infer_modes")
    if ctx.profile is Profile.QUICK and chosen is None:
        return [("cudagraph" if on_gpu else "eager", batches[-1])]
    if chosen is not None:
        return [(m, b) for m in sorted(chosen, key=lambda m: COST.get(m, 9)) for b in batches]
    full = ctx.profile is Profile.FULL
    if precision not in FULL_SWEEP and not full and len(batches) > 3:
        batches = (batches[0], batches[len(batches) // 2], batches[-1])
    plan = [("eager", b) for b in batches]
    if not on_gpu:
        return plan
    plan += [("cudagraph", b) for b in batches]
    image = isinstance(PRESETS.get(model), ResnetPreset)
    if full and precision in FULL_SWEEP:
        plan += [(m, b) for m in ("compile", "compile+cudagraph", "max-autotune")
                 for b in batches]
    elif precision == "bf16" and image:
        plan += [("compile", batches[-1]), ("compile+cudagraph", batches[0]),
                 ("max-autotune", batches[0])]
    return plan


def run(ctx: BenchContext) -> Iterator[Measurement]:
    models = opt_list(ctx, "models")
    for name in models or ():
        check_model(name)
    precisions = check_precisions(opt_list(ctx, "precisions") or list(INFER_PRECISIONS))
    if importlib.util.find_spec("torch") is None:
        yield skipped(SUITE, "infer", "samples/s",
                      "torch is not installed (pip install 'gpuaudit[torch]')")
        return
    tgt = target(ctx)
    on_gpu = tgt.capability is not None
    chosen = parts(ctx, PARTS)
    table = GPU_MODELS if on_gpu else CPU_MODELS
    if models is None:
        if ctx.profile is Profile.QUICK:
            models = ["resnet50" if on_gpu else "resnet-tiny"]
        else:
            models = list(table)
    if "latency" in chosen:
        for name in models:
            batches, default_precisions, seq = table.get(name, (DEFAULT_BATCHES,
                                                                INFER_PRECISIONS, None))
            if ctx.profile is Profile.QUICK:
                batches, default_precisions = ((32,) if on_gpu else (8,)), \
                    (("bf16",) if on_gpu else ("fp32",))
            given = opt_list(ctx, "batches")
            if given:
                batches = tuple(int(b) for b in given)
            elif ctx.options.get("batch_size") is not None:
                batches = (int(ctx.options["batch_size"]),)  # type: ignore[call-overload]
            use = precisions if opt_list(ctx, "precisions") else list(default_precisions)
            if seq is None and ctx.options.get("seq_len") is not None:
                seq = int(ctx.options["seq_len"])  # type: ignore[call-overload]
            yield from _model(ctx, tgt, name, use, batches, seq)
    if "serving" in chosen:
        from gpuaudit.workloads.server import run_serving

        yield from run_serving(ctx, tgt)


def _model(ctx: BenchContext, tgt: Target, name: str, precisions: list[str],
           batches: tuple[int, ...], seq_len: int | None) -> Iterator[Measurement]:
    import torch

    from gpuaudit.workloads.infer import Unsupported, prepare, sweep
    from gpuaudit.workloads.memory import release

    on_gpu = tgt.capability is not None
    budget = opt_float(ctx, "infer_seconds", ctx.pick(0.5, 0.6, 1.5) if on_gpu else 0.2)
    backend = str(ctx.options.get("compile_backend", "inductor"))
    image = isinstance(PRESETS.get(name), ResnetPreset)
    for precision in precisions:
        base: Params = {"model": name, "precision": precision, "device": tgt.label}
        why = unsupported(precision, tgt.capability, training=False, image_model=image)
        if why:
            yield skipped(SUITE, f"{name}/{precision}/latency", "ms", why,
                          gpu_index=tgt.gpu_index, params=base)
            continue
        ctx.step(f"infer {name} {precision}: preparing")
        try:
            p = prepare(name, precision, tgt.device, seq_len=seq_len)
        except Unsupported as exc:
            yield skipped(SUITE, f"{name}/{precision}/latency", "ms", str(exc),
                          gpu_index=tgt.gpu_index, params=base)
            continue
        w = p.workload
        base = {**base, **{k: v for k, v in (w.params or {}).items()
                           if k in ("implementation", "seq_len", "image_size")}}
        peak = peak_tflops(ctx, tgt.gpu_index, precision)
        plan = mode_plan(ctx, name, precision, batches, on_gpu)
        if not on_gpu and ctx.profile is not Profile.QUICK:
            yield skipped(SUITE, f"{name}/{precision}/cudagraph/latency", "ms",
                          "CUDA graphs and compiled modes are measured on GPUs only",
                          params=base)
        modes_at: dict[int, int] = {}  # batch → modes measured
        best: dict[int, tuple[float, str]] = {}  # batch → (p50 latency, mode)
        top: dict[int, tuple[float, str]] = {}  # batch → (throughput, mode)
        try:
            for mode, batch, res in sweep(p, plan, ctx.step, budget_s=budget,
                                          backend=backend):
                prefix = f"{name}/{precision}/{mode}/b{batch}"
                params = {**base, "mode": mode, "batch": batch}
                if isinstance(res, str):
                    yield skipped(SUITE, f"{prefix}/latency", "ms", res,
                                  gpu_index=tgt.gpu_index, params=params)
                    continue
                p50, p90, p99 = p50_p90_p99(res.latencies_s)
                yield measure(SUITE, f"{prefix}/latency", "ms",
                              [t * 1e3 for t in res.latencies_s], warmup=3,
                              gpu_index=tgt.gpu_index, notes=tuple(res.notes),
                              params={**params, "p50_ms": round(p50 * 1e3, 4),
                                      "p90_ms": round(p90 * 1e3, 4),
                                      "p99_ms": round(p99 * 1e3, 4),
                                      "warmup_s": round(res.warmup_s, 2)})
                rate = sorted(res.throughput)[len(res.throughput) // 2]
                extra: Params = {}
                if w.forward_flops_per_sample:
                    tflops = rate * w.forward_flops_per_sample / 1e12
                    extra["model_tflops"] = float(f"{tflops:.4g}")
                    if peak:
                        extra["mfu_pct"] = float(f"{100 * tflops / peak:.4g}")
                yield measure(SUITE, f"{prefix}/throughput", "samples/s", res.throughput,
                              warmup=3, gpu_index=tgt.gpu_index, params={**params, **extra})
                modes_at[batch] = modes_at.get(batch, 0) + 1
                if batch not in best or p50 < best[batch][0]:
                    best[batch] = (p50, mode)
                if batch not in top or rate > top[batch][0]:
                    top[batch] = (rate, mode)
        finally:
            del p
            release(torch, tgt.device)
        several = {b for b, n in modes_at.items() if n > 1}
        yield from _winners(name, precision, {b: v for b, v in best.items() if b in several},
                            {b: v for b, v in top.items() if b in several}, base,
                            tgt.gpu_index)


def _winners(name: str, precision: str, best: dict[int, tuple[float, str]],
             top: dict[int, tuple[float, str]], base: Params, gpu_index: int | None
             ) -> Iterator[Measurement]:
    """Which mode won at the smallest batch (latency) and at the largest (throughput), among
    batches measured in more than one mode."""
    if best:
        b = min(best)
        lat, mode = best[b]
        yield single(SUITE, f"{name}/{precision}/b{b}/best_latency", "ms", lat * 1e3,
                     gpu_index=gpu_index, statistic="p50, best mode",
                     params={**base, "batch": b, "mode": mode})
        b = max(top)
        rate, mode = top[b]
        yield single(SUITE, f"{name}/{precision}/b{b}/best_throughput", "samples/s", rate,
                     gpu_index=gpu_index, statistic="median, best mode",
                     params={**base, "batch": b, "mode": mode})
