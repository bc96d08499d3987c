"""Diagnosis of a job (`gpuaudit doctor`): findings with the numbers behind them, and the
changes that would make the job faster, ranked by their expected gain."""

from __future__ import annotations

from pydantic import Field

from .base import SCHEMA_VERSION, Record
from .finding import Severity
from .units import Count, Figure, Fraction, GpuIndex, Moment, Pid, Seconds

Value = str | int | float | bool | None


class Observation(Record):
    """One number and where it came from ("NVML GPM, median of 19 samples at 0.5 s")."""

    name: str
    value: Value
    unit: str = ""
    source: str


class Bottleneck(Record):
    """One finding. `share` is the estimated fraction of the job's time it costs (0–1): the
    findings are ranked by it. `code` is stable: scripts key on it."""

    code: str
    title: str
    severity: Severity
    share: Fraction
    confidence: str  # "high", "medium" or "low": how directly the evidence shows it
    message: str
    gpu_index: GpuIndex | None = None
    evidence: tuple[Observation, ...] = ()


class Change(Record):
    """One thing to change, with the exact settings to paste where there are some, and the
    speed-up it should bring (a range, `gain_low`–`gain_high` times) with how that was
    estimated."""

    rank: Count
    finding: str  # the code of the finding it answers
    action: str
    settings: str | None = None
    gain_low: Figure | None = None
    gain_high: Figure | None = None
    gain_basis: str = ""


class Diagnosis(Record):
    schema_version: int = SCHEMA_VERSION
    kind: str = "doctor"
    command: tuple[str, ...] | None = None
    pid: Pid | None = None  # the job's process (the one started, or the one attached to)
    exit_code: int | None = None  # None when attached: the exit status is its parent's
    started_at: Moment
    duration_s: Seconds
    gpus: tuple[GpuIndex, ...] = ()  # the GPUs the job used (NVML indices)
    findings: tuple[Bottleneck, ...] = ()
    changes: tuple[Change, ...] = ()
    summary: tuple[Observation, ...] = ()  # the figures that describe the job as a whole
    sources: dict[str, str] = Field(default_factory=dict)  # evidence kind → what was read
    notes: tuple[str, ...] = ()

    @property
    def top(self) -> Bottleneck | None:
        return self.findings[0] if self.findings else None
