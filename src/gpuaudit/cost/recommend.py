"""`recommend`: which catalog offers to rent for a task, ranked by estimated cost (or time).

The model, in one paragraph (docs/cost-recommend.md has the rest): a training task is
6·N·T FLOPs (fine-tuning with LoRA 4·N·T: no weight gradients for the frozen base); an offer
delivers peak (datasheet, dense, the task's precision) × MFU × GPUs × a scaling efficiency;
the memory plan (memory_fit) must fit with a margin, using the least ZeRO sharding that fits;
nodes are added only when the memory or a deadline needs them. Serving is decode-bound: a
decode step reads the weights plus the batch's KV cache from memory, so the step time is
bytes ÷ (bandwidth × efficiency), or the compute time if that is longer; the batch is the
largest that keeps a step within the latency SLO and the KV cache within memory. A benchmarked
workload uses the run's measured rate on the same GPU model, scaled by the spec ratio on
others. The pricing model (on-demand, reserved, spot) and its figures come from
cost/pricing.py: billing rounding, whole reserved terms, spot at Daly's checkpoint interval
with the expected completion time; the choice is compare_job's (the cheapest that meets the
deadline). Everything here is an estimate and says so.

Speed matters (10,000 offers in well under 200 ms): each offer is reduced to numbers first;
hardware plans and pricing.py's figures (linear in the price) are computed once per distinct
plan and billing unit; reasons and records are built only for the offers shown.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from gpuaudit.cost.memory_fit import (
    Checkpointing,
    dtype_bytes,
    finetune_memory,
    gb,
    model_shape,
    training_memory,
)
from gpuaudit.cost.pricing import (
    compare_job,
    make_job,
    mtbi_hours_from_rate,
    on_demand_cost,
    reserved_cost,
    spot_cost,
)
from gpuaudit.errors import BadInputError
from gpuaudit.model.cost import Billing, Offer
from gpuaudit.model.pricing import JobComparison
from gpuaudit.model.recommendation import (
    Assumptions,
    Exclusion,
    MemoryEstimate,
    ModelShape,
    PricingModel,
    Recommendation,
    RecommendResult,
)
from gpuaudit.model.run import Run
from gpuaudit.specs import catalog as spec_catalog
from gpuaudit.specs.catalog import PRECISIONS, GpuSpec, SpecCatalog

TRAIN_PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")

# --- parsing ---------------------------------------------------------------------------------

_SUFFIX = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
_QUANTITY = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMBGT]?)\s*$",
                       re.IGNORECASE)
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(s|m|min|h|d|w)?\s*$", re.IGNORECASE)
_DURATION_HOURS = {"s": 1 / 3600, "m": 1 / 60, "min": 1 / 60, "h": 1.0, "d": 24.0, "w": 168.0}


def parse_quantity(text: str, what: str = "value") -> float:
    """'7B' → 7e9, '1.3B', '125M', '1T', '300B', '70k', '2e9'; more than zero."""
    m = _QUANTITY.match(str(text))
    if not m:
        raise BadInputError(f"{what} {text!r}: expected a number with an optional K, M, B or T "
                            "suffix, e.g. 7B, 125M, 1T")
    value = float(m.group(1)) * _SUFFIX[m.group(2).upper()]
    if not value > 0 or math.isinf(value):
        raise BadInputError(f"{what} {text!r}: must be more than zero")
    return value


def parse_hours(text: str, what: str = "duration") -> float:
    """'14d' → 336, '36h', '90m', '2w'; a bare number is hours. More than zero."""
    m = _DURATION.match(str(text))
    if not m:
        raise BadInputError(f"{what} {text!r}: expected a duration like 36h, 14d, 2w")
    value = float(m.group(1)) * _DURATION_HOURS[(m.group(2) or "h").lower()]
    if value <= 0:
        raise BadInputError(f"{what} {text!r}: must be more than zero")
    return value


def check_precision(precision: str, allowed: Sequence[str] = TRAIN_PRECISIONS) -> str:
    key = precision.strip().lower()
    if key not in allowed:
        raise BadInputError(f"unknown precision {precision!r}; expected one of "
                            f"{', '.join(allowed)}")
    return key


# --- tasks -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainTask:
    """Pre-train a model of ``params`` parameters on ``tokens`` tokens."""

    params: float
    tokens: float
    precision: str = "bf16"
    optimizer: str = "adam"
    seq_len: int = 2048
    micro_batch: int = 1
    checkpointing: Checkpointing | Literal["auto"] = "auto"
    layers: int | None = None
    hidden: int | None = None
    kind: Literal["train"] = "train"

    def __post_init__(self) -> None:
        _positive(params=self.params, tokens=self.tokens)
        check_precision(self.precision)


@dataclass(frozen=True)
class FinetuneTask:
    """Fine-tune on ``tokens`` tokens: LoRA/QLoRA adapters or all the weights."""

    params: float
    tokens: float = 1e8
    method: str = "lora"
    lora_rank: int = 16
    precision: str = "bf16"
    optimizer: str = "adam"
    seq_len: int = 2048
    micro_batch: int = 1
    checkpointing: Checkpointing | Literal["auto"] = "auto"
    layers: int | None = None
    hidden: int | None = None
    kind: Literal["finetune"] = "finetune"

    def __post_init__(self) -> None:
        _positive(params=self.params, tokens=self.tokens)
        check_precision(self.precision)
        if self.method not in ("lora", "qlora", "full"):
            raise BadInputError(f"unknown fine-tuning method {self.method!r}; "
                                "expected lora, qlora or full")


@dataclass(frozen=True)
class ServeTask:
    """Serve ``qps`` requests/s, each decoding ``output_tokens`` tokens at most
    ``latency_ms`` per output token, with ``context`` tokens of KV cache per sequence."""

    params: float
    qps: float
    latency_ms: float
    context: int = 4096
    output_tokens: int = 256
    dtype: str = "bf16"
    hours: float = 1.0
    layers: int | None = None
    hidden: int | None = None
    kv_heads: int | None = None
    kind: Literal["serve"] = "serve"

    def __post_init__(self) -> None:
        _positive(params=self.params, qps=self.qps, latency_ms=self.latency_ms,
                  context=self.context, output_tokens=self.output_tokens, hours=self.hours)
        check_precision(self.dtype, ("fp32", "bf16", "fp16", "fp8", "int8"))


@dataclass(frozen=True)
class BenchmarkedTask:
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
        _positive(rate_per_gpu=self.rate_per_gpu, hours=self.hours, gpus=self.gpus)


Task = TrainTask | FinetuneTask | ServeTask | BenchmarkedTask


@dataclass(frozen=True)
class Constraints:
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


def _positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0 or math.isinf(value):
            raise BadInputError(f"{name.replace('_', ' ')} must be more than zero, not {value:g}")


def task_from_run(run: Run, hours: float, metric: str = "matmul/bf16",
                  specs: SpecCatalog | None = None) -> BenchmarkedTask:
    """The benchmarked workload: the median of ``metric`` (suite/name) over the run's GPUs."""
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
    if not scale_by:
        raise BadInputError(f"run {run.id}: cannot scale {metric} ({unit}) between GPU models")
    return BenchmarkedTask(run_id=run.id, gpu_model=spec.id, gpus=max(1, len(measured)),
                           rate_per_gpu=statistics.median(values), unit=unit, metric=metric,
                           hours=hours, scale_by=scale_by)


