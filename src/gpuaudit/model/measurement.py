"""A measured figure with the statistics and the reference it is judged against."""

from __future__ import annotations

from pydantic import Field

from gpuaudit.model.base import Record

Params = dict[str, str | int | float | bool | None]


class ContendingProcess(Record):
    """Another process on a benchmarked GPU, as NVML listed it."""

    gpu_index: int
    pid: int
    command: str | None = None  # None: not visible from here (another container or user)
    used_memory_bytes: int | None = None


class Contention(Record):
    """The evidence that something else used the GPU while a figure was measured: the figure
    describes a shared GPU, not the server."""

    processes: tuple[ContendingProcess, ...] = ()
    # SM activity (GPM) or utilization (NVML) on the GPU while this run was idle between suites
    activity_pct: float | None = None
    activity_source: str | None = None  # "gpm_sm_activity" or "nvml_utilization"
    # The figure's IQR as a % of its median, where that alone says the GPU was shared
    spread_pct: float | None = None
    summary: str = ""  # one line for people


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
    # Set when something else ran on the GPU meanwhile: the figure is then left out of % of
    # spec judgements and straggler comparisons (pct_of_spec is None).
    contention: Contention | None = None

    @property
    def skipped(self) -> bool:
        return self.value is None

    @property
    def contended(self) -> bool:
        return self.contention is not None
