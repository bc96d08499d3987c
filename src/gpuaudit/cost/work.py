"""Price-performance: what a unit of work costs on an instance, from a measured run where one
exists, from datasheet figures (labelled as estimates) where none does; and what idle GPUs
cost, from the monitor's history.

Per-instance rates are per-GPU rates × the offer's GPU count: a run measured on a machine with
another GPU count still prices the offer's instance. A run on another GPU model is used but
said so in the notes.
"""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

from gpuaudit.errors import BadInputError
from gpuaudit.model import Offer, Run
from gpuaudit.model.economics import IdleCost, IdleGpu, PricePerformance, WorkCost
from gpuaudit.model.history import HistoryPoint, Resolution
from gpuaudit.model.pricing import PricingModel

from .pricing import _fraction, _positive, price_ref

DEFAULT_MFU = 0.40  # a well-tuned dense LLM run on H100-class GPUs reaches 35-50 % (PaLM, Megatron)
TRAIN_FLOPS_PER_PARAM_TOKEN = 6  # forward 2 + backward 4 FLOPs per parameter per token
PFLOP = 1e15
IDLE_THRESHOLD_PCT = 5.0  # as the idle policy (docs/monitor-idle.md)
MAX_GAP_S = 120.0  # as the idle policy: a longer silence is not evidence of anything


def _spec(gpu_model: str):  # -> GpuSpec | None
    from gpuaudit.specs import load_catalog

    return load_catalog().get(gpu_model)


def _run_gpu_model(run: Run) -> str | None:
    from gpuaudit.specs import lookup

    if run.machine is None or not run.machine.gpus:
        return None
    gpu = run.machine.gpus[0]
    spec = lookup(gpu.name, gpu.pci_device_id)
    return spec.id if spec else gpu.name


def measured_tflops_per_gpu(run: Run, precision: str = "bf16") -> float | None:
    """The median across the run's GPUs of the sustained matmul rate (TFLOP/s; int8 TOP/s)."""
    values = [m.value for m in run.measurements
              if m.suite == "matmul" and m.name == precision and m.value is not None
              and m.params.get("device", "cuda") == "cuda"]
    return statistics.median(values) if values else None


def measured_tokens_per_s(run: Run) -> float | None:
    """A training throughput the run measured (suite 'train', unit tokens/s), whole machine."""
    values = [m.value for m in run.measurements
              if m.suite == "train" and m.unit == "tokens/s" and m.value is not None]
    return max(values) if values else None