# --- per-offer evaluation --------------------------------------------------------------------


@dataclass
class _Ok:
    offer: Offer
    nodes: int
    pricing: PricingModel
    price_per_hour: float  # all nodes
    hours: float
    cost: float
    rate: float
    memory_bytes: float | None  # per GPU
    sharding: str | None
    memory_basis: tuple[str, ...]
    measured: bool
    notes: Callable[[], list[str]]  # built only for the offers shown


@dataclass
class _Out:
    offer: Offer
    kind: str
    sort_price: float
    reason: Callable[[], str]


@dataclass
class _Ctx:
    task: Task
    cons: Constraints
    ass: Assumptions
    specs: SpecCatalog
    flops: float = 0.0  # train/fine-tune/benchmarked work, in the rate's unit × seconds
    shape: ModelShape | None = None
    memo: dict[Any, Any] = field(default_factory=dict)


def _gpu_memory(offer: Offer, spec: GpuSpec) -> tuple[float, str]:
    # The catalog's figure wins (it describes the instance sold); label it as it was given.
    if offer.gpu_memory_gib:
        return offer.gpu_memory_gib * 2**30, f"{offer.gpu_memory_gib:g} GiB"
    return spec.memory_gb * 1e9, f"{spec.memory_gb:g} GB"


def _intra(spec: GpuSpec, count: int, ass: Assumptions) -> float:
    if count <= 1:
        return 1.0
    return (ass.intra_node_efficiency_nvlink if spec.nvlink_bandwidth_gbps
            else ass.intra_node_efficiency_pcie)


def _efficiency(spec: GpuSpec, count: int, nodes: int, ass: Assumptions) -> float:
    return _intra(spec, count, ass) * (ass.inter_node_efficiency if nodes > 1 else 1.0)


# --- pricing: cost/pricing.py's models, computed once per (plan, billing) -----------------
#
# pricing.py is the one model of billing, reserved terms and spot (Daly's checkpoint interval
# and expected completion time). Each of its costs is linear in the price: billed hours ×
# price × instances, whole terms × price × instances, expected billed hours × spot price ×
# instances. So its functions run once per distinct (hours, nodes, billing, minimum), with
# every price set to 1, and each offer's cost is that figure × its price: 10,000 offers with
# a few dozen hardware plans and three billing units need a few hundred calls, not 40,000.


def _for_pricing(offer: Offer) -> tuple[Offer, bool]:
    """The offer as pricing.py takes it, and whether its billing unit was listed. A catalog
    row without one is billed per second with no minimum (the finest granularity: the
    cheapest reading, which the reasons state)."""
    billing = getattr(offer, "billing", None)
    minimum = getattr(offer, "billing_minimum_s", None)
    if billing is None or minimum is None:
        return offer.model_copy(update={"billing": billing or Billing.SECOND,
                                        "billing_minimum_s": minimum or 0.0}), billing is not None
    return offer, True


