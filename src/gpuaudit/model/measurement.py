"""A measured figure with the statistics and the reference it is judged against."""

from __future__ import annotations

from pydantic import Field

from gpuaudit.model.base import Record
from gpuaudit.model.units import Bytes, Count, Figure, GpuIndex, Pct, Pid

Params = dict[str, str | int | float | bool | None]


class ContendingProcess(Record):
    """Another process on a benchmarked GPU, as NVML listed it."""

    gpu_index: GpuIndex
    pid: Pid
    command: str | None = None  # None: not visible from here (another container or user)
    used_memory_bytes: Bytes | None = None


class Contention(Record):
    """The evidence that something else used the GPU while a figure was measured: the figure
    describes a shared GPU, not the server."""

    processes: tuple[ContendingProcess, ...] = ()
    # SM activity (GPM) or utilization (NVML) on the GPU while this run was idle between suites
    activity_pct: Pct | None = None
    activity_source: str | None = None  # "gpm_sm_activity" or "nvml_utilization"
    # The figure's IQR as a % of its median, where that alone says the GPU was shared
    spread_pct: Figure | None = None
    summary: str = ""  # one line for people


class Measurement(Record):
    """One benchmark figure.

    `value` is the `statistic` (e.g. median) of `samples` taken after `warmup` untimed
    iterations; None when the benchmark was skipped, with `skipped_reason` saying why.
    """

    suite: str
    name: str
    unit: str
    value: Figure | None
    statistic: str = "median"
    samples: tuple[Figure, ...] = ()
    warmup: Count = 0
    spread_low: Figure | None = None
    spread_high: Figure | None = None
    spread_kind: str | None = None  # "min-max" or "IQR"
    spec_value: Figure | None = None
    pct_of_spec: Figure | None = None
    gpu_index: GpuIndex | None = None
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
