"""Timing on a GPU the way METHOD.md and the peers do it: warm-up first, CUDA events around
each iteration, an optional L2 flush between iterations; and running one function on every
GPU at once."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from gpuaudit.hw.torch_env import CudaDevice, import_torch

T = TypeVar("T")


class L2Flush:
    """Writes a buffer twice the L2's size (at least `min_bytes`), so the next kernel reads
    from device memory."""

    def __init__(self, device: CudaDevice, min_bytes: int = 64 << 20) -> None:
        torch = import_torch()
        size = max(2 * device.l2_cache_bytes, min_bytes)
        self.buf = torch.empty(size, dtype=torch.uint8, device=f"cuda:{device.cuda_index}")

    def __call__(self) -> None:
        self.buf.fill_(1)


def cuda_times_ms(fn: Callable[[], Any], *, iters: int, warmup: int,
                  flush: Callable[[], None] | None = None, min_warmup_ms: float = 0.0,
                  min_timed_ms: float = 0.0) -> list[float]:
    """Milliseconds per call of `fn` on the current device, one CUDA event pair per call.

    `min_warmup_ms` and `min_timed_ms` stretch the warm-up and the timed run to at least that
    much GPU time: a GPU at its power limit settles its clocks over a few hundred ms, and a
    short burst before that reads faster than any sustained job will run."""
    torch = import_torch()
    if min_warmup_ms or min_timed_ms:
        probe = cuda_times_ms(fn, iters=1, warmup=1, flush=flush)[0] or 1e-3
        warmup = max(warmup, math.ceil(min_warmup_ms / probe))
        iters = max(iters, math.ceil(min_timed_ms / probe))
    for _ in range(warmup):
        if flush:
            flush()
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends, strict=True):
        if flush:
            flush()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]


def cpu_times_ms(fn: Callable[[], Any], *, iters: int, warmup: int) -> list[float]:
    """Milliseconds per call of a host function (CPU benchmarks)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def on_each(devices: Sequence[CudaDevice], fn: Callable[[CudaDevice], T]
            ) -> list[T | BaseException]:
    """fn(device) on every device at once, one host thread each (CUDA work releases the GIL);
    results in device order, an exception in place of a result where fn raised."""
    torch = import_torch()

    def call(d: CudaDevice) -> T | BaseException:
        try:
            with torch.cuda.device(d.cuda_index):
                return fn(d)
        except Exception as exc:
            return exc

    if len(devices) == 1:
        return [call(devices[0])]
    with ThreadPoolExecutor(max_workers=len(devices)) as pool:
        return list(pool.map(call, devices))


def rate(amount: float, times_ms: Sequence[float], scale: float = 1e9) -> list[float]:
    """Per-iteration rates: `amount` (bytes, FLOPs) per second, divided by `scale`."""
    return [amount / (t / 1e3) / scale for t in times_ms if t > 0]