def _spot_inputs(ass: Assumptions) -> dict[str, float]:
    """pricing.spot_cost's arguments: the per-instance MTBI from the probability of an
    interruption within an hour (pricing.mtbi_hours_from_rate), checkpoint and restart."""
    return {"mtbi_hours": mtbi_hours_from_rate(ass.spot_interruptions_per_hour, 1.0),
            "checkpoint_s": ass.checkpoint_minutes * 60,
            "restart_s": ass.restart_minutes * 60}


@dataclass(frozen=True)
class _Unit:
    """pricing.py's figures for one plan at a price of 1 per hour (all nodes)."""

    hours: float  # wall-clock hours without interruptions
    on_demand: float  # cost per unit price: billed hours × nodes
    reserved_1y: float  # whole terms × nodes
    reserved_3y: float
    spot_hours: float | None  # expected wall-clock hours on spot (Daly); None: not offered
    spot: float | None  # expected cost per unit price


_UNIT_PRICES = {"on_demand_price_per_hour": 1.0, "spot_price_per_hour": 1.0,
                "reserved_1y_price_per_hour": 1.0, "reserved_3y_price_per_hour": 1.0}


def _unit(offer: Offer, hours: float, nodes: int, ctx: _Ctx, spot_ok: bool) -> _Unit:
    billing = getattr(offer, "billing", None) or Billing.SECOND
    minimum = getattr(offer, "billing_minimum_s", None) or 0.0
    key = ("unit", hours, nodes, billing, minimum, spot_ok)
    unit = ctx.memo.get(key)
    if unit is None:
        one = offer.model_copy(update={**_UNIT_PRICES, "billing": billing,
                                       "billing_minimum_s": minimum})
        job = make_job(one, wall_hours=hours, instances=nodes)
        spot = spot_cost(one, job, **_spot_inputs(ctx.ass)) if spot_ok else None
        unit = ctx.memo[key] = _Unit(
            hours, on_demand_cost(one, job).cost, reserved_cost(one, job, 1).cost,
            reserved_cost(one, job, 3).cost, spot.expected_wall_hours if spot else None,
            spot.expected_cost if spot else None)
    return unit  # type: ignore[no-any-return]


@dataclass
class _Price:
    model: PricingModel
    per_hour: float  # all nodes
    hours: float  # expected wall-clock hours under this model
    cost: float


def _price_options(offer: Offer, unit: _Unit, nodes: int) -> list[_Price]:
    """Each pricing model the offer has a price for, with the task's (expected) hours and
    cost: pricing.py's figure at a unit price × the offer's price."""
    out: list[_Price] = []
    for model, price, cost in (
            (PricingModel.ON_DEMAND, offer.on_demand_price_per_hour, unit.on_demand),
            (PricingModel.RESERVED_1Y, offer.reserved_1y_price_per_hour, unit.reserved_1y),
            (PricingModel.RESERVED_3Y, offer.reserved_3y_price_per_hour, unit.reserved_3y)):
        if price is not None and price > 0:
            out.append(_Price(model, price * nodes, unit.hours, cost * price))
    spot = offer.spot_price_per_hour
    if unit.spot is not None and unit.spot_hours is not None and spot is not None and spot > 0:
        out.append(_Price(PricingModel.SPOT, spot * nodes, unit.spot_hours, unit.spot * spot))
    return out


def _pick_price(options: list[_Price], deadline: float | None) -> tuple[_Price | None, str]:
    """pricing.compare_job's rule: the cheapest option (ties: the shorter) whose expected
    wall time meets the deadline; '' or the deadline miss when none does. (A test checks
    that both pick the same on every offer of a catalog.)"""
    if not options:
        return None, ""
    meeting = [p for p in options if deadline is None or p.hours <= deadline]
    if not meeting:
        best = min(options, key=lambda p: p.hours)
        return None, f"{best.hours:,.0f} h at best ({best.model.value})"
    return min(meeting, key=lambda p: (p.cost, p.hours)), ""


def _comparison(offer: Offer, hours: float, nodes: int, ctx: _Ctx, spot_ok: bool,
                deadline: float | None) -> tuple[JobComparison, bool]:
    """pricing.compare_job on the offer itself: the records the reasons quote (built only
    for the offers shown)."""
    priced, billing_known = _for_pricing(offer)
    job = make_job(priced, wall_hours=hours, instances=nodes)
    spot = _spot_inputs(ctx.ass) if spot_ok else {}
    return compare_job(priced, job, deadline_hours=deadline, **spot), billing_known


def _exclude(offer: Offer, kind: str, reason: Callable[[], str]) -> _Out:
    price = offer.on_demand_price_per_hour or offer.spot_price_per_hour or math.inf
    return _Out(offer, kind, price, reason)


# --- train and fine-tune ---------------------------------------------------------------------


def _modes(ctx: _Ctx) -> tuple[Checkpointing, ...]:
    t = ctx.task
    assert isinstance(t, TrainTask | FinetuneTask)
    # "auto": selective recomputation first (almost free), full checkpointing only when the
    # activations would not fit otherwise (it costs one more forward pass).
    return ("selective", "full") if t.checkpointing == "auto" else (t.checkpointing,)


