"""What one training mode measured: the result `bench train` turns into Measurements (and,
with the op profile, into `model.OpProfile`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuaudit.workloads.flops import FlopCount
from gpuaudit.workloads.hosttime import HostTime
from gpuaudit.workloads.precision import TrainMode


@dataclass
class TrainResult:
    model: str
    mode: TrainMode
    batch_size: int
    tokens_per_sample: int | None
    step_times_s: list[float]
    warmup_s: float  # wall time of the warm-up steps: compilation and autotuning included
    warmup_steps: int
    peak_memory_bytes: int | None
    final_loss: float
    model_flops_per_step: int | None  # None: not known (user model and no count)
    flops_source: str
    flop_count: FlopCount | None = None  # FlopCounterMode's, per step, when asked
    expected_count_per_sample: int | None = None
    notes: list[str] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    ops: Any = None  # workloads.opcapture.Captured when the op profile was asked for
    host: HostTime | None = None  # the host's own time per step, when asked for
