"""`gpuaudit tune`: the measured curve (throughput and memory against batch size), the chosen
point with its reason, the precision comparison, the accumulation plan, the loader workers
sweep and the settings to paste."""

from __future__ import annotations

from pydantic import Field

from .base import SCHEMA_VERSION, Record


class TrialResult(Record):
    batch: int
    precision: str
    ok: bool
    step_s: float | None = None
    samples_per_s: float | None = None
    peak_memory_bytes: int | None = None
    spread: float | None = None  # (p90 − p10) ÷ median step time
    reason: str | None = None


class AccumulationPlan(Record):
    target_global_batch: int
    micro_batch: int
    world_size: int
    accumulation_steps: int
    global_batch: int
    note: str | None = None


class TuneResult(Record):
    schema_version: int = SCHEMA_VERSION
    kind: str = "tune"
    model: str
    device: str
    precision: str  # of the batch search
    memory_capacity_bytes: int | None = None
    memory_limit_bytes: int | None = None  # capacity less the margin
    margin: float
    trials: tuple[TrialResult, ...] = ()
    chosen_batch: int | None = None
    reason: str
    precisions: tuple[TrialResult, ...] = ()  # at the chosen batch
    fastest_precision: str | None = None
    accumulation: AccumulationPlan | None = None
    loader_rates: dict[int, float] = Field(default_factory=dict)  # workers → samples/s
    loader_workers: int | None = None
    loader_reason: str | None = None
    settings: str = ""
    notes: tuple[str, ...] = ()