def _memory_plan(ctx: _Ctx, gpus: int, usable: float) -> MemoryEstimate | None:
    """The least ZeRO sharding that fits (less sharding, less communication), with the
    least recomputation, or None."""
    key = ("plan", gpus, usable)
    if key in ctx.memo:
        return ctx.memo[key]  # type: ignore[no-any-return]
    plan = None
    for mode in _modes(ctx):
        for stage in (0, 1, 2, 3) if gpus > 1 else (0,):
            est = _train_memory(ctx, stage, gpus, mode)
            if est.per_gpu_bytes <= usable:
                plan = est
                break
        if plan is not None:
            break
    ctx.memo[key] = plan
    return plan


def _recompute_factor(ctx: _Ctx, plan: MemoryEstimate | None) -> float:
    """Full checkpointing runs the forward pass twice: (k + 2)/k of the k·N·T model FLOPs."""
    if plan is None or plan.checkpointing != "full":
        return 1.0
    k = ctx.memo["flops_factor"]
    return float((k + 2) / k)


def _train_memory(ctx: _Ctx, stage: int, gpus: int, mode: Checkpointing) -> MemoryEstimate:
    key = ("mem", stage, gpus, mode)
    if key not in ctx.memo:
        t = ctx.task
        assert ctx.shape is not None and isinstance(t, TrainTask | FinetuneTask)
        common: dict[str, Any] = dict(precision=t.precision, optimizer=t.optimizer,
                                      zero_stage=stage, gpus=gpus, micro_batch=t.micro_batch,
                                      seq_len=t.seq_len, checkpointing=mode)
        if isinstance(t, FinetuneTask):
            ctx.memo[key] = finetune_memory(ctx.shape, method=t.method, lora_rank=t.lora_rank,
                                            **common)
        else:
            ctx.memo[key] = training_memory(ctx.shape, **common)
    return ctx.memo[key]  # type: ignore[no-any-return]


def _min_gpus_zero3(ctx: _Ctx, usable: float) -> int | None:
    """GPUs of this size needed with ZeRO-3; None when the activations alone do not fit."""
    one = _train_memory(ctx, 3, 1, _modes(ctx)[-1])
    room = usable - one.activations_bytes
    if room <= 0:
        return None
    return max(1, math.ceil(one.states_total_bytes / room))


@dataclass
class _Hw:
    """What an offer's hardware gives the task, whatever its price: shared by every offer with
    the same GPU model, count and memory (a 10,000-row catalog has a few dozen of these)."""

    spec: GpuSpec
    mem_label: str
    usable: float  # per GPU
    nodes: int
    hours: float  # on-demand wall-clock hours
    rate: float
    plan: MemoryEstimate | None = None
    measured: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


_Reject = tuple[str, Callable[[], str]]


def _hardware(offer: Offer, ctx: _Ctx, build: Callable[[Offer, _Ctx], _Hw | _Reject]
              ) -> _Hw | _Reject:
    key = ("hw", offer.gpu_model, offer.gpu_count, offer.gpu_memory_gib)
    hw = ctx.memo.get(key)
    if hw is None:
        hw = ctx.memo[key] = build(offer, ctx)
    return hw  # type: ignore[no-any-return]


def _priced(offer: Offer, ctx: _Ctx) -> _Out | None:
    if offer.currency != ctx.cons.currency:
        return _exclude(offer, "currency", lambda: f"priced in {offer.currency}; ranking in "
                        f"{ctx.cons.currency} (no exchange rates)")
    if not (offer.on_demand_price_per_hour or offer.spot_price_per_hour
            or offer.reserved_1y_price_per_hour or offer.reserved_3y_price_per_hour):
        return _exclude(offer, "price", lambda: "no price")
    return None


def _spec_of(offer: Offer, ctx: _Ctx, precision: str | None) -> GpuSpec | _Reject:
    spec = ctx.specs.get(offer.gpu_model)
    if spec is None:
        return "spec", lambda: (f"GPU {offer.gpu_model!r} is not in the spec catalog: no "
                                "peak to estimate from")
    if precision is not None and spec.peak(precision) is None:
        return "spec", lambda: (f"{spec.name} publishes no {precision} peak (not supported "
                                "by its tensor cores)")
    return spec


