"""The one percentile rule of gpuaudit, for every figure it reports as a percentile or a spread:
benchmark IQRs, step-time and latency percentiles, I/O latencies, a watched job's step
times. Pure and dependency-free, so that the job `gpuaudit.watch()` runs in pays nothing for
it."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(samples: Sequence[float], p: float) -> float:
    """The p-th percentile (0 ≤ p ≤ 100) by linear interpolation between order statistics
    (numpy's default): p50 of [1, 2, 3, 4] is 2.5."""
    if not samples:
        raise ValueError("no samples")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} is not within 0..100")
    xs = sorted(samples)
    pos = p / 100 * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)
