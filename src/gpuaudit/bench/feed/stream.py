"""STREAM-style host memory bandwidth with numpy: copy (a = b) and triad (a = b + s·c).

One thread per CPU, pinned to it, allocating its own arrays after pinning so the pages land
on its NUMA node (first touch). numpy releases the GIL inside its loops, so the threads run
in parallel. Bytes are counted as STREAM counts them: copy moves 2 arrays, triad 3 (reads +
writes, without the write-allocate traffic caches add). Triad is computed in cache-sized
blocks (c·s into a small scratch buffer, then + b into a) so memory sees STREAM's three
arrays, not the five that numpy's whole-array temporaries would add.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import Any

KERNELS = ("copy", "triad")
ARRAYS = {"copy": 2, "triad": 3}  # arrays moved per element, as STREAM counts
BLOCK = 1 << 16  # elements per triad block: 512 KiB of float64, fits in L2
SCALAR = 3.0


def stream_bytes(kernel: str, elements: int) -> int:
    """Bytes STREAM counts for one pass of `kernel` over `elements` float64 per array."""
    return ARRAYS[kernel] * 8 * elements


def run_stream(cpus: Sequence[int], total_bytes: int, iters: int, warmup: int
               ) -> dict[str, tuple[list[float], bool, int]]:
    """kernel → (GB/s per timed iteration, result check, elements per thread) with one pinned
    thread per CPU in `cpus` and `total_bytes` over the three arrays of all threads."""
    import numpy as np

    n = max(BLOCK, total_bytes // (3 * 8 * len(cpus)) // BLOCK * BLOCK)
    start = threading.Barrier(len(cpus) + 1)
    end = threading.Barrier(len(cpus) + 1)
    kernel_box: list[str] = [""]
    checks: list[bool] = [True] * len(cpus)
    errors: list[BaseException] = []

    def worker(k: int, cpu: int) -> None:
        try:
            if hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(0, {cpu})  # this thread only (Linux: pid 0 = caller)
            rng = np.random.default_rng(k)
            a = np.empty(n)
            b = rng.random(n) + 0.5  # first touch here: pages on this CPU's node
            c = rng.random(n) + 0.5
            scratch = np.empty(BLOCK)
        except BaseException as exc:
            errors.append(exc)
            start.abort()
            return
        while True:
            try:
                start.wait()
            except threading.BrokenBarrierError:
                return
            kernel = kernel_box[0]
            if kernel == "stop":
                return
            if kernel == "copy":
                np.copyto(a, b)
            else:
                for i in range(0, n, BLOCK):
                    np.multiply(c[i:i + BLOCK], SCALAR, out=scratch)
                    np.add(scratch, b[i:i + BLOCK], out=a[i:i + BLOCK])
            end.wait()
            idx = (0, n // 2, n - 1)
            want = [b[i] if kernel == "copy" else b[i] + SCALAR * c[i] for i in idx]
            checks[k] = checks[k] and all(abs(a[i] - w) <= 1e-12 * abs(w) for i, w in
                                          zip(idx, want, strict=True))

    threads = [threading.Thread(target=worker, args=(k, cpu), daemon=True)
               for k, cpu in enumerate(cpus)]
    for t in threads:
        t.start()
    results: dict[str, tuple[list[float], bool, int]] = {}
    try:
        for kernel in KERNELS:
            rates = []
            for i in range(warmup + iters):
                kernel_box[0] = kernel
                start.wait()
                t0 = time.perf_counter()
                end.wait()
                seconds = time.perf_counter() - t0
                if i >= warmup:
                    rates.append(stream_bytes(kernel, n) * len(cpus) / seconds / 1e9)
            results[kernel] = (rates, all(checks), n)
        kernel_box[0] = "stop"
        start.wait()
    except threading.BrokenBarrierError:
        if errors:
            raise errors[0] from None
        raise
    finally:
        start.abort()
        end.abort()
        for t in threads:
            t.join(timeout=10)
    return results


def working_set_bytes(llc_bytes: int | None, wanted: int, available: int) -> int:
    """At least 4× the last-level cache and `wanted`, at most a quarter of free memory."""
    size = max(wanted, 4 * (llc_bytes or 0))
    return min(size, available // 4)


def numpy_or_none() -> Any | None:
    try:
        import numpy
    except ImportError:
        return None
    return numpy
