"""The monitor's latest state, shared between the sampling loop (writer) and the exporter,
the rule evaluator and the live view (readers)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from gpuaudit.model import Alert, Sample

from .metrics import IdleState, XidTally


@dataclass(frozen=True)
class MonitorState:
    sample: Sample | None = None
    xids: XidTally = field(default_factory=XidTally)
    idle: dict[int, IdleState] = field(default_factory=dict)
    alerts: tuple[Alert, ...] = ()


class Latest:
    """A thread-safe box holding the newest MonitorState: readers never see a half update."""

    def __init__(self, state: MonitorState | None = None) -> None:
        self._lock = threading.Lock()
        self._state = state or MonitorState()

    def get(self) -> MonitorState:
        with self._lock:
            return self._state

    def set(self, state: MonitorState) -> None:
        with self._lock:
            self._state = state
