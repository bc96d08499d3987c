"""Ranking: each offer evaluated (hardware plan, then price, then the constraints), the feasible
ones ordered by cost (or time), the rest kept with their reasons; the records built only for
the offers shown."""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from gpuaudit.cost.memory_fit import dtype_bytes, gb
from gpuaudit.errors import BadInputError
from gpuaudit.model.cost import Offer
from gpuaudit.model.presets import model_shape
from gpuaudit.model.recommendation import (
    Assumptions,
    Exclusion,
    FeedNeed,
    PricingModel,
    Recommendation,
    RecommendResult,
    ServingPlan,
)
from gpuaudit.specs.figure_cache import load_figures
from gpuaudit.specs.figures import FigureCatalog

from .context import Context
from .hardware import (
    cached_hardware,
    efficiency,
    recompute_factor,
    scale_figures,
)
from .prices import compare, pick_price, price_options, pricing_reasons, unit_costs
from .sweep import in_order, sweep
from .tasks import (
    BenchmarkedTask,
    Constraints,
    FinetuneTask,
    PredictedTask,
    ServeTask,
    Task,
    TrainTask,
)

if TYPE_CHECKING:  # an all-reduce measured across nodes: only with --allreduce-run
    from .measured import MeasuredAllReduce

# --- per-offer evaluation --------------------------------------------------------------------


@dataclass(repr=False, eq=False)
class Feasible:
    """An offer that can do the task within the constraints, priced by its best model."""

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
    serving: ServingPlan | None = None


@dataclass(repr=False, eq=False)
class Excluded:
    """An offer left out: the kind of reason, and the reason (built only when shown)."""

    offer: Offer
    kind: str
    sort_price: float
    reason: Callable[[], str]


def _exclude(offer: Offer, kind: str, reason: Callable[[], str]) -> Excluded:
    price = offer.on_demand_price_per_hour or offer.spot_price_per_hour or math.inf
    return Excluded(offer, kind, price, reason)


def _priced(offer: Offer, ctx: Context) -> Excluded | None:
    if offer.currency != ctx.cons.currency:
        return _exclude(offer, "currency", lambda: f"priced in {offer.currency}; ranking in "
                        f"{ctx.cons.currency} (no exchange rates)")
    if not (offer.on_demand_price_per_hour or offer.spot_price_per_hour
            or offer.reserved_1y_price_per_hour or offer.reserved_3y_price_per_hour):
        return _exclude(offer, "price", lambda: "no price")
    return None


def _eval_compute(offer: Offer, ctx: Context) -> Feasible | Excluded:
    t = ctx.task
    cons = ctx.cons
    bad = _priced(offer, ctx)
    if bad is not None:
        return bad
    hw = cached_hardware(offer, ctx)
    if isinstance(hw, tuple):
        return _exclude(offer, hw[0], partial(hw[1], offer.instance_type))
    deadline = cons.deadline_hours
    options = price_options(offer, unit_costs(offer, hw.hours, hw.nodes, ctx, True), hw.nodes)
    price, miss = pick_price(options, deadline)
    if price is None:
        if miss:
            return _exclude(offer, "deadline", lambda: f"misses the {deadline:g} h deadline: "
                            f"{miss}")
        return _exclude(offer, "price", lambda: "no usable price")
    if cons.budget is not None and price.cost > cons.budget:
        cost = price.cost
        return _exclude(offer, "budget", lambda: f"costs {cost:,.0f} {offer.currency} "
                        f"({price.model.label}), over the budget of {cons.budget:,.0f}")

    def notes() -> list[str]:
        out = []
        plan = hw.plan
        if isinstance(t, PredictedTask):
            out.append(t.rate_on(offer.gpu_model, offer.gpu_count)[1])
        elif isinstance(t, BenchmarkedTask):
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
                           f"(×{recompute_factor(ctx, plan):.3g} compute)")
        if hw.nodes > 1:
            net = hw.extra.get("network")
            over = (f"{net.fabric} {net.gbps:,.0f} Gb/s per node" if net is not None else
                    f"an assumed {hw.extra['pooled_gbps']:g} Gb/s per node (--allow-pooling; "
                    "no published network between these instances)")
            cross = hw.extra.get("cross_node", 1.0)
            basis = hw.extra.get("cross_basis")
            how = (f"from {basis}" if basis is not None else
                   f"gradients all-reduced once per {ctx.ass.global_batch_tokens:,.0f}-token "
                   "step, overlapped with the backward pass" if plan is not None else
                   "assumed: no model of the workload's step to size its all-reduce")
            out.append(f"{hw.nodes} nodes over {over}: {cross:.0%} cross-node efficiency "
                       f"({how})")
        cmp, billing_known = compare(offer, hw.hours, hw.nodes, ctx, True, deadline)
        out.extend(pricing_reasons(price, cmp, billing_known, deadline))
        return out

    plan = hw.plan
    return Feasible(offer, hw.nodes, price.model, price.per_hour, price.hours, price.cost,
                    hw.rate, plan.per_gpu_bytes if plan else None,
                    plan.sharding if plan else None, plan.basis if plan else (), hw.measured,
                    notes)


