"""What `recommend` is asked: the tasks (train, fine-tune, serve, a benchmarked workload), the
constraints (deadline, budget, currency, order), and the parsing of the quantities they take."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from gpuaudit import parse
from gpuaudit.cost.memory_fit import Checkpointing
from gpuaudit.errors import BadInputError
from gpuaudit.model.lite import Lite, frozen
from gpuaudit.specs.figures import PRECISIONS

if TYPE_CHECKING:  # the store's records and the full spec catalog: only for --run
    from gpuaudit.model.run import Run
    from gpuaudit.specs.catalog import SpecCatalog

TRAIN_PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")

# --- parsing (the one grammar, gpuaudit.parse; these names are kept for library users) ----


def parse_quantity(text: str, what: str = "value") -> float:
    """'7B' → 7e9, '1.3B', '125M', '1T', '300B', '70k', '2e9'; more than zero."""
    return parse.count(text, what, whole=False)


def parse_hours(text: str, what: str = "duration") -> float:
    """'14d' → 336, '36h', '90m', '2w'; a bare number is hours here. More than zero."""
    return parse.duration_s(text, what, bare_unit="h") / 3600


def check_precision(precision: str, allowed: Sequence[str] = TRAIN_PRECISIONS) -> str:
    key = precision.strip().lower()
    if key not in allowed:
        raise BadInputError(f"unknown precision {precision!r}; expected one of "
                            f"{', '.join(allowed)}")
    return key


# --- tasks -----------------------------------------------------------------------------------


@frozen(kw_only=True)
class TrainingTask(Lite):
    """What pre-training and fine-tuning share: the model (``params``, and ``layers`` and
    ``hidden`` where known), the ``tokens`` it sees and how it is trained."""

    params: float
    tokens: float
    precision: str = "bf16"
    optimizer: str = "adam"
    seq_len: int = 2048
    micro_batch: int = 1
    checkpointing: Checkpointing | Literal["auto"] = "auto"
    layers: int | None = None
    hidden: int | None = None

    def __post_init__(self) -> None:
        positive(params=self.params, tokens=self.tokens)
        check_precision(self.precision)


@frozen(kw_only=True)
class TrainTask(TrainingTask):
    """Pre-train a model of ``params`` parameters on ``tokens`` tokens."""

    kind: Literal["train"] = "train"


@frozen(kw_only=True)
class FinetuneTask(TrainingTask):
    """Fine-tune on ``tokens`` tokens: LoRA/QLoRA adapters or all the weights."""

    tokens: float = 1e8
    method: str = "lora"
    lora_rank: int = 16
    kind: Literal["finetune"] = "finetune"

    def __post_init__(self) -> None:
        TrainingTask.__post_init__(self)
        if self.method not in ("lora", "qlora", "full"):
            raise BadInputError(f"unknown fine-tuning method {self.method!r}; "
                                "expected lora, qlora or full")


@frozen
class ServeTask(Lite):
    """Serve ``qps`` requests/s of ``prompt_tokens`` in and ``output_tokens`` out, each
    output token within ``latency_ms`` of the last (TPOT) and the first within ``ttft_ms``
    (TTFT; None: no bound). Without ``prompt_tokens`` the prompt is ``context`` −
    ``output_tokens`` (``context``: the tokens of KV cache a sequence ends with)."""

    params: float
    qps: float
    latency_ms: float  # TPOT: time per output token
    context: int = 4096
    output_tokens: int = 256
    dtype: str = "bf16"
    hours: float = 1.0
    layers: int | None = None
    hidden: int | None = None
    kv_heads: int | None = None
    prompt_tokens: int | None = None
    ttft_ms: float | None = None
    kind: Literal["serve"] = "serve"

    def __post_init__(self) -> None:
        positive(params=self.params, qps=self.qps, latency_ms=self.latency_ms,
                  context=self.context, output_tokens=self.output_tokens, hours=self.hours)
        if self.ttft_ms is not None:
            positive(ttft_ms=self.ttft_ms)
        if self.prompt_tokens is not None:
            positive(prompt_tokens=self.prompt_tokens)
        elif self.context <= self.output_tokens:
            raise BadInputError(f"context {self.context} leaves no prompt beside "
                                f"{self.output_tokens} output tokens; give --prompt-tokens")
        check_precision(self.dtype, ("fp32", "bf16", "fp16", "fp8", "int8"))

    @property
    def prompt(self) -> int:
        """Prompt tokens per request."""
        return self.prompt_tokens if self.prompt_tokens is not None else \
            self.context - self.output_tokens


@frozen
class BenchmarkedTask(Lite):
    """A workload that runs ``hours`` on the benchmarked machine (``gpus`` × ``gpu_model``),
    whose speed is the measured ``rate_per_gpu`` (``unit``) of ``metric``."""

    run_id: str
    gpu_model: str
    gpus: int
    rate_per_gpu: float
    unit: str
    metric: str
    hours: float
    scale_by: str  # a precision (peak TFLOP/s ratio) or "bandwidth"
    kind: Literal["benchmarked"] = "benchmarked"

    def __post_init__(self) -> None:
        positive(rate_per_gpu=self.rate_per_gpu, hours=self.hours, gpus=self.gpus)


@frozen
class PredictedTask(BenchmarkedTask):
    """A benchmarked workload whose speed on each (GPU model, GPU count) is predicted from
    its recorded per-operator profile (`gpuaudit.predict`) instead of scaled by a spec
    ratio. ``predicted`` holds (GPU model, GPUs, samples/s per GPU or None, why): the rate
    includes that many GPUs' data-parallel scaling; None means it cannot run there."""

    predicted: tuple[tuple[str, int, float | None, str], ...] = ()
    # The recorded step's DDP gradient buckets (bytes, share of the backward done when ready),
    # its samples per GPU and the backward's share of the step: for the all-reduce across
    # nodes (measured.predicted_exposed_s).
    grad_buckets: tuple[tuple[int, float], ...] = ()
    samples_per_step: int = 1
    backward_share: float = 2 / 3

    def rate_on(self, gpu_model: str, gpus: int) -> tuple[float | None, str]:
        for model, count, rate, why in self.predicted:
            if model == gpu_model and count == gpus:
                return rate, why
        return None, f"no prediction for {gpus} × {gpu_model}"