def _compute_hw(offer: Offer, ctx: _Ctx) -> _Hw | _Reject:
    """Train, fine-tune, benchmarked: work ÷ rate on the fewest nodes that fit (and meet the
    deadline at on-demand speed)."""
    t = ctx.task
    ass = ctx.ass
    precision = t.precision if isinstance(t, TrainTask | FinetuneTask) else None
    spec = _spec_of(offer, ctx, precision)
    if isinstance(spec, tuple):
        return spec
    mem_bytes, mem_label = _gpu_memory(offer, spec)
    usable = mem_bytes * (1 - ass.memory_margin)
    count = offer.gpu_count

    measured = False
    if isinstance(t, BenchmarkedTask):
        base = ctx.specs.get(t.gpu_model)
        if offer.gpu_model == t.gpu_model:
            per_gpu, measured = t.rate_per_gpu, True
        else:
            assert base is not None
            mine, theirs = _scale_figures(t.scale_by, spec, base)
            if mine is None or theirs is None:
                return "spec", lambda: (f"{spec.name} publishes no {t.scale_by} figure to "
                                        "scale the measurement by")
            per_gpu = t.rate_per_gpu * mine / theirs
        unit_scale = 1.0  # rates stay in the measurement's unit
    else:
        assert precision is not None
        peak = spec.peak(precision)
        assert peak is not None
        per_gpu = peak * ass.mfu  # TFLOP/s
        unit_scale = 1e12

    # Nodes: the fewest that hold the memory plan, more only if the deadline needs them.
    nodes = 1
    plan: MemoryEstimate | None = None
    if ctx.shape is not None:
        plan = _memory_plan(ctx, count, usable)
        if plan is None:
            need = _min_gpus_zero3(ctx, usable)
            if need is None:
                act = _train_memory(ctx, 3, 1, _modes(ctx)[-1]).activations_bytes
                return "memory", lambda: (f"activations alone need {gb(act)} per GPU; has "
                                          f"{count} × {mem_label}")
            nodes = math.ceil(need / count)
            if nodes > ass.max_nodes:
                return "memory", lambda: (f"needs {need} × {mem_label} with ZeRO-3, more than "
                                          f"{ass.max_nodes} nodes; has {count} × {mem_label}")
            plan = _memory_plan(ctx, nodes * count, usable)
            if plan is None:  # the ceiling above makes this unreachable; kept as a guard
                return "memory", lambda: (f"needs {need} × {mem_label} with ZeRO-3; has "
                                          f"{count} × {mem_label}")

    def rate(n: int) -> float:
        return per_gpu * n * count * _efficiency(spec, count, n, ass)

    work = ctx.flops * _recompute_factor(ctx, plan)
    hours = work / (rate(nodes) * unit_scale) / 3600
    deadline = ctx.cons.deadline_hours
    if deadline is not None and hours > deadline:
        # Solve n·count·per_gpu·eff ≥ work/deadline with the multi-node efficiency.
        eff = _efficiency(spec, count, 2, ass)
        wanted = math.ceil(work / (deadline * 3600 * unit_scale * per_gpu * count * eff)
                           - 1e-9)
        if wanted > ass.max_nodes:
            h1, n1 = hours, nodes  # n1 > 1 when the memory plan already needed more nodes
            where = "one node" if n1 == 1 else f"the {n1} nodes memory needs"
            return "deadline", lambda: (f"{h1:,.0f} h on {where}; needs {wanted} nodes to "
                                        f"finish in {deadline:g} h, more than "
                                        f"{ass.max_nodes}")
        nodes = max(nodes, wanted)
        if plan is not None and plan.gpus != nodes * count:
            # More GPUs never need more memory per GPU: the plan (and its recomputation)
            # can only get lighter, so the node count still meets the deadline.
            plan = _memory_plan(ctx, nodes * count, usable) or plan
            work = ctx.flops * _recompute_factor(ctx, plan)
        hours = work / (rate(nodes) * unit_scale) / 3600
    return _Hw(spec, mem_label, usable, nodes, hours, rate(nodes), plan, measured,
               {"mem_bytes": mem_bytes})


def _eval_compute(offer: Offer, ctx: _Ctx) -> _Ok | _Out:
    t = ctx.task
    cons = ctx.cons
    bad = _priced(offer, ctx)
    if bad is not None:
        return bad
    hw = _hardware(offer, ctx, _compute_hw)
    if isinstance(hw, tuple):
        return _exclude(offer, *hw)
    deadline = cons.deadline_hours
    options = _price_options(offer, _unit(offer, hw.hours, hw.nodes, ctx, True), hw.nodes)
    price, miss = _pick_price(options, deadline)
    if price is None:
        if miss:
            return _exclude(offer, "deadline", lambda: f"misses the {deadline:g} h deadline: "
                            f"{miss}")
        return _exclude(offer, "price", lambda: "no usable price")
    if cons.budget is not None and price.cost > cons.budget:
        cost = price.cost
        return _exclude(offer, "budget", lambda: f"costs {cost:,.0f} {offer.currency} "
                        f"({price.model.value}), over the budget of {cons.budget:,.0f}")

    def notes() -> list[str]:
        out = []
        plan = hw.plan
        if isinstance(t, BenchmarkedTask):
            out.append(f"measured {t.metric} on {t.gpu_model}" if hw.measured else
                       f"scaled from {t.gpu_model} by the {t.scale_by} spec ratio (estimate)")
            base = ctx.specs.get(t.gpu_model)
            if base is not None and hw.extra["mem_bytes"] < base.memory_gb * 1e9 * 0.98:
                out.append(f"memory not checked: {hw.mem_label} per GPU, less than the "
                           f"benchmarked {base.name}'s {base.memory_gb:g} GB")
        if plan is not None:
            out.append(f"memory {gb(plan.per_gpu_bytes)} of {gb(hw.usable)} usable per GPU"
                       + (f" with {plan.sharding}" if plan.sharding != "none" else ""))
            if plan.checkpointing == "full":
                out.append("full activation checkpointing to fit: one more forward pass "
                           f"(×{_recompute_factor(ctx, plan):.3g} compute)")
        if hw.nodes > 1:
            out.append(f"{hw.nodes} nodes: assumes a fast network between them (the catalog "
                       "does not say)")
        cmp, billing_known = _comparison(offer, hw.hours, hw.nodes, ctx, True, deadline)
        out.extend(_pricing_reasons(price, cmp, billing_known, deadline))
        return out

    plan = hw.plan
    return _Ok(offer, hw.nodes, price.model, price.per_hour, price.hours, price.cost,
               hw.rate, plan.per_gpu_bytes if plan else None,
               plan.sharding if plan else None, plan.basis if plan else (), hw.measured, notes)


