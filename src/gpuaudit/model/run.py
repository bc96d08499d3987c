"""A Run: one invocation's machine snapshot, findings and measurements, as stored."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from enum import Enum

from pydantic import Field

from .base import SCHEMA_VERSION, Record
from .finding import Finding, Severity, worst
from .fleet import NodeIdentity
from .machine import Machine
from .measurement import Measurement
from .opprofile import OpProfile
from .units import Moment, Seconds


class RunStatus(str, Enum):
    COMPLETE = "complete"
    PARTIAL = "partial"  # interrupted or cut short: what is here was measured


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


class Run(Record):
    schema_version: int = SCHEMA_VERSION
    id: str = Field(default_factory=new_run_id)
    kind: str  # "inspect", "run", "bench", ...
    started_at: Moment
    finished_at: Moment | None = None
    tool_version: str
    status: RunStatus = RunStatus.COMPLETE
    command: tuple[str, ...] = ()
    source: str | None = None  # where the machine facts came from: "live" or a snapshot path
    machine: Machine | None = None
    node: NodeIdentity | None = None  # set when a fleet audit made the run (schema 2)
    findings: tuple[Finding, ...] = ()
    measurements: tuple[Measurement, ...] = ()
    # bench train --op-profile: each training mode's op profile (schema 3), for predict
    op_profiles: tuple[OpProfile, ...] = ()
    # bench: each suite's wall time in seconds, in the order they ran (where the time goes)
    suite_seconds: dict[str, Seconds] = Field(default_factory=dict)

    @property
    def verdict(self) -> Severity:
        return worst(self.findings)
