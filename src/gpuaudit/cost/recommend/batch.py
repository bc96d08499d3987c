"""Rendering and simulation: jobs made of independent pieces (frames, simulations), ranked by
cost or time. A timing on one GPU (a stored bench run, or the user's own) is carried to every
offer's GPU by speed.py's ratios; each GPU of an instance renders its own frames or runs its
own simulation, so an instance of n GPUs is n times one (no communication, no scaling loss),
and more instances are rented only when a deadline needs them. Prices, spot and reserved
terms are pricing.py's, through prices.py, as for every recommendation."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Literal

from gpuaudit.errors import BadInputError
from gpuaudit.model.cost import Offer
from gpuaudit.model.recommendation import (
    Assumptions,
    Exclusion,
    PricingModel,
    Recommendation,
    RecommendResult,
)
from gpuaudit.specs import catalog as spec_catalog
from gpuaudit.specs.catalog import GpuSpec, SpecCatalog

from . import speed
from .context import Context
from .prices import (
    PriceOption,
    compare,
    pick_price,
    price_options,
    pricing_reasons,
    unit_costs,
)
from .tasks import Constraints, positive


@dataclass(frozen=True)
class RenderTask:
    """Render `frames` frames, each taking `seconds_per_frame` on one `base_gpu`."""

    frames: float
    seconds_per_frame: float
    base_gpu: str  # spec id
    scene: str = "path-traced"
    basis: str = ""  # where the timing came from
    measured: bool = False  # the timing was measured on the base GPU (a run or the user)
    scene_memory_gb: float | None = None
    rt_speedup: float = speed.DEFAULT_RT_SPEEDUP
    kind: Literal["render"] = "render"

    def __post_init__(self) -> None:
        positive(frames=self.frames, seconds_per_frame=self.seconds_per_frame,
                 rt_speedup=self.rt_speedup)
        if self.scene not in speed.SCENES:
            raise BadInputError(f"unknown scene {self.scene!r}; expected "
                                f"{' or '.join(speed.SCENES)}")


@dataclass(frozen=True)
class SimulateTask:
    """Run `jobs` simulations, each taking `hours` on one `base_gpu`, bound by `kernel`."""

    kernel: str
    precision: str
    hours: float
    base_gpu: str
    jobs: int = 1
    basis: str = ""
    measured: bool = False
    memory_gb: float | None = None
    kind: Literal["simulate"] = "simulate"

    def __post_init__(self) -> None:
        positive(hours=self.hours, jobs=self.jobs)
        if self.kernel not in speed.KERNELS:
            raise BadInputError(f"unknown kernel {self.kernel!r}; expected one of "
                                f"{', '.join(speed.KERNELS)}")
        if self.precision not in ("fp32", "fp64"):
            raise BadInputError(f"precision must be fp32 or fp64, not {self.precision!r}")


BatchTask = RenderTask | SimulateTask


def spec_for(specs: SpecCatalog, name: str) -> GpuSpec:
    """A GPU named by its catalog id or its NVML name; bad input otherwise."""
    found = specs.get(name.strip().lower()) or specs.lookup(nvml_name=name)
    if found is None:
        ids = ", ".join(g.id for g in specs.gpus)
        raise BadInputError(f"GPU {name!r} is not in the spec catalog (ids: {ids})")
    return found


@dataclass
class _Choice:
    offer: Offer
    nodes: int
    pricing: PricingModel
    per_hour: float
    hours: float
    cost: float
    rate: float
    ratio_basis: str


def _speed(task: BatchTask, spec: GpuSpec, base: GpuSpec) -> speed.Speed:
    if isinstance(task, RenderTask):
        if task.scene == "raster":
            return speed.raster_ratio(spec, base)
        return speed.path_ratio(spec, base, task.rt_speedup)
    return speed.sim_ratio(spec, base, task.kernel, task.precision)


def _memory_gb(offer: Offer, spec: GpuSpec) -> float:
    return offer.gpu_memory_gib * 2**30 / 1e9 if offer.gpu_memory_gib else spec.memory_gb


def _hours(task: BatchTask, ratio: float, gpus: int) -> float:
    if isinstance(task, RenderTask):
        return task.frames * task.seconds_per_frame / ratio / gpus / 3600
    rounds = math.ceil(task.jobs / gpus)  # each simulation on one GPU, start to end
    return rounds * task.hours / ratio


def recommend_batch(task: BatchTask, offers: Iterable[Offer], *,
                    constraints: Constraints | None = None,
                    assumptions: Assumptions | None = None, top: int = 10,
                    max_excluded: int = 20, specs: SpecCatalog | None = None
                    ) -> RecommendResult:
    """Rank `offers` for a rendering or simulation task: feasible ones by cost (or time), the
    rest with the reason."""
    if top < 1:
        raise BadInputError(f"top must be at least 1, not {top}")
    cons = constraints or Constraints()
    ass = assumptions or Assumptions()
    specs = specs or spec_catalog.load_catalog()
    base = spec_for(specs, task.base_gpu)
    ctx = Context(task, cons, ass, specs)  # type: ignore[arg-type]  # prices.py needs ass, memo
    need_gb = task.scene_memory_gb if isinstance(task, RenderTask) else task.memory_gb
    ok: list[_Choice] = []
    out: list[tuple[Offer, str, str]] = []
    speeds: dict[str, speed.Speed] = {}
    for offer in offers:
        if offer.currency != cons.currency:
            out.append((offer, "currency", f"priced in {offer.currency}; ranking in "
                        f"{cons.currency} (no exchange rates)"))
            continue
        spec = specs.get(offer.gpu_model)
        if spec is None:
            out.append((offer, "spec", f"GPU {offer.gpu_model!r} is not in the spec catalog"))
            continue
        if need_gb is not None and _memory_gb(offer, spec) * (1 - ass.memory_margin) < need_gb:
            out.append((offer, "memory", f"needs {need_gb:g} GB per GPU; has "
                        f"{_memory_gb(offer, spec):.3g} GB ({ass.memory_margin:.0%} kept free)"))
            continue
        if offer.gpu_model not in speeds:
            speeds[offer.gpu_model] = _speed(task, spec, base)
        s = speeds[offer.gpu_model]
        if s.value is None:
            out.append((offer, "spec", s.basis))
            continue
        choice = _price(task, offer, s, ctx, out)
        if choice is not None:
            ok.append(choice)
    ok.sort(key=(lambda c: (c.hours, c.cost, c.offer.key)) if cons.sort == "time"
            else (lambda c: (c.cost, c.hours, c.offer.key)))
    shown, twins = _distinct(ok, top)
    unit, basis = _basis(task, base)
    ranked = tuple(_record(i, c, task, base, ctx, unit, basis, twins.get(id(c), ()))
                   for i, c in enumerate(shown, start=1))
    counts: dict[str, int] = {}
    for _, kind, _ in out:
        counts[kind] = counts.get(kind, 0) + 1
    cheapest = sorted(out, key=lambda o: (o[0].on_demand_price_per_hour or math.inf, o[0].key))
    excluded = tuple(Exclusion(offer_key=o.key, gpu_model=o.gpu_model, gpu_count=o.gpu_count,
                               kind=kind, reason=why) for o, kind, why in
                     cheapest[:max_excluded])
    notes = (basis, "times on other GPUs are estimates from the spec catalog's rates (each "
                    "offer's reasons give the ratio); the base GPU's own is the timing given")
    return RecommendResult(task={k: v for k, v in asdict(task).items()
                                 if isinstance(v, str | int | float | bool) or v is None},
                           currency=cons.currency, assumptions=ass, ranked=ranked,
                           excluded=excluded, considered=len(ok) + len(out),
                           feasible=len(ok), excluded_counts=counts, notes=notes)


def _price(task: BatchTask, offer: Offer, s: speed.Speed, ctx: Context,
           out: list[tuple[Offer, str, str]]) -> _Choice | None:
    """The fewest instances (one, or more for a deadline) and the pricing model compare_job
    would pick; None when the offer is excluded (and `out` says why)."""
    assert s.value is not None
    cons, ass = ctx.cons, ctx.ass
    deadline = cons.deadline_hours
    top = ass.max_nodes
    if isinstance(task, SimulateTask):
        top = min(top, max(1, math.ceil(task.jobs / offer.gpu_count)))  # idle beyond that
    nodes = 1
    if deadline is not None and _hours(task, s.value, offer.gpu_count) > deadline:
        nodes = next((n for n in range(2, top + 1)
                      if _hours(task, s.value, n * offer.gpu_count) <= deadline), 0)
        if not nodes:
            best = _hours(task, s.value, top * offer.gpu_count)
            out.append((offer, "deadline", f"{best:,.1f} h at best on {top} instance(s); "
                        f"deadline {deadline:g} h"))
            return None
    hours = _hours(task, s.value, nodes * offer.gpu_count)
    price, miss = pick_price(price_options(offer, unit_costs(offer, hours, nodes, ctx, True),
                                           nodes), deadline)
    if price is None:
        out.append((offer, "deadline" if miss else "price",
                    f"misses the {deadline:g} h deadline: {miss}" if miss else "no price"))
        return None
    if cons.budget is not None and price.cost > cons.budget:
        out.append((offer, "budget", f"costs {price.cost:,.0f} {offer.currency} "
                    f"({price.model.label}), over the budget of {cons.budget:,.0f}"))
        return None
    gpus = nodes * offer.gpu_count
    if isinstance(task, RenderTask):
        rate = 3600 / task.seconds_per_frame * s.value * gpus
    else:
        rate = s.value * min(gpus, task.jobs)
    return _Choice(offer, nodes, price.model, price.per_hour, price.hours, price.cost, rate,
                   s.basis)


def _basis(task: BatchTask, base: GpuSpec) -> tuple[str, str]:
    if isinstance(task, RenderTask):
        return "frames/h", (f"{task.frames:,.0f} {task.scene} frames at "
                            f"{task.seconds_per_frame:.4g} s each on one {base.name}"
                            + (f" ({task.basis})" if task.basis else "")
                            + "; each GPU renders its own frames")
    return f"× one {base.name}", (
        f"{task.jobs} {task.kernel}-bound {task.precision.upper()} simulation(s) of "
        f"{task.hours:.4g} h each on one {base.name}" + (f" ({task.basis})" if task.basis
                                                         else "")
        + "; each runs on one GPU")


def _distinct(ok: list[_Choice], top: int) -> tuple[list[_Choice], dict[int, list[str]]]:
    """One instance type at the same plan and cost in several regions is one choice."""
    shown: list[_Choice] = []
    first: dict[tuple[object, ...], _Choice] = {}
    twins: dict[int, list[str]] = {}
    for c in ok:
        o = c.offer
        key = (o.provider, o.instance_type, c.nodes, c.pricing, round(c.cost, 6),
               round(c.hours, 6))
        if key in first:
            twins.setdefault(id(first[key]), []).append(o.region or "every region")
        elif len(shown) < top:
            first[key] = c
            shown.append(c)
    return shown, twins


def _record(rank: int, c: _Choice, task: BatchTask, base: GpuSpec, ctx: Context, unit: str,
            basis: str, twins: list[str]) -> Recommendation:
    same = c.offer.gpu_model == base.id
    reasons = [f"{c.hours:,.1f} h, {c.cost:,.2f} {c.offer.currency} ({c.pricing.label})",
               ("the timing's own GPU" + (" (measured)" if task.measured else ""))
               if same else c.ratio_basis + " (estimate)"]
    if twins:
        reasons.append(f"the same in {len(twins)} other region(s) ({', '.join(twins[:5])}): "
                       "shown once")
    gpus = c.nodes * c.offer.gpu_count
    if isinstance(task, SimulateTask) and task.jobs < gpus:
        reasons.append(f"{gpus - task.jobs} of its {gpus} GPUs idle: each simulation runs on "
                       "one GPU")
    if c.nodes > 1:
        reasons.append(f"{c.nodes} instances for the deadline (independent pieces: no "
                       "network between them needed)")
    cmp, billing_known = compare(c.offer, c.hours, c.nodes, ctx, True, ctx.cons.deadline_hours)
    option = PriceOption(c.pricing, c.per_hour, c.hours, c.cost)
    reasons += pricing_reasons(option, cmp, billing_known, ctx.cons.deadline_hours)
    return Recommendation(rank=rank, offer=c.offer, nodes=c.nodes, gpus=gpus,
                          pricing=c.pricing, price_per_hour=c.per_hour,
                          currency=c.offer.currency, hours=c.hours, cost=c.cost, rate=c.rate,
                          rate_unit=unit, measured=same and task.measured,
                          reasons=tuple(reasons), basis=(basis,))