def _scale_figures(scale_by: str, spec: GpuSpec, base: GpuSpec
                   ) -> tuple[float | None, float | None]:
    if scale_by == "bandwidth":
        return spec.memory_bandwidth_gbps, base.memory_bandwidth_gbps
    return spec.peak(scale_by), base.peak(scale_by)


def _pricing_reasons(price: _Price, cmp: JobComparison, billing_known: bool,
                     deadline: float | None, serving: bool = False) -> list[str]:
    """Why this pricing model, quoting pricing.compare_job's records for the offer."""
    out = []
    od, spot = cmp.on_demand, cmp.spot
    if price.model is PricingModel.SPOT and spot is not None:
        saves = f", {1 - price.cost / od.cost:.0%} cheaper than on-demand" if od else ""
        plan = spot.plan
        out.append(f"spot: expected cost with checkpoints and restarts{saves} "
                   f"(+{spot.overhead_pct / 100:.0%} time for interruptions)")
        out.append(f"spot: a {plan.checkpoint_s / 60:g}-min checkpoint every "
                   f"{plan.interval_s / 60:.0f} min of work (Daly's interval; Young's "
                   f"{plan.young_interval_s / 60:.0f}), {spot.expected_interruptions:.2g} "
                   f"interruptions expected (MTBI {plan.mtbi_hours:.3g} h for the job), each "
                   f"losing the work since the last checkpoint and {plan.restart_s / 60:g} min "
                   "to restart")
    elif price.model in (PricingModel.RESERVED_1Y, PricingModel.RESERVED_3Y):
        res = cmp.reserved_1y if price.model is PricingModel.RESERVED_1Y else cmp.reserved_3y
        assert res is not None
        terms = f"{res.terms_needed} terms" if res.terms_needed > 1 else "the term"
        text = (f"{price.model.value}: paying {terms} in full ({res.term_cost:,.0f}) costs "
                "less than on-demand" + (f" ({od.cost:,.0f})" if od else ""))
        if res.break_even_utilization is not None:
            used = res.wall_hours / (res.terms_needed * res.term_hours)
            text += (f": the job uses {used:.0%} of the reserved hours, above the "
                     f"{res.break_even_utilization:.0%} break-even")
        out.append(text)
    elif serving:
        pass
    elif spot is not None and deadline is not None and spot.expected_wall_hours > deadline:
        out.append("on-demand: spot's interruptions would miss the deadline")
    elif spot is None:
        out.append("on-demand: no spot price listed")
    else:
        out.append("on-demand: cheapest option")
    if serving:
        out.append(f"{price.model.value}: spot is not used for serving (interruptions break "
                   "the SLO)")
    if not billing_known:
        out.append("billing unit not listed: billed per second, no minimum (assumed)")
    elif cmp.on_demand is not None and cmp.on_demand.billing is not Billing.SECOND:
        out.append(f"billed per {cmp.on_demand.billing.value}, rounded up")
    return out


# --- serve -----------------------------------------------------------------------------------


