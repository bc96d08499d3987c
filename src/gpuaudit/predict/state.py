"""The step as the changes go: each class's work, time, calibration, uncertainty and basis."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .hardware import Roofs
from .ideal import ideal_seconds
from .profile import OpWork
from .rates import AllReduce


@dataclass
class ClassState:
    work: OpWork
    measured_ms: float
    ms: float
    achieved: float | None  # ideal ÷ measured on the source: the calibration
    unc: float = 0.0
    basis: list[str] = field(default_factory=list)

    def add_unc(self, u: float) -> None:
        self.unc = math.sqrt(self.unc**2 + u**2)


@dataclass
class StepState:
    classes: dict[str, ClassState]
    idle_ms: float
    idle_unc: float
    precision: str
    roofs: Roofs
    gpus: int
    batch: int
    tokens: int | None
    model: str
    matmul_params: int | None
    buckets: tuple[tuple[int, float], ...]
    grad_bytes: int
    allreduce: AllReduce | None
    channels_last: bool = False
    # Batch norm's time in the elementwise class (ms), where the recording's kernel lists give
    # it (cuDNN's `bn_*` kernels re-read from conv, or the elementwise class's `batch_norm`
    # entry of recordings before the norm class); None where it is not seen.
    norm_ms: float | None = None
    changes: list[str] = field(default_factory=list)
    basis: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def compute_ms(self) -> float:
        return sum(c.ms for c in self.classes.values())


def retime(c: ClassState, cls: str, roofs: Roofs, precision: str,
           fallback_ratio: float) -> float:
    """A class's new time: its ideal there ÷ the share it achieved here; a class without a
    calibration (no work recorded for it) moves by `fallback_ratio`."""
    if c.achieved:
        return ideal_seconds(cls, c.work, roofs, precision) * 1e3 / c.achieved
    return c.ms * fallback_ratio