def price_performance(
    offer: Offer,
    *,
    kind: PricingModel = PricingModel.ON_DEMAND,
    run: Run | None = None,
    precision: str = "bf16",
    model_params: float | None = None,
    mfu: float = DEFAULT_MFU,
    tokens_per_s: float | None = None,
    inferences_per_s: float | None = None,
    samples_per_s: float | None = None,
    dataset_samples: float | None = None,
    dataset_tokens: float | None = None,
) -> PricePerformance:
    """$ per PFLOP-hour (always), $ per million training tokens (with a measured or given
    tokens/s, or `model_params` for an estimate at `mfu`), $ per 1000 inferences (with
    `inferences_per_s`), $ per epoch (`dataset_samples` with `samples_per_s`, or
    `dataset_tokens` with the token rate). Throughputs given here are per instance."""
    price = price_ref(offer, kind)
    cur = offer.currency
    per_hour = price.price_per_hour
    _fraction("MFU", mfu)
    for name, value in (("model parameters", model_params), ("tokens/s", tokens_per_s),
                        ("inferences/s", inferences_per_s), ("samples/s", samples_per_s),
                        ("dataset samples", dataset_samples),
                        ("dataset tokens", dataset_tokens)):
        if value is not None:
            _positive(name, value)
    spec = _spec(offer.gpu_model)
    peak = spec.peak(precision) if spec else None
    results: list[WorkCost] = []
    notes: list[str] = []
    gpus = offer.gpu_count
    machine_gpus = len(run.machine.gpus) if run and run.machine and run.machine.gpus else None

    if run is not None:
        run_model = _run_gpu_model(run)
        if run_model is not None and run_model != offer.gpu_model:
            notes.append(f"run {run.id} was measured on {run_model}; the offer has "
                         f"{offer.gpu_model}")

    # $/PFLOP-hour: one PFLOP/s for an hour = 3.6e18 FLOP.
    measured = measured_tflops_per_gpu(run, precision) if run is not None else None
    if measured is not None:
        rate = measured * 1e12 * gpus / PFLOP
        pct = f" ({measured / peak:.0%} of the {peak:g} datasheet peak)" if peak else ""
        results.append(WorkCost(
            metric="pflop_hour", cost=per_hour / rate, currency=cur,
            unit=f"{cur} per PFLOP-hour", rate=rate, rate_unit="PFLOP/s", basis="measured",
            run_id=run.id,  # type: ignore[union-attr]
            assumptions=(f"{precision} matmul, sustained, median over the run's GPUs: "
                         f"{measured:.4g} TFLOP/s per GPU{pct}, × {gpus} GPUs",)))
    elif peak is not None:
        rate = peak * 1e12 * gpus / PFLOP
        results.append(WorkCost(
            metric="pflop_hour", cost=per_hour / rate, currency=cur,
            unit=f"{cur} per PFLOP-hour", rate=rate, rate_unit="PFLOP/s", basis="estimate",
            assumptions=(f"{precision} dense datasheet peak {peak:g} TFLOP/s × {gpus} GPUs: "
                         "no job reaches it, so this is the lowest possible cost",)))
    elif run is not None:
        notes.append(f"run {run.id} has no {precision} matmul figure and {offer.gpu_model} "
                     "has no datasheet peak: no $/PFLOP-hour")
    else:
        notes.append(f"{offer.gpu_model} has no {precision} datasheet peak: no $/PFLOP-hour")

    # Training tokens.
    token_rate: float | None = None
    token_basis = "given"
    token_run: str | None = None
    token_assumptions: tuple[str, ...] = ()
    run_tokens = measured_tokens_per_s(run) if run is not None else None
    if tokens_per_s is not None:
        token_rate, token_assumptions = tokens_per_s, ("training throughput as given",)
    elif run_tokens is not None and machine_gpus:
        token_rate = run_tokens / machine_gpus * gpus
        token_basis, token_run = "measured", run.id  # type: ignore[union-attr]
        token_assumptions = (f"measured {run_tokens:.4g} tokens/s on {machine_gpus} GPUs, "
                             f"scaled to {gpus}",)
    elif model_params is not None and peak is not None:
        token_rate = mfu * peak * 1e12 * gpus / (TRAIN_FLOPS_PER_PARAM_TOKEN * model_params)
        token_basis = "estimate"
        token_assumptions = (
            f"tokens/s = MFU × peak / (6·N): MFU {mfu:.0%} assumed, {precision} datasheet "
            f"peak {peak:g} TFLOP/s per GPU, N = {model_params:.4g} parameters, "
            "attention FLOPs not counted",)
        if measured is not None and mfu > measured / peak:
            notes.append(f"the assumed MFU {mfu:.0%} is above this server's measured {precision}"
                         f" matmul ceiling ({measured / peak:.0%} of peak): the estimate is "
                         "optimistic")
    elif model_params is not None:
        notes.append(f"{offer.gpu_model} has no {precision} datasheet peak: no token estimate")
    if token_rate is not None:
        results.append(WorkCost(
            metric="million_training_tokens", cost=per_hour / (token_rate * 3600) * 1e6,
            currency=cur, unit=f"{cur} per million training tokens", rate=token_rate,
            rate_unit="tokens/s", basis=token_basis, run_id=token_run,  # type: ignore[arg-type]
            assumptions=token_assumptions))

    if inferences_per_s is not None:
        results.append(WorkCost(
            metric="thousand_inferences", cost=per_hour / (inferences_per_s * 3600) * 1000,
            currency=cur, unit=f"{cur} per 1000 inferences", rate=inferences_per_s,
            rate_unit="inferences/s", basis="given",
            assumptions=("throughput as given, sustained (at the latency SLO it was "
                         "measured under)",)))

    if dataset_samples is not None:
        if samples_per_s is None:
            raise BadInputError("a dataset size in samples needs a throughput in samples/s")
        hours = dataset_samples / samples_per_s / 3600
        results.append(WorkCost(
            metric="epoch", cost=per_hour * hours, currency=cur, unit=f"{cur} per epoch",
            rate=samples_per_s, rate_unit="samples/s", basis="given",
            assumptions=(f"{dataset_samples:.6g} samples at {samples_per_s:.6g} samples/s: "
                         f"{hours:.4g} h per epoch, unrounded (no billing minimum)",)))
    if dataset_tokens is not None:
        if token_rate is None:
            raise BadInputError("a dataset size in tokens needs a token rate: a run with one, "
                                "tokens/s, or the model's parameter count")
        hours = dataset_tokens / token_rate / 3600
        results.append(WorkCost(
            metric="epoch", cost=per_hour * hours, currency=cur, unit=f"{cur} per epoch",
            rate=token_rate, rate_unit="tokens/s", basis=token_basis,  # type: ignore[arg-type]
            run_id=token_run,
            assumptions=(*token_assumptions, f"{dataset_tokens:.6g} tokens: {hours:.4g} h per "
                                             "epoch, unrounded")))
    return PricePerformance(price=price, gpu_model=offer.gpu_model, results=tuple(results),
                            notes=tuple(notes))