def _serve_hw(offer: Offer, ctx: _Ctx) -> _Hw | _Reject:
    """One replica = one instance, tensor parallel over its GPUs; the largest batch that keeps
    a decode step within the SLO and the KV cache within memory; replicas for the QPS."""
    t = ctx.task
    assert isinstance(t, ServeTask) and ctx.shape is not None
    ass = ctx.ass
    spec = _spec_of(offer, ctx, t.dtype)
    if isinstance(spec, tuple):
        return spec
    mem_bytes, mem_label = _gpu_memory(offer, spec)
    count = offer.gpu_count
    usable = count * mem_bytes * (1 - ass.memory_margin)
    weights, kv_seq = ctx.memo["serve"]
    if weights + kv_seq > usable:
        return "memory", lambda: (f"weights {gb(weights)} + one sequence's KV cache "
                                  f"{gb(kv_seq)} need {gb(weights + kv_seq)}; has {count} × "
                                  f"{mem_label} ({gb(usable)} usable)")
    eff = _intra(spec, count, ass)
    bandwidth = count * spec.memory_bandwidth_gbps * 1e9 * ass.bandwidth_efficiency * eff
    peak = spec.peak(t.dtype)
    assert peak is not None
    compute = count * peak * 1e12 * ass.mfu * eff
    slo = t.latency_ms / 1000
    floor_s = weights / bandwidth
    if floor_s > slo:
        return "latency", lambda: (f"reading the weights takes {floor_s * 1e3:.3g} ms per "
                                   f"token on {count} × {spec.name}; SLO {t.latency_ms:g} ms")
    b_mem = math.floor((usable - weights) / kv_seq)
    b_bw = math.floor((slo * bandwidth - weights) / kv_seq)
    b_fl = math.floor(slo * compute / (2 * t.params))
    batch = max(1, min(b_mem, b_bw, b_fl))
    mem_time = (weights + batch * kv_seq) / bandwidth
    flop_time = 2 * t.params * batch / compute
    step = max(mem_time, flop_time)
    tokens_s = batch / step
    per_replica = tokens_s / t.output_tokens
    replicas = math.ceil(t.qps / per_replica - 1e-9)
    if replicas > ass.max_nodes:
        return "capacity", lambda: (f"needs {replicas} replicas for {t.qps:g} QPS, more than "
                                    f"{ass.max_nodes}")
    limit = "memory" if batch == b_mem else "the latency SLO"
    bound = "memory-bandwidth" if mem_time >= flop_time else "compute"
    notes = [
        f"batch {batch} per replica (limited by {limit}): {step * 1e3:.3g} ms per token, "
        f"{bound}-bound",
        f"{tokens_s:,.0f} tokens/s = {per_replica:.3g} requests/s per replica of "
        f"{t.output_tokens} tokens; {replicas} replica(s) for {t.qps:g} QPS",
    ]
    return _Hw(spec, mem_label, usable / count, replicas, t.hours, tokens_s * replicas,
               extra={"memory": (weights + batch * kv_seq) / count, "notes": notes})


def _eval_serve(offer: Offer, ctx: _Ctx) -> _Ok | _Out:
    t = ctx.task
    assert isinstance(t, ServeTask)
    cons = ctx.cons
    bad = _priced(offer, ctx)
    if bad is not None:
        return bad
    hw = _hardware(offer, ctx, _serve_hw)
    if isinstance(hw, tuple):
        return _exclude(offer, *hw)
    options = _price_options(offer, _unit(offer, t.hours, hw.nodes, ctx, False), hw.nodes)
    price, _ = _pick_price(options, None)
    if price is None:
        return _exclude(offer, "price", lambda: "no on-demand or reserved price (spot is not "
                        "used for serving: an interruption breaks the SLO)")
    if cons.budget is not None and price.cost > cons.budget:
        cost = price.cost
        return _exclude(offer, "budget", lambda: f"costs {cost:,.0f} {offer.currency} for "
                        f"{t.hours:g} h, over the budget of {cons.budget:,.0f}")

    def notes() -> list[str]:
        cmp, billing_known = _comparison(offer, t.hours, hw.nodes, ctx, False, None)
        return [*hw.extra["notes"],
                *_pricing_reasons(price, cmp, billing_known, None, serving=True)]

    return _Ok(offer, hw.nodes, price.model, price.per_hour, t.hours, price.cost, hw.rate,
               hw.extra["memory"], "none" if offer.gpu_count == 1 else "tensor-parallel",
               ctx.memo["serve_est"].basis, False, notes)


# --- the entry point -------------------------------------------------------------------------


def _prepare(task: Task, ctx: _Ctx) -> tuple[Callable[[Offer, _Ctx], _Ok | _Out], str, str]:
    """Per-task set-up shared by every offer: work, shape, and the evaluator."""
    if isinstance(task, TrainTask):
        ctx.shape = model_shape(task.params, layers=task.layers, hidden=task.hidden)
        ctx.flops = 6 * task.params * task.tokens
        ctx.memo["flops_factor"] = 6
        return _eval_compute, "TFLOP/s", (
            f"6·N·T = {ctx.flops:.3g} FLOPs; peak {task.precision} dense × MFU "
            f"{ctx.ass.mfu:.0%} × GPUs × scaling efficiency")
    if isinstance(task, FinetuneTask):
        ctx.shape = model_shape(task.params, layers=task.layers, hidden=task.hidden)
        factor = 6 if task.method == "full" else 4
        ctx.flops = factor * task.params * task.tokens
        ctx.memo["flops_factor"] = factor
        return _eval_compute, "TFLOP/s", (
            f"{factor}·N·T = {ctx.flops:.3g} FLOPs ({task.method}"
            + ("" if factor == 6 else ": no weight gradients for the frozen base")
            + f"); peak {task.precision} dense × MFU {ctx.ass.mfu:.0%} × GPUs × scaling "
            "efficiency")
    if isinstance(task, ServeTask):
        from gpuaudit.cost.memory_fit import inference_memory, kv_cache_bytes

        ctx.shape = model_shape(task.params, layers=task.layers, hidden=task.hidden,
                                kv_heads=task.kv_heads)
        est = inference_memory(ctx.shape, dtype=task.dtype, batch=1, context=task.context)
        kv_dtype = "fp16" if dtype_bytes(task.dtype) < 2 else task.dtype
        ctx.memo["serve"] = (est.weights_bytes,
                             kv_cache_bytes(ctx.shape, batch=1, context=task.context,
                                            dtype=kv_dtype))
        ctx.memo["serve_est"] = est
        return _eval_serve, "tokens/s", (
            f"decode-bound: a step reads {gb(est.weights_bytes)} of weights + the batch's KV "
            f"cache at {ctx.ass.bandwidth_efficiency:.0%} of datasheet bandwidth (estimate)")
    if task.gpu_model not in {g.id for g in ctx.specs.gpus}:
        raise BadInputError(f"GPU {task.gpu_model!r} of run {task.run_id} is not in the specs")
    base = ctx.specs.get(task.gpu_model)
    assert base is not None
    eff = _efficiency(base, task.gpus, 1, ctx.ass)
    # The work the job does, in the measurement's unit × seconds: H hours on the benchmarked
    # machine at its measured rate.
    ctx.flops = task.hours * 3600 * task.rate_per_gpu * task.gpus * eff
    return _eval_compute, task.unit, (
        f"{task.hours:g} h on {task.gpus} × {base.name} at the measured {task.metric} "
        f"{task.rate_per_gpu:.4g} {task.unit} per GPU (run {task.run_id})")


