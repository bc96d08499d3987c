"""DDP's gradient all-reduce against the backward pass: each bucket is all-reduced once its
last gradient is ready, one bucket at a time (NCCL's one stream), so the all-reduces overlap
the rest of the backward and only what runs past its end is added to the step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .rates import AllReduce


@dataclass(frozen=True)
class Overlap:
    allreduce_ms: float  # every bucket's all-reduce, end to end
    exposed_ms: float  # past the end of the backward pass
    buckets: int


def simulate(buckets: Sequence[tuple[int, float]], backward_ms: float, ranks: int,
             allreduce: AllReduce) -> Overlap:
    """`buckets`: (bytes, fraction of the backward done when it is ready), in ready order."""
    if ranks < 2 or not buckets:
        return Overlap(0.0, 0.0, len(buckets))
    free = 0.0  # when the communication stream is next idle, ms from the backward's start
    total = 0.0
    for size, ready in buckets:
        t = allreduce.seconds(size, ranks) * 1e3
        start = max(ready * backward_ms, free)
        free = start + t
        total += t
    return Overlap(allreduce_ms=total, exposed_ms=max(0.0, free - backward_ms),
                   buckets=len(buckets))