# -- idle cost -----------------------------------------------------------------------------------


def activity_pct(point: HistoryPoint) -> float | None:
    """SM activity where GPM read it (what the GPU really did), else NVML's utilization (the
    share of time any kernel ran, which over-reads a trickle of small kernels)."""
    if point.sm_activity_pct is not None:
        return point.sm_activity_pct
    return point.utilization_gpu_pct


def _utc(t: datetime) -> datetime:
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def idle_cost(
    points: Sequence[HistoryPoint],
    *,
    since: datetime,
    until: datetime,
    price_per_gpu_hour: float | None = None,
    offer: Offer | None = None,
    kind: PricingModel = PricingModel.ON_DEMAND,
    currency: str = "USD",
    threshold_pct: float = IDLE_THRESHOLD_PCT,
    max_gap_s: float = MAX_GAP_S,
) -> IdleCost:
    """Idle GPU-hours between `since` and `until` and what they cost.

    Each point stands for the time until the next point of its GPU (a 1-minute point for its
    minute), at most `max_gap_s`: a gap in the history is neither idle nor busy. A GPU is idle
    in a point when its activity is under `threshold_pct`; a point without an activity reading
    (or an unreadable GPU) is never idle. The price is per GPU-hour, given or the offer's
    instance price / its GPU count."""
    since, until = _utc(since), _utc(until)
    if since >= until:
        raise BadInputError(f"the start {since.isoformat()} is not before the end "
                            f"{until.isoformat()}")
    if (price_per_gpu_hour is None) == (offer is None):
        raise BadInputError("give a price per GPU-hour or an offer (one of them)")
    if offer is not None:
        ref = price_ref(offer, kind)
        price, currency = ref.price_per_hour / ref.gpu_count, ref.currency
        source, price_date = ref.source, ref.price_date
    else:
        price = _positive("price per GPU-hour", price_per_gpu_hour)  # type: ignore[arg-type]
        source, price_date = "user", None
    if not 0 < threshold_pct <= 100:
        raise BadInputError(f"idle threshold must be in (0, 100] %, not {threshold_pct!r}")
    _positive("max gap", max_gap_s)

    series: dict[tuple[str, int], list[HistoryPoint]] = defaultdict(list)
    for p in points:
        series[(p.hostname, p.gpu)].append(p)
    gpus = []
    for (host, gpu), pts in sorted(series.items()):
        pts.sort(key=lambda p: p.time)
        observed = idle = unknown = 0.0
        for i, p in enumerate(pts):
            start = _utc(p.time)
            if p.resolution is Resolution.MINUTE:
                end = start + timedelta(seconds=60)
            else:
                end = start + timedelta(seconds=max_gap_s)
            if i + 1 < len(pts):
                end = min(end, _utc(pts[i + 1].time))
            elif p.resolution is Resolution.RAW:
                # The last raw sample: as long as the usual sampling step (gaps excluded).
                steps = [step for a, b in itertools.pairwise(pts)
                         if (step := (_utc(b.time) - _utc(a.time)).total_seconds()) <= max_gap_s]
                end = start + timedelta(seconds=statistics.median(steps) if steps else 0.0)
            seconds = (min(end, until) - max(start, since)).total_seconds()
            if seconds <= 0:
                continue
            observed += seconds
            act = activity_pct(p) if p.error_samples < p.samples else None
            if act is None:
                unknown += seconds
            elif act < threshold_pct:
                idle += seconds
        gpus.append(IdleGpu(hostname=host, gpu=gpu, observed_hours=observed / 3600,
                            idle_hours=idle / 3600, unknown_hours=unknown / 3600,
                            idle_cost=idle / 3600 * price))
    observed_h = sum(g.observed_hours for g in gpus)
    idle_h = sum(g.idle_hours for g in gpus)
    return IdleCost(since=since, until=until, threshold_pct=threshold_pct,
                    price_per_gpu_hour=price, currency=currency, price_source=source,
                    price_date=price_date, gpus=tuple(gpus), observed_gpu_hours=observed_h,
                    idle_gpu_hours=idle_h,
                    idle_fraction=idle_h / observed_h if observed_h else None,
                    idle_cost=idle_h * price)
