"""Health findings: a verdict with a stable code, the evidence behind it and what to do."""

from __future__ import annotations

from enum import Enum

from pydantic import Field

from gpuaudit.model.base import Record


class Severity(str, Enum):
    PASS = "PASS"
    INFO = "INFO"
    WARN = "WARN"
    FAIL = "FAIL"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Severity.PASS: 0, Severity.INFO: 1, Severity.WARN: 2, Severity.FAIL: 3}

Evidence = dict[str, str | int | float | bool | None]


class Finding(Record):
    """One verdict. `code` is stable across releases: scripts and alert rules key on it."""

    code: str
    severity: Severity
    message: str
    gpu_index: int | None = None
    evidence: Evidence = Field(default_factory=dict)
    advice: str | None = None


def worst(findings: list[Finding] | tuple[Finding, ...]) -> Severity:
    """The most severe verdict among `findings` (PASS when there are none)."""
    return max((f.severity for f in findings), key=lambda s: s.rank, default=Severity.PASS)
