"""What a prediction says: the source and target scenarios, the step time and throughput
with their uncertainty band, the time of each operator class, and the basis of each figure.
Units in field names; one `schema_version` for the document."""

from __future__ import annotations

from pydantic import Field

from gpuaudit.model.base import Record

# The version of the predict document; bumped when it changes shape incompatibly.
PREDICT_SCHEMA_VERSION = 1


class Scenario(Record):
    """Where and how a workload runs."""

    gpu: str  # spec id, e.g. "h200-sxm"
    gpu_name: str
    gpus: int = Field(ge=1)
    precision: str
    model: str
    mode: str
    batch_per_gpu: int = Field(ge=1)
    tokens_per_sample: int | None = None
    matmul_params: int | None = None


class ClassTime(Record):
    """One operator class of the step: measured in the source, predicted in the target."""

    op_class: str
    measured_ms: float
    predicted_ms: float
    uncertainty_pct: float  # ± share of the predicted time
    # The share of its ideal time (`predict.ideal`: the measured matmul and copy rates after
    # quantization, attention's causal work and exponentials, convolutions' roofline) the
    # class achieved in the source: the calibration. None for a class the source lacks.
    achieved_pct: float | None = None
    basis: str


class Prediction(Record):
    schema_version: int = PREDICT_SCHEMA_VERSION
    run_id: str
    rates_run_id: str | None
    source: Scenario
    target: Scenario
    changes: tuple[str, ...]  # "params", "precision", "gpu", "gpus" in the order applied
    measured_step_ms: float  # the source's timed step (p50)
    step_ms: float
    step_ms_low: float
    step_ms_high: float
    samples_per_s: float  # all GPUs
    samples_per_s_low: float
    samples_per_s_high: float
    tokens_per_s: float | None = None
    tokens_per_s_low: float | None = None
    tokens_per_s_high: float | None = None
    uncertainty_pct: float  # half the band's width, as a share of step_ms
    idle_ms: float  # host time the GPU waits per step (launch gaps), kept from the source
    allreduce_ms: float | None = None  # gradient all-reduce per step (DDP)
    exposed_allreduce_ms: float | None = None  # the part the backward does not hide
    classes: tuple[ClassTime, ...] = ()
    basis: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    # recorded on a CPU: its operator times are the CPU's, only scaled by the GPU's rates;
    # the figures show the arithmetic, not what the GPU will do
    dry_run: bool = False
