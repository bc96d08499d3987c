"""The maximum achievable matmul rate per precision (MAMF), found by a shape search that
converges in seconds (`matmul_search`), L2 flushed between iterations, random data, result
checked.

The winner is measured on every GPU at once in two regimes. Burst: after an idle pause,
mamf-finder's protocol (50 warm-up + 100 timed iterations, 256 MiB written between them as its
cache flush); its median is the figure, its mean (mamf-finder's headline statistic) and max are
kept beside it. The tensor-core precisions rank their leading shapes by that same measurement.
Sustained: past the power limiter's settling, as a job runs. Every precision's burst comes
before any sustained run, so no burst starts in the state a sustained run leaves.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from gpuaudit.bench.context import BenchContext, Profile
from gpuaudit.bench.matmul_search import (
    Shape,
    confirm,
    family,
    flops,
    leaders,
    rank_bursts,
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
    assert torch is not None  # torch found the CUDA devices
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        # Every precision's search and burst first, every sustained figure after: a sustained
        # run holds the GPU at its power limit for 0.6 s (quick) to 8 s (full), and the next
        # precision's search and burst would start in the state it left (on 2026-12-01 fp16,
        # measured right after bf16's sustained run, read ~100 TFLOP/s below bf16 at the same
        # shapes; the two have the same tensor-core peak).
        chosen = []
        for prec in PRECISIONS.values():
            choice = yield from _burst_phase(ctx, torch, prec)
            if choice is not None:
                chosen.append(choice)
        for choice in chosen:
            yield from _sustained_phase(ctx, torch, choice)
    finally:
        _tf32(torch, old)


@dataclass(frozen=True)
class _Choice:
    """A precision's chosen shape and what its records share."""

    prec: Precision
    shape: Shape
    params: Params


def _supported(ctx: BenchContext, prec: Precision) -> Iterator[Measurement]:
    """Skipped records when the GPU is too old for `prec`."""
    first = ctx.devices[0][0]
    if first.capability < prec.min_capability:
        for d, i in ctx.devices:
            yield skipped(SUITE, prec.name, prec.unit,
                          f"needs compute capability {'.'.join(map(str, prec.min_capability))}"
                          f"+ (this GPU has {'.'.join(map(str, d.capability))})", gpu_index=i)


def _burst_phase(ctx: BenchContext, torch: Any, prec: Precision
                 ) -> Generator[Measurement, None, _Choice | None]:
    """Search the shape on the first GPU, rank the leaders, measure the burst on every GPU."""
    unsupported = list(_supported(ctx, prec))
    if unsupported:
        yield from unsupported
        return None
    devices = [d for d, _ in ctx.devices]
    first = devices[0]
    _tf32(torch, prec.name == "tf32")
    # fp32 and fp64 (no tensor cores, or few) take 15x longer a shape; quick times the light
    # families and two squares for them, and one hill-climb round from the best (on the H200
    # their best shapes were wave layouts and what one round reaches from them: 1536×2816×8192,
    # 2816×3072×6144).
    light = prec.slow and ctx.profile is Profile.QUICK
    squares = ctx.pick([2048, 4096] if light else [2048, 4096, 8192],
                       [2048, 4096, 6144, 8192, 12288, 16384],
                       [1024, 2048, 4096, 6144, 8192, 12288, 16384, 20480])
    ctx.step(f"matmul {prec.name}: shape search")
    gen = torch.Generator(device=f"cuda:{first.cuda_index}").manual_seed(1234)
    # mamf-finder's 256 MiB between iterations everywhere: the share of each iteration spent
    # flushing (up to ~40 % for a one-wave shape) lowers its average power, so the brief
    # timing sees the same duty cycle as the burst it stands in for.
    flush = L2Flush(first, FLUSH_BYTES)
    idle_s = ctx.pick(0.2, 0.5, 1.0)
    sms = first.multiprocessor_count

    def on_first(shape: Shape, timing: Callable[[_Operands], list[float]]
                 ) -> list[float] | None:
        """`timing`'s per-iteration times of `shape` on the first GPU; None when it does not
        fit."""
        try:
            with torch.cuda.device(first.cuda_index):
                return timing(_Operands(torch, prec, shape, f"cuda:{first.cuda_index}", gen))
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            return None

    def iterations(iters: int, warmup: int) -> Callable[[_Operands], list[float]]:
        return lambda ops: cuda_times_ms(ops.run, iters=iters, warmup=warmup, flush=flush)

    def brief(shape: Shape) -> float | None:
        times = on_first(shape, iterations(ctx.pick(10, 20, 30), 3))
        return statistics.median(rate(flops(shape), times, 1e12)) if times else None

    ranked_times: dict[Shape, list[float]] = {}  # each leader's burst, as ranked

    def ranking_burst(shape: Shape) -> list[float] | None:
        got = on_first(shape, lambda ops: _burst_times(torch, ops, idle_s, flush))
        if got:
            ranked_times[shape] = got
        return got

    try:
        _, tried = search(brief, squares, prec.max_side,
                          refine_rounds=ctx.pick(1 if light else 3, 6, 10),
                          seeds=wave_shapes(sms, prec.max_side), stretch=not light)
        ctx.step(f"matmul {prec.name}: re-timing the leading shapes")
        chosen = leaders(tried, ctx.pick(3, 6, 8) if prec.slow else ctx.pick(3, 5, 8),
                         lambda s: family(s, sms, prec.max_side))
        if prec.slow:
            # fp32 and fp64 run ~15x slower than the tensor-core precisions: a burst of theirs
            # takes seconds, so their leaders get short interleaved rounds instead
            warm, timed = ctx.pick((5, 15), (10, 30), (20, 50))
            best, ranked = confirm(lambda s: on_first(s, iterations(timed, warm)), chosen,
                                   ctx.pick(2, 3, 4))
            ranked_by = "interleaved re-timing rounds"
        else:
            best, ranked = rank_bursts(ranking_burst, chosen)
            ranked_by = "burst after the idle pause"
    except (RuntimeError, TypeError) as exc:
        for _, i in ctx.devices:
            yield skipped(SUITE, prec.name, prec.unit,
                          f"{prec.name} matmul failed: {reason_of(exc)}", gpu_index=i)
        return None
    finally:
        flush.buf = None
    ctx.step(f"matmul {prec.name}: {best[0]}×{best[1]}×{best[2]} on {len(devices)} GPU(s)")
    work = flops(best)

    def burst(d: CudaDevice) -> tuple[list[float], bool, float]:
        ops = _operands(torch, prec, best, d)
        times = _burst_times(torch, ops, idle_s, L2Flush(d, FLUSH_BYTES))
        ok, err = ops.check()
        return times, ok, err

    # On one GPU the winner's burst is the one it was ranked by: the same protocol (the idle
    # pause, then mamf-finder's 50 + 100 iterations) at the same shape, so it is not measured
    # a second time. Several GPUs are measured again, all at once (a box's GPUs share power
    # and cooling); fp32 and fp64 were ranked by shorter rounds and are measured again too.
    reuse = len(devices) == 1 and best in ranked_times
    params: Params = {"m": best[0], "n": best[1], "k": best[2], "shapes_tried": len(tried),
                      "leaders": _leaders_text(ranked), "leaders_ranked_by": ranked_by,
                      "burst_of": "the winner's ranking burst" if reuse else
                      "a burst of the winner on every GPU at once", "device": "cuda"}

    def reused(d: CudaDevice) -> tuple[list[float], bool, float]:
        ok, err = _operands(torch, prec, best, d).check()
        return ranked_times[best], ok, err

    for (_, i), result in zip(ctx.devices, on_each(devices, reused if reuse else burst),
                              strict=True):
        if isinstance(result, BaseException):
            yield skipped(SUITE, f"{prec.name}_burst", prec.unit, reason_of(result), gpu_index=i)
            continue
        times, ok, err = result
        spec = ctx.spec(i)
        yield measure(SUITE, f"{prec.name}_burst", prec.unit, rate(work, times, 1e12),
                      warmup=50, spec_value=spec.peak(prec.spec_key) if spec else None,
                      gpu_index=i, verified=ok,
                      params={**params, "relative_error": float(f"{err:.3g}"),
                              "regime": "burst", **_mean_max(work, times)},
                      notes=("after an idle pause, before the power limit settles, as "
                             "mamf-finder measures (its headline is the mean: params.mean); "
                             "jobs get the sustained figure",))
    torch.cuda.empty_cache()
    return _Choice(prec, best, params)