def _eval_serve(offer: Offer, ctx: Context) -> Feasible | Excluded:
    t = ctx.task
    assert isinstance(t, ServeTask)
    cons = ctx.cons
    bad = _priced(offer, ctx)
    if bad is not None:
        return bad
    hw = cached_hardware(offer, ctx, serving=True)
    if isinstance(hw, tuple):
        return _exclude(offer, hw[0], partial(hw[1], offer.instance_type))
    options = price_options(offer, unit_costs(offer, t.hours, hw.nodes, ctx, False), hw.nodes)
    price, _ = pick_price(options, None)
    if price is None:
        return _exclude(offer, "price", lambda: "no on-demand or reserved price (spot is not "
                        "used for serving: an interruption breaks the SLO)")
    if cons.budget is not None and price.cost > cons.budget:
        cost = price.cost
        return _exclude(offer, "budget", lambda: f"costs {cost:,.0f} {offer.currency} for "
                        f"{t.hours:g} h, over the budget of {cons.budget:,.0f}")

    def notes() -> list[str]:
        cmp, billing_known = compare(offer, t.hours, hw.nodes, ctx, False, None)
        return [*hw.extra["notes"],
                *pricing_reasons(price, cmp, billing_known, None, serving=True)]

    return Feasible(offer, hw.nodes, price.model, price.per_hour, t.hours, price.cost,
                    hw.rate, hw.extra["memory"],
                    "none" if offer.gpu_count == 1 else "tensor-parallel",
                    ctx.memo["serve_est"].basis, False, notes, hw.extra["serving"])


# --- the entry point -------------------------------------------------------------------------


Evaluator = Callable[[Offer, Context], "Feasible | Excluded"]


def _prepare(task: Task, ctx: Context) -> tuple[Evaluator, str, str]:
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

        from .serving import decode_flops, prefill_flops

        shape = ctx.shape = model_shape(task.params, layers=task.layers, hidden=task.hidden,
                                        kv_heads=task.kv_heads)
        context = task.prompt + task.output_tokens
        est = inference_memory(shape, dtype=task.dtype, batch=1, context=context)
        kv_dtype = "fp16" if dtype_bytes(task.dtype) < 2 else task.dtype
        pf = prefill_flops(task.params, shape.layers, shape.hidden, task.prompt)
        ctx.memo["serve"] = (
            est.weights_bytes, kv_cache_bytes(shape, batch=1, context=1, dtype=kv_dtype), pf,
            decode_flops(task.params, shape.layers, shape.hidden,
                         task.prompt + task.output_tokens / 2))
        ctx.memo["serve_est"] = est
        bounds = f"TPOT ≤ {task.latency_ms:g} ms" + (
            f", TTFT ≤ {task.ttft_ms:g} ms" if task.ttft_ms is not None else "")
        return _eval_serve, "tokens/s", (
            f"serving {task.prompt:,} prompt + {task.output_tokens:,} output tokens per "
            f"request with continuous batching ({bounds}; means): prefill {pf:.3g} FLOPs per "
            f"prompt at peak {task.dtype} × MFU {ctx.ass.mfu:.0%}, decode steps reading "
            f"{gb(est.weights_bytes)} of weights + the batch's KV cache at "
            f"{ctx.ass.bandwidth_efficiency:.0%} of datasheet bandwidth (estimate)")
    if task.gpu_model not in {g.id for g in ctx.specs.gpus}:
        raise BadInputError(f"GPU {task.gpu_model!r} of run {task.run_id} is not in the specs")
    base = ctx.specs.get(task.gpu_model)
    assert base is not None
    # A predicted task's rate is the recorded one: no assumed scaling to take out.
    eff = 1.0 if isinstance(task, PredictedTask) else efficiency(base, task.gpus, 1, ctx.ass)
    # The work the job does, in the measurement's unit × seconds: H hours on the benchmarked
    # machine at its measured rate.
    ctx.flops = task.hours * 3600 * task.rate_per_gpu * task.gpus * eff
    return _eval_compute, task.unit, (
        f"{task.hours:g} h on {task.gpus} × {base.name} at the measured {task.metric} "
        f"{task.rate_per_gpu:.4g} {task.unit} per GPU (run {task.run_id})")


