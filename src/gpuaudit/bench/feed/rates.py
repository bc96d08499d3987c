"""Unit conversions, rates and percentiles for the feed suites. Pure functions: CI tests them
with exact values.

Conventions: GB/s = 10^9 B/s (storage, memory, host→device copies); Gbit/s = 10^9 bit/s
(network links, as NICs are rated); IOPS = completed I/Os per second of wall time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpuaudit.percentile import percentile

PERCENTILES = (50.0, 99.0, 99.9)


def gb_per_s(nbytes: float, seconds: float) -> float:
    """Bytes over seconds in GB/s (10^9 B/s)."""
    if seconds <= 0:
        raise ValueError(f"non-positive duration {seconds}")
    return nbytes / seconds / 1e9


def gbit_per_s(nbytes: float, seconds: float) -> float:
    """Bytes over seconds in Gbit/s (10^9 bit/s), the unit links are sold in."""
    return 8 * gb_per_s(nbytes, seconds)


def mbps_to_gbit(mbps: float) -> float:
    """A sysfs link speed (Mbit/s, 10^6) in Gbit/s."""
    return mbps / 1000.0


def per_second(count: float, seconds: float) -> float:
    """Operations (I/Os, images) per second."""
    if seconds <= 0:
        raise ValueError(f"non-positive duration {seconds}")
    return count / seconds


def percentiles(values: Sequence[float], ps: Iterable[float] = PERCENTILES
                ) -> dict[float, float]:
    xs = sorted(values)
    return {p: percentile(xs, p) for p in ps}


def percentile_name(p: float) -> str:
    """50 → 'p50', 99.9 → 'p99.9'."""
    return f"p{p:g}"


def window_rates(ends: Sequence[float], start: float, width: float) -> list[float]:
    """Completions per second in consecutive windows of `width` seconds from `start`: the
    spread of an IOPS figure over time. A last window shorter than half a width is dropped
    (too few events to say anything)."""
    if width <= 0:
        raise ValueError("window width must be positive")
    if not ends:
        return []
    span = max(ends) - start
    full = int(span // width)
    count = full + (1 if span - full * width >= width / 2 else 0)
    counts = [0] * max(count, 0)
    for t in ends:
        i = int((t - start) // width)
        if 0 <= i < count:
            counts[i] += 1
    return [c / width for c in counts]


def fits(nbytes: int, free_bytes: int, margin_bytes: int) -> bool:
    """Whether a test file of nbytes leaves at least margin_bytes free."""
    return nbytes + margin_bytes <= free_bytes