def _sustained_phase(ctx: BenchContext, torch: Any, choice: _Choice) -> Iterator[Measurement]:
    """The chosen shape on every GPU at once, past the power limiter's settling, as a job runs."""
    prec, best = choice.prec, choice.shape
    devices = [d for d, _ in ctx.devices]
    _tf32(torch, prec.name == "tf32")
    ctx.step(f"matmul {prec.name}: sustained at {best[0]}×{best[1]}×{best[2]}")
    warmup = ctx.pick(10, 25, 50)

    def sustained(d: CudaDevice) -> tuple[list[float], bool, float]:
        ops = _operands(torch, prec, best, d)
        # quick: ≥ 200 ms of warm-up, ten times the power limiter's response (tens of ms),
        # then ≥ 200 ms timed
        times = cuda_times_ms(ops.run, iters=ctx.pick(30, 100, 200), warmup=warmup,
                              flush=L2Flush(d), min_warmup_ms=ctx.pick(200, 1000, 5000),
                              min_timed_ms=ctx.pick(200, 1000, 3000))
        ok, err = ops.check()
        return times, ok, err

    for (_, i), result in zip(ctx.devices, on_each(devices, sustained), strict=True):
        if isinstance(result, BaseException):
            yield skipped(SUITE, prec.name, prec.unit, reason_of(result), gpu_index=i)
            continue
        times, ok, err = result
        spec = ctx.spec(i)
        work = flops(best)
        yield measure(SUITE, prec.name, prec.unit, rate(work, times, 1e12), warmup=warmup,
                      spec_value=spec.peak(prec.spec_key) if spec else None, gpu_index=i,
                      params={**choice.params, "relative_error": float(f"{err:.3g}"),
                              "regime": "sustained", **_mean_max(work, times)},
                      verified=ok)
    torch.cuda.empty_cache()


def _burst_times(torch: Any, ops: _Operands, idle_s: float, flush: L2Flush) -> list[float]:
    """The burst figure's iterations (ms), as each leader was ranked: `idle_s` with nothing
    running (the power limiter lets the clocks back up), then mamf-finder's 50 + 100 iterations
    with its 256 MiB flush, mostly before the limiter pulls the clocks down again."""
    torch.cuda.synchronize()
    time.sleep(idle_s)
    return cuda_times_ms(ops.run, iters=100, warmup=50, flush=flush)


def _operands(torch: Any, prec: Precision, shape: Shape, d: CudaDevice) -> _Operands:
    """The same random operands on every call for a GPU (seeded by its index)."""
    g = torch.Generator(device=f"cuda:{d.cuda_index}").manual_seed(99 + d.cuda_index)
    return _Operands(torch, prec, shape, f"cuda:{d.cuda_index}", g)


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