def recommend(task: Task, offers: Iterable[Offer], *, constraints: Constraints | None = None,
              assumptions: Assumptions | None = None, top: int = 10, max_excluded: int = 20,
              specs: FigureCatalog | None = None, allreduce: MeasuredAllReduce | None = None,
              feed: FeedNeed | None = None) -> RecommendResult:
    """Rank ``offers`` for ``task``: feasible ones by cost (or time), the rest with reasons.
    ``allreduce``: an all-reduce measured across nodes, which sizes the cross-node
    communication on offers of its GPU model and GPUs per node. ``feed``: the job's input
    need; each offer shown is checked against it (`feed`), and marked where its vCPUs or
    memory per GPU cannot feed its GPUs."""
    if top < 1:
        raise BadInputError(f"top must be at least 1, not {top}")
    if feed is not None and isinstance(task, ServeTask):
        raise BadInputError("a feed need goes with training (train, finetune, --run, "
                            "--from-run), not serve")
    cons = constraints or Constraints()
    ass = assumptions or Assumptions()
    ctx = Context(task, cons, ass, specs or load_figures(), allreduce=allreduce, feed=feed)
    evaluate, rate_unit, basis = _prepare(task, ctx)

    serving = isinstance(task, ServeTask)
    # indexed: the sweep keeps each offer's index, and an offer is made when it is shown
    seq = offers if isinstance(offers, Sequence) else tuple(offers)
    swept = sweep(seq, ctx, serving)
    counts = dict(Counter(map(itemgetter(2), swept.out)))
    shown_out = _first_excluded(swept.out, max_excluded, seq)

    by_time = cons.sort == "time"
    shown, twins = _distinct(in_order(swept.ok, by_time, seq), top, by_time, seq)
    records = []
    for i, row in enumerate(shown, start=1):
        # The per-offer evaluation builds what is shown: its reasons and memory plan.
        r = evaluate(seq[row[2]], ctx)
        assert isinstance(r, Feasible)
        records.append(_record(i, r, rate_unit, basis, cons, ctx, twins.get(row[2], ())))
    ranked = tuple(records)
    excluded = []
    for _price, index, kind, reason, args in shown_out:
        o = seq[index]
        excluded.append(Exclusion(offer_key=o.key, gpu_model=o.gpu_model,
                                  gpu_count=o.gpu_count, kind=kind, reason=reason(*args)))
    ok, out = swept.ok, swept.out
    notes = [basis, "all times and costs are estimates from datasheet figures and the stated "
                    "assumptions" if not isinstance(task, BenchmarkedTask) else
             "predicted per operator class from the recorded step (gpuaudit predict): "
             "estimates with the bands it gives" if isinstance(task, PredictedTask) else
             "same-GPU figures are measured; other GPUs are scaled by spec ratio (estimates)"]
    if ctx.shape is not None and ctx.shape.derived:
        s = ctx.shape
        notes.append(f"model shape derived from the parameter count: {s.layers} layers, hidden "
                     f"{s.hidden}, {s.heads} heads (give --layers/--hidden to override)")
    if feed is not None:
        short = sum(1 for r in ranked if r.feed is not None and r.feed.verdict == "short")
        notes.append(f"feed: {feed.source}; " + "; ".join(feed.basis)
                     + f"; {short} of the {len(ranked)} shown cannot feed their GPUs"
                     + (" (marked)" if short else ""))
    return RecommendResult(task=_task_doc(task), currency=cons.currency, assumptions=ass,
                           ranked=ranked, excluded=tuple(excluded), considered=len(ok) + len(out),
                           feasible=len(ok), excluded_counts=counts, notes=tuple(notes),
                           feed=feed)


def _distinct(ok: Iterable[Any], top: int, by_time: bool, offers: Sequence[Offer]
              ) -> tuple[list[Any], dict[int, tuple[str, ...]]]:
    """The first `top` distinct offers: one instance type at the same plan and cost in
    several regions (or from two sources) is one choice, shown once with the others named,
    so that one offer cannot fill the top ten. Twins have the same figures, so they sit next
    to each other in the order: the walk stops past the last offer shown."""
    shown: list[Any] = []
    first: dict[tuple[object, ...], Any] = {}
    twins: dict[int, list[str]] = {}
    last = None
    for row in ok:
        cost, hours, index, hw, model, _price = row
        o = offers[index]
        figure = round(hours if by_time else cost, 6)
        if last is not None and figure > last:
            break
        key = (o.provider, o.instance_type, hw.nodes, model, round(cost, 6), round(hours, 6))
        if key in first:
            twins.setdefault(first[key][2], []).append(o.region or "every region")
        elif len(shown) < top:
            first[key] = row
            shown.append(row)
            if len(shown) == top:
                last = figure
    return shown, {k: tuple(v) for k, v in twins.items()}


