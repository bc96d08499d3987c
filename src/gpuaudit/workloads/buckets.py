"""When the step's work happens: its forward, backward and optimizer phases on the device
clock, and the gradient buckets DistributedDataParallel would all-reduce as the backward
produces them (for predicting the all-reduce's overlap with the backward)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

DDP_BUCKET_BYTES = 25 * 2**20  # DistributedDataParallel's default bucket_cap_mb
DDP_FIRST_BUCKET_BYTES = 2**20  # torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES


def phase_times_ms(torch: Any, device: Any, trainer: Any, steps: int) -> dict[str, float]:
    """Median forward, backward and optimizer time of `steps` steps, on the device clock
    (CUDA events between the phases, no sync inside a step) or the host's on a CPU."""
    import statistics
    import time

    from gpuaudit.workloads.timing import is_cuda, sync

    cuda = is_cuda(device)
    rows: list[dict[str, float]] = []
    for _ in range(steps):
        marks: list[tuple[str, Any]] = []

        def mark(phase: str, marks: list[tuple[str, Any]] = marks) -> None:
            if cuda:
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                marks.append((phase, ev))
            else:
                marks.append((phase, time.perf_counter()))

        sync(torch, device)
        mark("start")
        trainer.step(mark=mark)
        sync(torch, device)
        row = {}
        for (_, a), (phase, b) in itertools.pairwise(marks):
            row[phase] = a.elapsed_time(b) if cuda else (b - a) * 1e3
        rows.append(row)
    phases = {k for r in rows for k in r}
    return {k: statistics.median(r.get(k, 0.0) for r in rows) for k in sorted(phases)}


def ddp_buckets(params: Iterable[Any], *, cap: int = DDP_BUCKET_BYTES,
                first: int = DDP_FIRST_BUCKET_BYTES) -> list[tuple[int, float]]:
    """The gradient buckets DistributedDataParallel would all-reduce, in the order they are
    ready: parameters in reverse registration order (DDP's own order, close to the order the
    backward produces gradients), a bucket closing when it holds `cap` bytes (the first one
    `first`); each as (bytes, the fraction of the backward done when its last gradient is
    ready), that fraction taken as the share of gradient bytes produced by then. A parameter
    shared by two modules (tied embeddings) counts once, at its registration place."""
    seen: set[int] = set()
    sizes = []
    for p in params:
        if id(p) in seen or not getattr(p, "requires_grad", False):
            continue
        seen.add(id(p))
        sizes.append(p.numel() * p.element_size())
    sizes.reverse()
    total = sum(sizes) or 1
    buckets: list[tuple[int, float]] = []
    current, done, limit = 0, 0, first
    for size in sizes:
        current += size
        done += size
        if current >= limit:
            buckets.append((current, done / total))
            current, limit = 0, cap
    if current:
        buckets.append((current, done / total))
    return buckets
