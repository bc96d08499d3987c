"""DDP scaling: the same training step on 1, 2, 4, … GPUs of this box (one process per GPU,
`gpuaudit.workloads.ddp_worker`, started like torchrun), the per-GPU batch fixed (weak
scaling), efficiency = rate on N / (N × rate on 1); then gradient accumulation on all of them
(one all-reduce every `accum` micro-batches)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.stats import measure, skipped
from gpuaudit.model import Measurement, Params
from gpuaudit.percentile import percentile
from gpuaudit.workloads.plan import opt_float, opt_int
from gpuaudit.workloads.precision import TrainMode
from gpuaudit.workloads.stats import rates, scaling_efficiency

SUITE = "train"


def gpu_counts(n: int) -> list[int]:
    """1, 2, 4, … below n, and n."""
    counts = [c for c in (2**i for i in range(10)) if c < n]
    return [*counts, n] if n >= 1 else []


def scaling_model(ctx: BenchContext, plan: list[tuple[str, list[TrainMode]]]) -> str:
    chosen = ctx.options.get("scaling_model")
    if chosen:
        return str(chosen)
    for name, _ in plan:
        if name.startswith("gpt") or ":" in name:
            return name
    return "gpt-124m" if ctx.on_gpu else "gpt-tiny"


def run_scaling(ctx: BenchContext, plan: list[tuple[str, list[TrainMode]]]
                ) -> Iterator[Measurement]:
    from gpuaudit.bench.collectives import Workers
    from gpuaudit.workloads.ddp_worker import MARKER

    model = scaling_model(ctx, plan)
    mode = str(ctx.options.get("scaling_mode") or ("bf16+compile" if ctx.on_gpu else "fp32"))
    n_max = len(ctx.devices) if ctx.on_gpu else opt_int(ctx, "cpu_ranks", 2)
    base: Params = {"model": model, "mode": mode, "device": "cuda" if ctx.on_gpu else "cpu"}
    if n_max < 2:
        yield skipped(SUITE, f"{model}/ddp/scaling", "%", "needs 2 or more GPUs", params=base)
        return
    accum = opt_int(ctx, "accum", 4)
    config: dict[str, Any] = {
        "model": model, "mode": mode, "batch_size": ctx.options.get("batch_size"),
        "steps": opt_int(ctx, "steps", ctx.pick(10, 20, 30) if ctx.on_gpu else 3),
        "warmup_steps": opt_int(ctx, "warmup_steps", 3 if ctx.on_gpu else 1),
        "min_warmup_s": opt_float(ctx, "min_warmup_s", ctx.pick(0.5, 1.0, 2.0)
                                  if ctx.on_gpu else 0.0),
        "backend": "nccl" if ctx.on_gpu else "gloo",
        "compile_backend": str(ctx.options.get("compile_backend", "inductor")),
    }
    extra = {}
    if not ctx.on_gpu:
        extra["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")
        if sys.platform.startswith("linux"):
            extra["GLOO_SOCKET_IFNAME"] = os.environ.get("GLOO_SOCKET_IFNAME", "lo")
    one_rate: float | None = None
    for n in gpu_counts(n_max):
        cfg = {**config, "accum": [1, accum] if n == n_max and accum > 1 else [1],
               "cuda_indices": [d.cuda_index for d, _ in ctx.devices[:n]] or None}
        ctx.step(f"DDP {model} {mode} on {n} {'GPU' if ctx.on_gpu else 'rank'}"
                 + ("s" if n > 1 else ""))
        got: set[int] = set()
        workers = Workers(cfg, n, timeout_s=ctx.timeout_s, extra_env=extra,
                          module="gpuaudit.workloads.ddp_worker", marker=MARKER)
        complete = False
        try:
            for event in workers.events():
                if event.get("event") == "done":
                    complete = True
                    break
                if event.get("event") != "result":
                    continue
                got.add(int(event["accum"]))
                rate, figures = _figures(model, mode, n, event, one_rate, base)
                if n == 1 and int(event["accum"]) == 1:
                    one_rate = rate
                yield from figures
            failure = workers.failure
        finally:
            workers.close(grace_s=10.0 if complete else 0.0)
        for a in cfg["accum"]:
            if a not in got:
                yield skipped(SUITE, _name(model, n, a, "throughput"), "samples/s",
                              failure or "the workers stopped early",
                              params={**base, "gpus": n, "accum": a})


def _name(model: str, n: int, accum: int, figure: str) -> str:
    return f"{model}/ddp/n{n}" + (f"/accum{accum}" if accum > 1 else "") + f"/{figure}"


def _figures(model: str, mode: str, n: int, event: dict[str, Any], one_rate: float | None,
             base: Params) -> tuple[float, list[Measurement]]:
    accum, batch = int(event["accum"]), int(event["batch"])
    times = [float(t) for t in event["times_s"]]
    samples_per_step = batch * n * accum
    per_step = rates(samples_per_step, times)
    p50 = percentile(times, 50)
    rate = percentile(per_step, 50)  # the throughput figure's value
    params: Params = {**base, "gpus": n, "accum": accum, "batch_per_gpu": batch,
                      "backend": str(event.get("backend")),
                      "warmup_s": round(float(event["warmup_s"]), 2),
                      "step_p50_ms": round(p50 * 1e3, 3),
                      "step_p99_ms": round(percentile(times, 99) * 1e3, 3)}
    out = [measure(SUITE, _name(model, n, accum, "throughput"), "samples/s", per_step,
                   warmup=int(event["warmup_steps"]), params=params)]
    tokens = event.get("tokens_per_sample")
    if tokens:
        out.append(measure(SUITE, _name(model, n, accum, "tokens"), "tokens/s",
                           rates(samples_per_step * int(tokens), times),
                           warmup=int(event["warmup_steps"]), params=params))
    if one_rate:
        eff = [100 * scaling_efficiency(r, n, one_rate) for r in per_step]
        out.append(measure(SUITE, _name(model, n, accum, "scaling"), "%", eff,
                           warmup=int(event["warmup_steps"]), spec_value=100.0,
                           notes=("weak scaling: the same per-GPU batch; 100% = N × the "
                                  "1-GPU rate" + (f", accumulating {accum} micro-batches per "
                                                  "all-reduce" if accum > 1 else ""),),
                           params={**params, "one_gpu_rate": round(one_rate, 2)}))
    return rate, out
