"""The maximum achievable matmul rate per precision (MAMF), found by a shape search that
converges in seconds, L2 flushed between iterations, random data, result checked.

Search: a few squares, then shapes stretched along each axis around the best square and the
long-K family, then a hill-climb of ±1/8 per dimension, each candidate timed briefly; the
leaders are timed again alike (after an idle pause) to choose, and the winner measured at
length on every GPU at once, as a burst and sustained. mamf-finder sweeps thousands of shapes
for hours to find the same ridge.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.stats import measure, reason_of, skipped
from gpuaudit.bench.timing import L2Flush, cpu_times_ms, cuda_times_ms, on_each, rate
from gpuaudit.hw.torch_env import CudaDevice, import_torch, why_no_cuda
from gpuaudit.model import Measurement, Params

SUITE = "matmul"
ALIGN = 256  # tensor-core friendly; every searched dimension is a multiple of it


@dataclass(frozen=True)
class Precision:
    name: str
    spec_key: str  # the GpuSpec.peak_tflops field it is judged against
    unit: str
    tolerance: float  # largest acceptable ‖C − ref‖ / ‖ref‖ on checked rows
    min_capability: tuple[int, int] = (0, 0)
    max_side: int = 16384  # cap per dimension (fp64 is slow: keep its search short)


PRECISIONS = {
    "fp64": Precision("fp64", "fp64_tensor", "TFLOP/s", 1e-12, max_side=8192),
    "fp32": Precision("fp32", "fp32", "TFLOP/s", 1e-5, max_side=8192),
    "tf32": Precision("tf32", "tf32", "TFLOP/s", 5e-3, (8, 0)),
    "bf16": Precision("bf16", "bf16", "TFLOP/s", 2e-2, (8, 0)),
    "fp16": Precision("fp16", "fp16", "TFLOP/s", 1e-2, (7, 0)),
    "fp8": Precision("fp8", "fp8", "TFLOP/s", 5e-2, (8, 9)),
    "int8": Precision("int8", "int8", "TOP/s", 0.0, (7, 5)),
}

Shape = tuple[int, int, int]


def align(x: float) -> int:
    return max(ALIGN, round(x / ALIGN) * ALIGN)


def neighbours(shape: Shape, step: float, max_side: int) -> list[Shape]:
    """The shapes one step (a factor of 1 ± step) away along each axis, aligned, in bounds."""
    out = []
    for axis in range(3):
        for f in (1 + step, 1 - step):
            s = list(shape)
            s[axis] = min(max_side, align(s[axis] * f))
            if tuple(s) != shape and tuple(s) not in out:
                out.append(tuple(s))
    return out  # type: ignore[return-value]


def stretched(side: int, max_side: int) -> list[Shape]:
    """Around a good square: the same work laid out long along one axis (MAMF often sits on
    a large K with smaller M, N)."""
    half, double = align(side / 2), min(max_side, align(side * 2))
    return [(half, half, min(max_side, align(side * 4))), (side, side, double),
            (double, side, side), (side, double, side)]


def long_k(max_side: int) -> list[Shape]:
    """Small outputs with a long reduction: few output tiles, operands that stream, less power
    per FLOP. On H100/H200 bf16 this ridge (e.g. 2048×2048×13312) beats every square by
    10–15 % (mamf-finder's published best shapes sit there too)."""
    return [(mn, mn, k) for mn in (1024, 2048, 4096) for k in (8192, 12288, 16384)
            if k <= max_side]


def search(time_shape: Callable[[Shape], float | None], squares: list[int], max_side: int,
           refine_rounds: int) -> tuple[Shape, dict[Shape, float]]:
    """Find the fastest shape. `time_shape` gives a rate (higher is better) or None when the
    shape cannot run (out of memory). Returns the best shape and every rate tried."""
    tried: dict[Shape, float] = {}

    def best_of(shapes: list[Shape]) -> None:
        for s in shapes:
            if s not in tried:
                r = time_shape(s)
                if r is not None:
                    tried[s] = r

    best_of([(s, s, s) for s in squares if s <= max_side])
    if not tried:
        raise RuntimeError("no shape could run (out of memory?)")
    side = max(tried, key=tried.__getitem__)[0]
    best_of(stretched(side, max_side) + long_k(max_side))
    step = 0.25
    for _ in range(refine_rounds):
        best = max(tried, key=tried.__getitem__)
        best_of(neighbours(best, step, max_side))
        if max(tried, key=tried.__getitem__) == best:
            step /= 2  # no neighbour won: look closer
    return max(tried, key=tried.__getitem__), tried


def confirm(time_shape: Callable[[Shape], float | None], tried: dict[Shape, float],
            leaders: int) -> Shape:
    """The best of the `leaders` fastest shapes of a search, each timed again the same way."""
    top = sorted(tried, key=tried.__getitem__, reverse=True)[:leaders]
    again = {s: r for s in top if (r := time_shape(s)) is not None}
    return max(again, key=again.__getitem__) if again else top[0]


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
    # (warm-up, timed) iterations when re-timing the leaders: quick keeps the whole micro
    # suite inside a minute; the others use mamf-finder's 50 + 100.
    confirm_iters = ctx.pick((20, 40), (50, 100), (50, 100))

    def time_shape(shape: Shape, *, burst: bool = False) -> float | None:
        try:
            with torch.cuda.device(first.cuda_index):
                ops = _Operands(torch, prec, shape, f"cuda:{first.cuda_index}", gen)
                if burst:
                    time.sleep(idle_s)
                warm, timed = confirm_iters if burst else (3, ctx.pick(10, 20, 30))
                times = cuda_times_ms(ops.run, iters=timed, warmup=warm, flush=flush)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            return None
        return statistics.median(rate(2.0 * math.prod(shape), times, 1e12))

    try:
        best, tried = search(time_shape, squares, prec.max_side,
                             refine_rounds=ctx.pick(3, 6, 10))
        # Brief timings rank shapes by whatever power state the last one left: re-time the
        # leaders alike (idle pause, then mamf-finder's 50 + 100 iterations) to pick one.
        ctx.step(f"matmul {prec.name}: confirming the best shapes")
        best = confirm(lambda shape: time_shape(shape, burst=True), tried, ctx.pick(2, 4, 6))
    except (RuntimeError, TypeError) as exc:
        for _, i in ctx.devices:
            yield skipped(SUITE, prec.name, prec.unit,
                          f"{prec.name} matmul failed: {reason_of(exc)}",
                          gpu_index=i)
        return
    ctx.step(f"matmul {prec.name}: {best[0]}×{best[1]}×{best[2]} on {len(devices)} GPU(s)")

    flops = 2.0 * math.prod(best)

    def final(d: CudaDevice) -> tuple[list[float], list[float], bool, float]:
        g = torch.Generator(device=f"cuda:{d.cuda_index}").manual_seed(99 + d.cuda_index)
        ops = _Operands(torch, prec, best, f"cuda:{d.cuda_index}", g)
        l2 = L2Flush(d)
        # Burst: after an idle pause, mamf-finder's 50 + 100 iterations, mostly before the
        # power limiter pulls the clocks down. Sustained: past that settling, as a job runs.
        time.sleep(idle_s)
        burst = cuda_times_ms(ops.run, iters=100, warmup=50, flush=l2)
        sustained = cuda_times_ms(ops.run, iters=iters, warmup=ctx.pick(10, 25, 50), flush=l2,
                                  min_warmup_ms=ctx.pick(300, 1000, 5000),
                                  min_timed_ms=ctx.pick(300, 1000, 3000))
        ok, err = ops.check()
        return rate(flops, sustained, 1e12), rate(flops, burst, 1e12), ok, err

    for d, result in zip(devices, on_each(devices, final), strict=True):
        i = index[d.cuda_index]
        spec = ctx.spec(i)
        if isinstance(result, BaseException):
            yield skipped(SUITE, prec.name, prec.unit, reason_of(result), gpu_index=i)
            continue
        sustained, burst, ok, err = result
        params: Params = {"m": best[0], "n": best[1], "k": best[2], "shapes_tried": len(tried),
                          "relative_error": float(f"{err:.3g}"), "device": "cuda"}
        peak = spec.peak(prec.spec_key) if spec else None
        yield measure(SUITE, prec.name, prec.unit, sustained, warmup=ctx.pick(10, 25, 50),
                      spec_value=peak, gpu_index=i, params={**params, "regime": "sustained"},
                      verified=ok)
        yield measure(SUITE, f"{prec.name}_burst", prec.unit, burst, warmup=50, spec_value=peak,
                      gpu_index=i, params={**params, "regime": "burst"}, verified=ok,
                      notes=("after an idle pause, before the power limit settles: what "
                             "mamf-finder reports; jobs get the sustained figure",))
    flush.buf = None
    torch.cuda.empty_cache()


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
