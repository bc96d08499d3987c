"""Timing a training step or an inference call, on a GPU (CUDA events, or a synchronize
around a host clock) or on the CPU (the host clock)."""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable
from typing import Any


def is_cuda(device: Any) -> bool:
    return getattr(device, "type", str(device)).startswith("cuda")


def sync(torch: Any, device: Any) -> None:
    if is_cuda(device):
        torch.cuda.synchronize(device)


def step_times_s(torch: Any, device: Any, fn: Callable[[], Any], iters: int) -> list[float]:
    """Seconds per call of `fn` run back to back, the way a training loop runs: on a GPU one
    CUDA event between consecutive calls (no host sync inside the loop, so the GPU's queue
    stays full; a host that cannot keep up shows as longer steps)."""
    if not is_cuda(device):
        stamps = [time.perf_counter()]
        for _ in range(iters):
            fn()
            stamps.append(time.perf_counter())
        return [b - a for a, b in itertools.pairwise(stamps)]
    events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    events[0].record()
    for e in events[1:]:
        fn()
        e.record()
    torch.cuda.synchronize(device)
    return [a.elapsed_time(b) / 1e3 for a, b in itertools.pairwise(events)]


def latencies_s(torch: Any, device: Any, fn: Callable[[], Any], iters: int) -> list[float]:
    """Seconds from the call to its result being ready, one request at a time (MLPerf's
    single-stream latency): synchronized before and after every call."""
    out = []
    for _ in range(iters):
        sync(torch, device)
        t0 = time.perf_counter()
        fn()
        sync(torch, device)
        out.append(time.perf_counter() - t0)
    return out


def throughput_reps(torch: Any, device: Any, fn: Callable[[], Any], iters: int,
                    reps: int) -> list[float]:
    """Calls per second, back to back, one figure per repetition of `iters` calls."""
    out = []
    for _ in range(reps):
        sync(torch, device)
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync(torch, device)
        out.append(iters / (time.perf_counter() - t0))
    return out


def iterations_for(seconds_each: float, budget_s: float, lo: int, hi: int) -> int:
    """How many iterations fill `budget_s`, within [lo, hi]."""
    if seconds_each <= 0:
        return hi
    return max(lo, min(hi, int(budget_s / seconds_each)))


def median_call_ms(torch: Any, device: Any, fn: Callable[[], Any], budget_s: float) -> float:
    """Milliseconds per call: two warm-up calls (the second timed for the count), then the
    median of 3 to 25 calls that fill `budget_s`; CUDA events on a GPU."""
    cuda = is_cuda(device)
    fn()
    sync(torch, device)
    t0 = time.perf_counter()
    fn()
    sync(torch, device)
    iters = iterations_for(time.perf_counter() - t0, budget_s, 3, 25)
    times = []
    for _ in range(iters):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)
