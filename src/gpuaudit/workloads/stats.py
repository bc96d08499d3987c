"""Latency percentiles, speed-ups and scaling efficiency: pure functions, tested with exact
values (the percentile rule is `gpuaudit.percentile`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpuaudit.percentile import percentile


def p50_p90_p99(samples: Sequence[float]) -> tuple[float, float, float]:
    return percentile(samples, 50), percentile(samples, 90), percentile(samples, 99)


def rates(amount: float, times_s: Sequence[float]) -> list[float]:
    """`amount` (samples, tokens, FLOPs) per second, one rate per timed interval."""
    return [amount / t for t in times_s if t > 0]


def speedup(rate: float | None, baseline: float | None) -> float | None:
    """rate / baseline, None when either is missing."""
    if rate is None or not baseline:
        return None
    return rate / baseline


def scaling_efficiency(rate_n: float, n: int, rate_1: float) -> float:
    """Weak-scaling efficiency: what N GPUs deliver over N times what one GPU delivers with the
    same per-GPU batch (1.0 = perfectly linear)."""
    if n < 1 or rate_1 <= 0:
        raise ValueError("need n ≥ 1 and a positive single-GPU rate")
    return rate_n / (n * rate_1)


def gpus_needed(target: float, per_gpu: float) -> int | None:
    """GPUs (independent replicas) for a target rate; None when one GPU delivers nothing."""
    if per_gpu <= 0:
        return None
    return max(1, math.ceil(target / per_gpu - 1e-9))
