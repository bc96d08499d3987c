"""The maximum achievable matmul rate per precision (MAMF), found by a shape search that
converges in seconds (`matmul_search`), L2 flushed between iterations, random data, result
checked.

The winner is measured on every GPU at once in two regimes. Burst: after an idle pause,
mamf-finder's protocol (50 warm-up + 100 timed iterations, 256 MiB written between them as its
cache flush); its median is the figure, its mean (mamf-finder's headline statistic) and max are
kept beside it. Sustained: past the power limiter's settling, as a job runs.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.matmul_search import (
    Shape,
    confirm,
    family,
    flops,
    leaders,
    search,
    wave_shapes,
)
from gpuaudit.bench.stats import measure, reason_of, skipped
from gpuaudit.bench.timing import L2Flush, cpu_times_ms, cuda_times_ms, on_each, rate
from gpuaudit.hw.torch_env import CudaDevice, import_torch, why_no_cuda
from gpuaudit.model import Measurement, Params

SUITE = "matmul"
FLUSH_BYTES = 256 << 20  # mamf-finder's cache flush between timed iterations


@dataclass(frozen=True)
class Precision:
    name: str
    spec_key: str  # the GpuSpec.peak_tflops field it is judged against
    unit: str
    tolerance: float  # largest acceptable ‖C − ref‖ / ‖ref‖ on checked rows
    min_capability: tuple[int, int] = (0, 0)
    max_side: int = 16384  # cap per dimension (fp64 is slow: keep its search short)
    slow: bool = False  # no tensor cores (fp32) or few (fp64): a shorter re-timing


PRECISIONS = {
    "fp64": Precision("fp64", "fp64_tensor", "TFLOP/s", 1e-12, max_side=8192, slow=True),
    "fp32": Precision("fp32", "fp32", "TFLOP/s", 1e-5, max_side=8192, slow=True),
    "tf32": Precision("tf32", "tf32", "TFLOP/s", 5e-3, (8, 0)),
    "bf16": Precision("bf16", "bf16", "TFLOP/s", 2e-2, (8, 0)),
    "fp16": Precision("fp16", "fp16", "TFLOP/s", 1e-2, (7, 0)),
    "fp8": Precision("fp8", "fp8", "TFLOP/s", 5e-2, (8, 9)),
    "int8": Precision("int8", "int8", "TOP/s", 0.0, (7, 5)),
}


class _Operands:
    """Random operands of one precision on one device, and the product to time."""

    def __init__(self, torch: Any, prec: Precision, shape: Shape, device: str,
                 gen: Any) -> None:
        m, n, k = shape
        self.torch, self.prec, self.shape = torch, prec, shape
        base = torch.float64 if prec.name == "fp64" else torch.float32
        if prec.name == "int8":
            self.a = torch.randint(-8, 8, (m, k), dtype=torch.int8, device=device, generator=gen)
            # _int_mm wants B column-major: make it (n, k) and transpose.
            self.b = torch.randint(-8, 8, (n, k), dtype=torch.int8, device=device,
                                   generator=gen).t()
            self.run = lambda: torch._int_mm(self.a, self.b)
            return
        a = torch.randn(m, k, dtype=base, device=device, generator=gen)
        b = torch.randn(n, k, dtype=base, device=device, generator=gen)
        if prec.name == "fp8":
            self.a = a.to(torch.float8_e4m3fn)
            self.b = b.to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm needs
            one = torch.ones((), device=device)
            self.run = lambda: torch._scaled_mm(self.a, self.b, scale_a=one, scale_b=one,
                                                out_dtype=torch.bfloat16)
            return
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(prec.name, base)
        self.a, self.b = a.to(dtype), b.to(dtype).t()
        self.run = lambda: torch.mm(self.a, self.b)

    def check(self, rows: int = 16) -> tuple[bool, float]:
        """Compare `rows` rows of the product with a float64 product of the same inputs."""
        torch = self.torch
        c = self.run()
        idx = torch.randperm(self.a.shape[0], device=self.a.device)[:rows]
        ref = self.a[idx].to(torch.float64) @ self.b.to(torch.float64)
        got = c[idx].to(torch.float64)
        err = (torch.linalg.norm(got - ref) / torch.linalg.norm(ref)).item()
        return bool(math.isfinite(err) and err <= self.prec.tolerance), err


def _tf32(torch: Any, on: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def run(ctx: BenchContext) -> Iterator[Measurement]:
    torch = import_torch()
    if not ctx.on_gpu:
        if torch is None:
            for p in PRECISIONS.values():
                yield skipped(SUITE, p.name, p.unit, why_no_cuda())
            return
        yield from _run_cpu(ctx, torch)
        return
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        for prec in PRECISIONS.values():
            yield from _run_precision(ctx, torch, prec)
    finally:
        _tf32(torch, old)


def _run_precision(ctx: BenchContext, torch: Any, prec: Precision) -> Iterator[Measurement]:
    devices = [d for d, _ in ctx.devices]
    index = {d.cuda_index: i for d, i in ctx.devices}
    first = devices[0]
    if first.capability < prec.min_capability:
        for d, i in ctx.devices:
            yield skipped(SUITE, prec.name, prec.unit,
                          f"needs compute capability {'.'.join(map(str, prec.min_capability))}"
                          f"+ (this GPU has {'.'.join(map(str, d.capability))})", gpu_index=i)
        return
    _tf32(torch, prec.name == "tf32")
    iters = ctx.pick(30, 100, 200)
    squares = ctx.pick([2048, 4096, 8192, 16384], [2048, 4096, 6144, 8192, 12288, 16384],
                       [1024, 2048, 4096, 6144, 8192, 12288, 16384, 20480])
    ctx.step(f"matmul {prec.name}: shape search")
    gen = torch.Generator(device=f"cuda:{first.cuda_index}").manual_seed(1234)
    flush = L2Flush(first)
    idle_s = ctx.pick(0.2, 0.5, 1.0)
    sms = first.multiprocessor_count

    def on_first(shape: Shape, iters: int, warmup: int, l2: L2Flush) -> list[float] | None:
        """Per-iteration times of `shape` on the first GPU; None when it does not fit."""
        try:
            with torch.cuda.device(first.cuda_index):
                ops = _Operands(torch, prec, shape, f"cuda:{first.cuda_index}", gen)
                return cuda_times_ms(ops.run, iters=iters, warmup=warmup, flush=l2)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            return None

    def brief(shape: Shape) -> float | None:
        times = on_first(shape, ctx.pick(10, 20, 30), 3, flush)
        return statistics.median(rate(flops(shape), times, 1e12)) if times else None

    # One round of the leaders' re-timing, in mamf-finder's regime (256 MiB flush between
    # iterations): (warm-up, timed) per round, rounds interleaved across the leaders.
    warm, timed = ctx.pick((5, 15), (10, 30), (20, 50))
    big_flush = L2Flush(first, FLUSH_BYTES)

    def again(shape: Shape) -> list[float] | None:
        return on_first(shape, timed, warm, big_flush)

    try:
        _, tried = search(brief, squares, prec.max_side, refine_rounds=ctx.pick(3, 6, 10),
                          seeds=wave_shapes(sms, prec.max_side))
        ctx.step(f"matmul {prec.name}: re-timing the leading shapes")
        # fp32 and fp64 run ~15x slower than the tensor-core precisions: fewer re-timings
        chosen = leaders(tried, ctx.pick(3, 6, 8) if prec.slow else ctx.pick(5, 8, 12),
                         lambda s: family(s, sms, prec.max_side))
        best, confirmed = confirm(again, chosen, ctx.pick(2, 3, 4) if prec.slow
                                  else ctx.pick(3, 4, 5))
    except (RuntimeError, TypeError) as exc:
        for _, i in ctx.devices:
            yield skipped(SUITE, prec.name, prec.unit,
                          f"{prec.name} matmul failed: {reason_of(exc)}",
                          gpu_index=i)
        return
    finally:
        big_flush.buf = None
    ctx.step(f"matmul {prec.name}: {best[0]}×{best[1]}×{best[2]} on {len(devices)} GPU(s)")
    work = flops(best)

    def final(d: CudaDevice) -> tuple[list[float], list[float], bool, float]:
        g = torch.Generator(device=f"cuda:{d.cuda_index}").manual_seed(99 + d.cuda_index)
        ops = _Operands(torch, prec, best, f"cuda:{d.cuda_index}", g)
        # Burst: after an idle pause, mamf-finder's 50 + 100 iterations and its 256 MiB flush,
        # mostly before the power limiter pulls the clocks down. Sustained: past that
        # settling, as a job runs.
        time.sleep(idle_s)
        burst = cuda_times_ms(ops.run, iters=100, warmup=50, flush=L2Flush(d, FLUSH_BYTES))
        l2 = L2Flush(d)
        sustained = cuda_times_ms(ops.run, iters=iters, warmup=ctx.pick(10, 25, 50), flush=l2,
                                  min_warmup_ms=ctx.pick(300, 1000, 5000),
                                  min_timed_ms=ctx.pick(300, 1000, 3000))
        ok, err = ops.check()
        return sustained, burst, ok, err

    for d, result in zip(devices, on_each(devices, final), strict=True):
        i = index[d.cuda_index]
        spec = ctx.spec(i)
        if isinstance(result, BaseException):
            yield skipped(SUITE, prec.name, prec.unit, reason_of(result), gpu_index=i)
            continue
        sustained_ms, burst_ms, ok, err = result
        params: Params = {"m": best[0], "n": best[1], "k": best[2], "shapes_tried": len(tried),
                          "leaders": _leaders_text(confirmed),
                          "relative_error": float(f"{err:.3g}"), "device": "cuda"}
        peak = spec.peak(prec.spec_key) if spec else None
        yield measure(SUITE, prec.name, prec.unit, rate(work, sustained_ms, 1e12),
                      warmup=ctx.pick(10, 25, 50), spec_value=peak, gpu_index=i,
                      params={**params, "regime": "sustained", **_mean_max(work, sustained_ms)},
                      verified=ok)
        yield measure(SUITE, f"{prec.name}_burst", prec.unit, rate(work, burst_ms, 1e12),
                      warmup=50, spec_value=peak, gpu_index=i,
                      params={**params, "regime": "burst", **_mean_max(work, burst_ms)},
                      verified=ok,
                      notes=("after an idle pause, before the power limit settles, as "
                             "mamf-finder measures (its headline is the mean: params.mean); "
                             "jobs get the sustained figure",))
    flush.buf = None
    torch.cuda.empty_cache()


def _mean_max(work: float, times_ms: list[float]) -> Params:
    """mamf-finder's other statistics of the same iterations: FLOPs over the mean time, and
    over the shortest."""
    valid = [t for t in times_ms if t > 0]
    if not valid:
        return {}
    mean_s, min_s = statistics.fmean(valid) / 1e3, min(valid) / 1e3
    return {"mean": float(f"{work / mean_s / 1e12:.5g}"),
            "max": float(f"{work / min_s / 1e12:.5g}")}


def _leaders_text(rates: dict[Shape, float]) -> str:
    """The re-timed leaders and their mean rates, best first (why this shape won)."""
    best = sorted(rates, key=rates.__getitem__, reverse=True)
    return "; ".join(f"{m}x{n}x{k} {rates[(m, n, k)]:.1f}" for m, n, k in best)


def _run_cpu(ctx: BenchContext, torch: Any) -> Iterator[Measurement]:
    """Small CPU matmuls (fp32, fp64): the path CI takes, and a figure for CPU-only hosts."""
    side = ctx.pick(512, 1024, 2048)
    gen = torch.Generator().manual_seed(1234)
    for prec in PRECISIONS.values():
        if prec.name not in ("fp32", "fp64"):
            yield skipped(SUITE, prec.name, prec.unit, f"{prec.name} matmul needs a GPU: "
                          f"{why_no_cuda()}")
            continue
        ctx.step(f"matmul {prec.name} on CPU")
        ops = _Operands(torch, prec, (side, side, side), "cpu", gen)
        times = cpu_times_ms(ops.run, iters=ctx.pick(5, 10, 20), warmup=1)
        ok, err = ops.check()
        yield measure(SUITE, prec.name, prec.unit, rate(2.0 * side ** 3, times, 1e12),
                      warmup=1, params={"m": side, "n": side, "k": side, "device": "cpu",
                                        "relative_error": float(f"{err:.3g}")}, verified=ok)
