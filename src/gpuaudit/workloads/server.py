"""The model behind the dynamic-batching loop: one CUDA graph per batch bucket (powers of two
up to the largest batch), request payloads copied from pinned host memory, results ready
(synchronized) before the batch counts as served. On the CPU: the eager model, padded alike."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from gpuaudit.bench.context import BenchContext, Profile
from gpuaudit.bench.stats import skipped
from gpuaudit.model import Measurement
from gpuaudit.workloads.infer import Prepared, _capture, prepare
from gpuaudit.workloads.plan import Target, opt_float, opt_int
from gpuaudit.workloads.precision import float32_matmuls
from gpuaudit.workloads.records import single
from gpuaudit.workloads.serving import (
    BatchPolicy,
    QpsSearch,
    RealClock,
    find_max_qps,
    requests_for,
    serve,
    unit_arrivals,
)
from gpuaudit.workloads.stats import gpus_needed
from gpuaudit.workloads.timing import is_cuda

SUITE = "infer"
# MLPerf Inference's Server-scenario latency bound for ResNet-50 (15 ms at the 99th
# percentile); the CPU's tiny stand-in gets a bound its speed can meet.
GPU_SLO_MS, CPU_SLO_MS = 15.0, 250.0
DEFAULT_TARGET_QPS = 100_000.0


def buckets(max_batch: int) -> list[int]:
    """Batch sizes with a graph of their own: 1, 2, 4, … below max_batch, and max_batch."""
    out = [b for b in (2**i for i in range(20)) if b < max_batch]
    return [*out, max_batch]


def bucket_for(k: int, sizes: list[int]) -> int:
    return next(b for b in sizes if b >= k)


class Server:
    """service(k): run one batch of k requests and wait for its results."""

    def __init__(self, p: Prepared, max_batch: int) -> None:
        import torch

        self.torch, self.p, self.cuda = torch, p, is_cuda(p.device)
        self.sizes = buckets(max_batch)
        (self.static,) = p.inputs(max_batch)[:1]  # the model's (single) input, on device
        self.host = self.static.cpu().pin_memory() if self.cuda else self.static.clone()
        self.calls: dict[int, Callable[[], Any]] = {}
        with torch.no_grad(), float32_matmuls(torch, tf32=p.precision != "fp32"):
            for b in self.sizes:
                view = self.static[:b]
                def fn(v=view) -> Any:
                    return (p.model(v))
                self.calls[b] = _capture(torch, fn) if self.cuda else fn

    def __call__(self, k: int) -> None:
        b = bucket_for(k, self.sizes)
        self.static[:k].copy_(self.host[:k], non_blocking=True)
        with self.torch.no_grad():
            self.calls[b]()
        if self.cuda:
            self.torch.cuda.synchronize(self.p.device)

    def batch_time_s(self, k: int, reps: int = 5) -> float:
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            self(k)
            times.append(time.perf_counter() - t0)
        return min(times)


def run_serving(ctx: BenchContext, tgt: Target) -> Iterator[Measurement]:
    import torch

    from gpuaudit.workloads.memory import release

    on_gpu = tgt.capability is not None
    name = str(ctx.options.get("serving_model") or ("resnet50" if on_gpu else "resnet-tiny"))
    precision = "bf16" if on_gpu else "fp32"
    slo_s = opt_float(ctx, "slo_ms", GPU_SLO_MS if on_gpu else CPU_SLO_MS) / 1e3
    max_batch = opt_int(ctx, "max_batch", 128 if on_gpu else 8)
    wait_s = opt_float(ctx, "max_wait_ms", 2.0 if on_gpu else 20.0) / 1e3
    target = opt_float(ctx, "target_qps", DEFAULT_TARGET_QPS)
    duration = opt_float(ctx, "serving_seconds", ctx.pick(1.0, 1.5, 3.0) if on_gpu else 0.5)
    minimum = opt_int(ctx, "serving_min_requests", 600 if on_gpu else 60)
    prefix = f"{name}/{precision}/serving"
    base = {"model": name, "precision": precision, "slo_ms": slo_s * 1e3,
            "max_batch": max_batch, "max_wait_ms": wait_s * 1e3, "device": tgt.label,
            "service": "CUDA graph per batch bucket" if on_gpu else "eager"}
    ctx.step(f"serving {name}: preparing")
    try:
        held = [Server(prepare(name, precision, tgt.device), max_batch)]  # freed after
        capacity = max_batch / held[0].batch_time_s(max_batch)
    except Exception as exc:
        from gpuaudit.bench.stats import reason_of

        release(torch, tgt.device)
        yield skipped(SUITE, f"{prefix}/max_qps", "QPS", reason_of(exc),
                      gpu_index=tgt.gpu_index, params=base)
        return
    policy = BatchPolicy(max_batch, wait_s)
    unit = unit_arrivals(requests_for(capacity, duration, minimum), seed=0)
    results = {}

    def p99_at(qps: float) -> float:
        ctx.step(f"serving {name}: {qps:,.0f} QPS offered")
        n = requests_for(qps, duration, minimum)
        arrivals = [t / qps for t in unit[:n]] if n <= len(unit) else \
            [t / qps for t in unit_arrivals(n, seed=0)]
        r = serve(arrivals, policy, held[0], RealClock(), offered_qps=qps)
        results[qps] = r
        return r.p99_s

    try:
        found: QpsSearch = find_max_qps(p99_at, slo_s, max(1.0, 0.05 * capacity), capacity,
                                        rel_tol=ctx.pick(0.05, 0.03, 0.02),
                                        max_trials=ctx.pick(6, 9, 12))
    finally:
        held.clear()
        release(torch, tgt.device)
    trials = "; ".join(f"{t.qps:,.0f}→{t.p99_s * 1e3:.2f} ms" for t in found.trials)
    best = results.get(found.max_qps)
    params = {**base, "capacity_qps": round(capacity, 1), "trials": len(found.trials),
              "p99_ms": round(best.p99_s * 1e3, 3) if best else None,
              "p50_ms": round(best.p50_s * 1e3, 3) if best else None,
              "mean_batch": round(best.mean_batch, 2) if best else None,
              "achieved_qps": round(best.achieved_qps, 1) if best else None,
              "requests": len(best.latencies_s) if best else None}
    notes = (f"Poisson arrivals, p99 ≤ SLO searched by bisection: {trials}",)
    yield single(SUITE, f"{prefix}/max_qps", "QPS", found.max_qps, gpu_index=tgt.gpu_index,
                 statistic="search", notes=notes, params=params)
    need = gpus_needed(target, found.max_qps)
    if need is None:
        yield skipped(SUITE, f"{prefix}/gpus_needed", "GPUs",
                      f"no load met the {slo_s * 1e3:g} ms p99 SLO", gpu_index=tgt.gpu_index,
                      params={**base, "target_qps": target})
    else:
        yield single(SUITE, f"{prefix}/gpus_needed", "GPUs", float(need),
                     gpu_index=tgt.gpu_index, statistic="computed",
                     notes=("one replica per GPU, each at the max QPS measured here",),
                     params={**base, "target_qps": target,
                              "per_gpu_qps": round(found.max_qps, 1)})


def profile_parts(profile: Profile) -> tuple[str, ...]:
    return ("latency",) if profile is Profile.QUICK else ("latency", "serving")
