"""Timing a training step or an inference call, on a GPU (CUDA events, or a synchronize
around a host clock) or on the CPU (the host clock)."""

from __future__ import annotations

import contextlib
import itertools
import os
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from gpuaudit.bench.timing import HOLD_MAX_US, HOLD_TRIES, hold_us, spin_cycles_per_us


def is_cuda(device: Any) -> bool:
    return getattr(device, "type", str(device)).startswith("cuda")


def release_cupti_after_profiling() -> None:
    """Ask Kineto to detach CUPTI when a torch.profiler session stops. It does so only when
    TEARDOWN_CUPTI is "1" (read as the profile stops); left attached, every later launch in
    the process goes through CUPTI and host-bound steps timed after a profile ran 1.4–2× long
    on an H200 (a batch-32 BERT step 51 ms against 37 ms in a fresh process). A value
    already set is kept: torch sets "0" itself for CUDA graphs, which re-attach badly."""
    os.environ.setdefault("TEARDOWN_CUPTI", "1")


@contextlib.contextmanager
def profiled(activities: list[Any], **options: Any) -> Iterator[Any]:
    """A torch.profiler session (`torch.profiler.profile(activities, **options)`) without
    torch's warning that "the profiler clears events at the end of each cycle": torch up to
    2.12 gives it on a session that has no cycles, ours among them (fixed in later torch), and
    it would land in the middle of a command's output. Other warnings pass."""
    from torch.profiler import profile

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Warning: Profiler clears events",
                                category=UserWarning)
        with profile(activities=activities, **options) as prof:
            yield prof


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


def biggest_first(families: dict[str, dict[Any, list[int]]], n: int, budget_s: float
                  ) -> tuple[list[tuple[Any, list[int]]], float]:
    """What to time alone, and for how long: the first family's `n` biggest layers (a tally of
    key → [count, size per step], by size, ties in the order seen), and each timing's share
    of `budget_s` once every family has timed them all. ([], 0.0) where there is none."""
    first = next(iter(families.values()), {})
    top = sorted(first.items(), key=lambda kv: kv[1][1], reverse=True)[:n]
    return top, (budget_s / (len(top) * len(families)) if top else 0.0)


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


def held_call_ms(torch: Any, device: Any, fn: Callable[[], Any], budget_s: float,
                 calls: int = 4) -> float:
    """Milliseconds per call of `fn`, with the host out of the timing: before each sample the
    GPU is held by a spin kernel while the host queues `calls` calls between two CUDA events,
    so they run back to back as inside a step, not at the pace of Python's launches (a
    layer's forward + backward alone can take less GPU time than its launches). A sample whose
    start event fired before the last call was queued is taken again with a 4× longer hold.
    The median of 3 to 25 samples that fill `budget_s`; on a CPU, `median_call_ms`."""
    if not is_cuda(device):
        return median_call_ms(torch, device, fn, budget_s)
    with torch.cuda.device(device):
        fn()
        sync(torch, device)
        t0 = time.perf_counter()
        fn()
        host_s = time.perf_counter() - t0
        sync(torch, device)
        gpu_s = time.perf_counter() - t0
        cycles = spin_cycles_per_us(torch)
        hold = hold_us(host_s * 1e6, calls)
        samples = []
        for _ in range(iterations_for(gpu_s * calls, budget_s, 3, 25)):
            for _attempt in range(HOLD_TRIES):
                a, b = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                torch.cuda._sleep(int(min(hold, HOLD_MAX_US) * cycles))
                a.record()
                for _ in range(calls):
                    fn()
                b.record()
                queued = not a.query()
                b.synchronize()
                if queued:
                    break
                hold *= 4
            samples.append(a.elapsed_time(b) / calls)
    return statistics.median(samples)
