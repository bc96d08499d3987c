"""A measured figure with the statistics and the reference it is judged against."""

from __future__ import annotations

from pydantic import Field

from gpuaudit.model.base import Record

Params = dict[str, str | int | float | bool | None]


class Measurement(Record):
    """One benchmark figure.

    `value` is the `statistic` (e.g. median) of `samples` taken after `warmup` untimed
    iterations; None when the benchmark was skipped, with `skipped_reason` saying why.
    """

    suite: str
    name: str
    unit: str
    value: float | None
    statistic: str = "median"
    samples: tuple[float, ...] = ()
    warmup: int = 0
    spread_low: float | None = None
    spread_high: float | None = None
    spread_kind: str | None = None  # "min-max" or "IQR"
    spec_value: float | None = None
    pct_of_spec: float | None = None
    gpu_index: int | None = None
    params: Params = Field(default_factory=dict)
    skipped_reason: str | None = None
    # The result was checked against a reference (None: no check applies).
    verified: bool | None = None
    # Warnings about the figure itself: high noise, too few samples, a throttled GPU...
    notes: tuple[str, ...] = ()

    @property
    def skipped(self) -> bool:
        return self.value is None