Task = TrainTask | FinetuneTask | ServeTask | BenchmarkedTask


@frozen
class Constraints(Lite):
    deadline_hours: float | None = None
    budget: float | None = None
    currency: str = "USD"
    sort: Literal["cost", "time"] = "cost"

    def __post_init__(self) -> None:
        if self.deadline_hours is not None and not self.deadline_hours > 0:
            raise BadInputError(f"deadline must be more than zero, not {self.deadline_hours:g}")
        if self.budget is not None and not self.budget > 0:
            raise BadInputError(f"budget must be more than zero, not {self.budget:g}")
        if self.sort not in ("cost", "time"):
            raise BadInputError(f"sort must be cost or time, not {self.sort!r}")


def positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0 or math.isinf(value):
            raise BadInputError(f"{name.replace('_', ' ')} must be more than zero, not {value:g}")


def task_from_run(run: Run, hours: float, metric: str = "matmul/bf16",
                  specs: SpecCatalog | None = None) -> BenchmarkedTask:
    """The benchmarked workload: the median of ``metric`` (suite/name) over the run's GPUs."""
    from statistics import median

    from gpuaudit.specs import catalog as spec_catalog

    specs = specs or spec_catalog.load_catalog()
    suite, _, name = metric.partition("/")
    values = [m.value for m in run.measurements
              if m.suite == suite and m.name == name and m.value is not None and m.value > 0]
    if not values:
        raise BadInputError(f"run {run.id}: no {metric} measurement to base the estimate on")
    unit = next(m.unit for m in run.measurements if m.suite == suite and m.name == name)
    gpus = run.machine.gpus if run.machine else ()
    if not gpus:
        raise BadInputError(f"run {run.id}: the run has no GPU to compare offers against")
    spec = specs.lookup(nvml_name=gpus[0].name, pci_device_id=gpus[0].pci_device_id)
    if spec is None:
        raise BadInputError(f"run {run.id}: GPU {gpus[0].name!r} is not in the spec catalog")
    measured = {m.gpu_index for m in run.measurements if m.suite == suite and m.name == name
                and m.value is not None}
    scale_by = name if name in PRECISIONS else ("bandwidth" if unit.endswith("B/s") else "")
    if not scale_by:  # a training step (bench train): by the peak at the precision it ran in
        precision = next((m.params.get("precision") for m in run.measurements
                          if m.suite == suite and m.name == name), None)
        scale_by = precision if isinstance(precision, str) and precision in PRECISIONS else ""
    if not scale_by:
        raise BadInputError(f"run {run.id}: cannot scale {metric} ({unit}) between GPU models")
    return BenchmarkedTask(run_id=run.id, gpu_model=spec.id, gpus=max(1, len(measured)),
                           rate_per_gpu=median(values), unit=unit, metric=metric,
                           hours=hours, scale_by=scale_by)


