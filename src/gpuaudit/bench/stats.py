"""From raw timings to a Measurement: median, IQR, min–max, % of spec, and noise warnings.

Pure functions (no GPU, no torch): CI tests them with exact values.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from gpuaudit.model import Measurement, Params
from gpuaudit.percentile import percentile

# IQR wider than this fraction of the median makes the figure "noisy".
NOISY_IQR_FRACTION = 0.10
MIN_SAMPLES = 5


def quartiles(samples: Sequence[float]) -> tuple[float, float, float]:
    """(Q1, median, Q3), by `percentile`'s rule."""
    return percentile(samples, 25), percentile(samples, 50), percentile(samples, 75)


def pct_of(value: float | None, reference: float | None) -> float | None:
    if value is None or not reference:
        return None
    return round(100.0 * value / reference, 2)


def measure(
    suite: str,
    name: str,
    unit: str,
    samples: Sequence[float],
    *,
    warmup: int,
    spec_value: float | None = None,
    gpu_index: int | None = None,
    params: Params | None = None,
    verified: bool | None = None,
    notes: Sequence[str] = (),
    statistic: str = "median",
) -> Measurement:
    """A Measurement whose value is the median (or max, for "best of") of `samples`.

    `samples` are figures in `unit` (e.g. GB/s per timed iteration), not times, so the
    spread is in the same unit as the value.
    """
    if not samples:
        raise ValueError(f"{suite}/{name}: no samples")
    q1, med, q3 = quartiles(samples)
    value = max(samples) if statistic == "max" else med
    found = list(notes)
    if len(samples) < MIN_SAMPLES:
        found.append(f"only {len(samples)} samples: the spread is a rough guide")
    if med and (q3 - q1) / abs(med) > NOISY_IQR_FRACTION:
        found.append(f"noisy: IQR is {100 * (q3 - q1) / abs(med):.0f}% of the median")
    if verified is False:
        found.append("result check FAILED: the figure is not trustworthy")
    return Measurement(
        suite=suite,
        name=name,
        unit=unit,
        value=value,
        statistic=statistic,
        samples=tuple(samples),
        warmup=warmup,
        spread_low=q1,
        spread_high=q3,
        spread_kind="IQR",
        spec_value=spec_value,
        pct_of_spec=pct_of(value, spec_value),
        gpu_index=gpu_index,
        params=params or {},
        verified=verified,
        notes=tuple(found),
    )


def skipped(suite: str, name: str, unit: str, reason: str, *, gpu_index: int | None = None,
            params: Params | None = None, spec_value: float | None = None) -> Measurement:
    """A benchmark that could not run: recorded with the reason, never silently absent."""
    return Measurement(suite=suite, name=name, unit=unit, value=None, skipped_reason=reason,
                       gpu_index=gpu_index, params=params or {}, spec_value=spec_value)


def reason_of(error: BaseException) -> str:
    """One line for a skipped figure (CUDA errors carry long multi-line texts)."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else 'no message'}"[:300]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)