def recommend(task: Task, offers: Iterable[Offer], *, constraints: Constraints | None = None,
              assumptions: Assumptions | None = None, top: int = 10, max_excluded: int = 20,
              specs: SpecCatalog | None = None) -> RecommendResult:
    """Rank ``offers`` for ``task``: feasible ones by cost (or time), the rest with reasons."""
    if top < 1:
        raise BadInputError(f"top must be at least 1, not {top}")
    cons = constraints or Constraints()
    ass = assumptions or Assumptions()
    ctx = _Ctx(task, cons, ass, specs or spec_catalog.load_catalog())
    evaluate, rate_unit, basis = _prepare(task, ctx)

    ok: list[_Ok] = []
    out: list[_Out] = []
    for offer in offers:
        result = evaluate(offer, ctx)
        (ok if isinstance(result, _Ok) else out).append(result)  # type: ignore[arg-type]

    if cons.sort == "time":
        ok.sort(key=lambda r: (r.hours, r.cost, r.offer.key))
    else:
        ok.sort(key=lambda r: (r.cost, r.hours, r.offer.key))
    counts: dict[str, int] = {}
    for o in out:
        counts[o.kind] = counts.get(o.kind, 0) + 1
    shown_out = sorted(out, key=lambda o: (o.sort_price, o.offer.key))[:max_excluded]

    ranked = tuple(_record(i, r, rate_unit, basis, cons, ctx) for i, r in
                   enumerate(ok[:top], start=1))
    excluded = tuple(Exclusion(offer_key=o.offer.key, gpu_model=o.offer.gpu_model,
                               gpu_count=o.offer.gpu_count, kind=o.kind, reason=o.reason())
                     for o in shown_out)
    notes = [basis, "all times and costs are estimates from datasheet figures and the stated "
                    "assumptions" if not isinstance(task, BenchmarkedTask) else
             "same-GPU figures are measured; other GPUs are scaled by spec ratio (estimates)"]
    if ctx.shape is not None and ctx.shape.derived:
        s = ctx.shape
        notes.append(f"model shape derived from the parameter count: {s.layers} layers, hidden "
                     f"{s.hidden}, {s.heads} heads (give --layers/--hidden to override)")
    return RecommendResult(task=_task_doc(task), currency=cons.currency, assumptions=ass,
                           ranked=ranked, excluded=excluded, considered=len(ok) + len(out),
                           feasible=len(ok), excluded_counts=counts, notes=tuple(notes))


def _task_doc(task: Task) -> dict[str, str | int | float | bool | None]:
    return {k: v for k, v in asdict(task).items() if isinstance(v, str | int | float | bool)
            or v is None}


def _record(rank: int, r: _Ok, rate_unit: str, basis: str, cons: Constraints, ctx: _Ctx
            ) -> Recommendation:
    reasons = [f"{r.hours:,.1f} h, {r.cost:,.2f} {r.offer.currency} ({r.pricing.value})"]
    reasons += r.notes()
    if cons.deadline_hours is not None:
        reasons.append(f"meets the {cons.deadline_hours:g} h deadline")
    if cons.budget is not None:
        reasons.append(f"within the budget ({r.cost / cons.budget:.0%} of it)")
    spec = ctx.specs.get(r.offer.gpu_model)
    gpus = r.nodes * r.offer.gpu_count
    rest = []
    if not isinstance(ctx.task, ServeTask | BenchmarkedTask) and spec is not None:
        eff = _efficiency(spec, r.offer.gpu_count, r.nodes, ctx.ass)
        rest.append(f"scaling efficiency {eff:.0%} for {gpus} GPUs")
    return Recommendation(
        rank=rank, offer=r.offer, nodes=r.nodes, gpus=gpus, pricing=r.pricing,
        price_per_hour=r.price_per_hour, currency=r.offer.currency, hours=r.hours,
        cost=r.cost, rate=r.rate, rate_unit=rate_unit,
        memory_per_gpu_bytes=r.memory_bytes, sharding=r.sharding, measured=r.measured,
        reasons=tuple(reasons), basis=(basis, *rest, *r.memory_basis))
