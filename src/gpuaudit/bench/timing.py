"""Timing on a GPU as the reference tools do it (Triton's `do_bench`, nccl-tests): warm-up
first, CUDA events around each iteration, an optional L2 flush between iterations so that no
iteration reads what the one before left in the cache; and running one function on every GPU
at once."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from gpuaudit.hw.torch_env import CudaDevice, cuda_torch

T = TypeVar("T")


class L2Flush:
    """Writes a buffer twice the L2's size (at least `min_bytes`), so the next kernel reads
    from device memory."""

    def __init__(self, device: CudaDevice, min_bytes: int = 64 << 20) -> None:
        torch = cuda_torch()
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
    torch = cuda_torch()
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
    if not devices:
        return []
    torch = cuda_torch()

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


_SPIN_CYCLES_PER_US: dict[int, float] = {}
SPIN_CYCLES = 4_000_000  # about 2 ms at an H200's clock
SPIN_TRIES = 3


def spin_cycles_per_us(torch: Any) -> float:
    """The clock of `torch.cuda._sleep` on the current device (its hold is given in cycles),
    measured once per device: the fastest of `SPIN_TRIES` spins of `SPIN_CYCLES`, after one
    untimed. A first spin timed alone counts more than its cycles: its launch loads the
    kernel's module (CUDA's lazy loading) after the event before it has fired, and an idle
    GPU's clock is still rising. Timed so, a hold on an H200 ran at half its counted length."""
    dev = torch.cuda.current_device()
    if dev not in _SPIN_CYCLES_PER_US:
        torch.cuda._sleep(SPIN_CYCLES)
        torch.cuda.synchronize()
        fastest = 0.0
        for _ in range(SPIN_TRIES):
            a, b = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            a.record()
            torch.cuda._sleep(SPIN_CYCLES)
            b.record()
            b.synchronize()
            fastest = max(fastest, SPIN_CYCLES / max(a.elapsed_time(b) * 1e3, 1.0))
        _SPIN_CYCLES_PER_US[dev] = fastest
    return _SPIN_CYCLES_PER_US[dev]


# The hold before timed work queued behind a spin kernel: the host's measured time to queue
# it, times this, plus a margin (the collectives worker's batches and the layers timed alone,
# workloads/timing.py).
HOLD_FACTOR = 2.0
HOLD_MARGIN_US = 200.0
HOLD_TRIES = 3  # work that started before it was all queued is run again, holding 4x longer
HOLD_MAX_US = 50_000.0


def hold_us(host_us_per_call: float, calls: int) -> float:
    """How long to hold the GPU while the host queues `calls` calls (µs)."""
    return HOLD_FACTOR * max(host_us_per_call, 1.0) * calls + HOLD_MARGIN_US