def _first_excluded(out: list[Any], n: int, offers: Sequence[Offer]) -> list[Any]:
    """The `n` excluded offers with the lowest price (ties: by key), without ordering all."""
    def by_key(o: Any) -> tuple[float, str]:
        return o[0], offers[o[1]].key

    if len(out) <= n:
        return sorted(out, key=by_key)
    cheapest = heapq.nsmallest(n, out, key=itemgetter(0))
    bound = cheapest[-1][0]
    tied = [o for o in out if o[0] <= bound]
    return sorted(tied, key=by_key)[:n]


def _task_doc(task: Task) -> dict[str, str | int | float | bool | None]:
    return {k: v for k, v in asdict(task).items() if isinstance(v, str | int | float | bool)
            or v is None}


def _record(rank: int, r: Feasible, rate_unit: str, basis: str, cons: Constraints, ctx: Context,
            twins: tuple[str, ...] = ()) -> Recommendation:
    reasons = [f"{r.hours:,.1f} h, {r.cost:,.2f} {r.offer.currency} ({r.pricing.label})"]
    if twins:
        more = ", ".join(twins[:5]) + (", …" if len(twins) > 5 else "")
        reasons.append(f"the same in {len(twins)} other region{'s' * (len(twins) != 1)} "
                       f"({more}): shown once")
    reasons += r.notes()
    if cons.deadline_hours is not None:
        reasons.append(f"meets the {cons.deadline_hours:g} h deadline")
    if cons.budget is not None:
        reasons.append(f"within the budget ({r.cost / cons.budget:.0%} of it)")
    spec = ctx.specs.get(r.offer.gpu_model)
    gpus = r.nodes * r.offer.gpu_count
    rest = []
    if not isinstance(ctx.task, ServeTask | BenchmarkedTask) and spec is not None:
        hw = cached_hardware(r.offer, ctx)
        cross = hw.extra.get("cross_node", 1.0) if not isinstance(hw, tuple) else 1.0
        eff = efficiency(spec, r.offer.gpu_count, 1, ctx.ass) * cross
        rest.append(f"scaling efficiency {eff:.0%} for {gpus} GPUs")
    fed = None
    if ctx.feed is not None:
        from .feed import check as feed_check

        fed = feed_check(ctx.feed, r.offer.vcpus, r.offer.ram_gib, r.offer.gpu_count,
                         feed_speed(r.rate / gpus, ctx))
        reasons.append(fed.reason)
        if 0 < fed.gpu_wait_share < 1:
            slow = 1 / (1 - fed.gpu_wait_share)
            reasons.append(f"fed that slowly, the task takes about {r.hours * slow:,.1f} h "
                           f"and costs about {r.cost * slow:,.2f} {r.offer.currency}")
    return Recommendation(
        rank=rank, offer=r.offer, nodes=r.nodes, gpus=gpus, pricing=r.pricing,
        price_per_hour=r.price_per_hour, currency=r.offer.currency, hours=r.hours,
        cost=r.cost, rate=r.rate, rate_unit=rate_unit,
        memory_per_gpu_bytes=r.memory_bytes, sharding=r.sharding, measured=r.measured,
        reasons=tuple(reasons), basis=(basis, *rest, *r.memory_basis), serving=r.serving,
        feed=fed)


def feed_speed(per_gpu: float, ctx: Context) -> float:
    """How many times faster than the feed need's reference GPU one GPU of an offer runs the
    task (`per_gpu`: its rate per GPU, in the task's unit): the input it must be fed grows
    with it. 1 when the reference GPU is not known or no rate on it can be told."""
    need, t = ctx.feed, ctx.task
    assert need is not None
    ref_gpu = need.gpu_model
    base = ctx.specs.get(ref_gpu) if ref_gpu is not None else None
    ref: float | None = None
    if base is None:
        return 1.0
    if isinstance(t, BenchmarkedTask):
        if ref_gpu == t.gpu_model:
            ref = t.rate_per_gpu
        elif isinstance(t, PredictedTask):
            ref = t.rate_on(ref_gpu, 1)[0]  # type: ignore[arg-type]
        else:
            theirs = ctx.specs.get(t.gpu_model)
            if theirs is not None:
                mine, other = scale_figures(t.scale_by, base, theirs)
                ref = t.rate_per_gpu * mine / other if mine and other else None
    elif isinstance(t, TrainTask | FinetuneTask):
        peak = base.peak(t.precision)
        ref = peak * ctx.ass.mfu if peak else None
    return per_gpu / ref if ref else 1.0
