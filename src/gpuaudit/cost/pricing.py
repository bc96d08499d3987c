"""Pricing models for one job: on-demand, reserved and spot (with checkpoints), compared.

The spot model is Daly's (2006): interruptions arrive as a Poisson process with mean time M
between them; work is cut into compute intervals of τ, each followed by a checkpoint taking δ;
an interruption loses the work since the last checkpoint and costs a restart R (interruptions
may strike during a restart too). Young's (1974) sqrt(2δM) is the first-order optimum of τ,
Daly's perturbation solution the higher-order one. docs/cost.md gives the formulas, the
references and the worked examples the tests check.
"""

from __future__ import annotations

import math

from gpuaudit.errors import BadInputError
from gpuaudit.model.cost import BILLING_ASSUMPTION, Billing, Offer
from gpuaudit.model.pricing import (
    CheckpointPlan,
    Job,
    JobComparison,
    OnDemandCost,
    PriceRef,
    PricingModel,
    PricingOption,
    ReservedCost,
    SpotCost,
    Unpriced,
)

HOURS_PER_YEAR = 8760.0
GRANULARITY_S = {Billing.SECOND: 1.0, Billing.MINUTE: 60.0, Billing.HOUR: 3600.0}
# Floating-point slack when rounding up to a billing unit: 3600.0000000001 s is one hour.
_ROUND_EPS = 1e-9


# -- input checks ------------------------------------------------------------------------------


def _positive(name: str, value: float) -> float:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise BadInputError(f"{name} must be a number > 0, not {value!r}")
    return float(value)


def _non_negative(name: str, value: float) -> float:
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
        raise BadInputError(f"{name} must be a number >= 0, not {value!r}")
    return float(value)


def _fraction(name: str, value: float) -> float:
    if not (isinstance(value, int | float) and 0 < value <= 1):
        raise BadInputError(f"{name} must be in (0, 1], not {value!r}")
    return float(value)


def price_ref(offer: Offer, kind: PricingModel) -> PriceRef:
    """The offer's price of that kind; BadInputError when the offer has none or it is ≤ 0."""
    value = getattr(offer, kind.price_field)
    if value is None:
        raise BadInputError(f"{offer.key} has no {kind.value.replace('_', ' ')} price")
    _positive(f"{offer.key} {kind.value} price per hour", value)
    return PriceRef(offer=offer.key, kind=kind, price_per_hour=value, gpu_count=offer.gpu_count,
                    currency=offer.currency, source=offer.source, price_date=offer.price_date)


# -- interruptions and checkpoints ---------------------------------------------------------------


def mtbi_hours_from_rate(interruption_rate: float, period_hours: float = 1.0) -> float:
    """Mean time between interruptions from the probability `interruption_rate` that an
    instance is interrupted within `period_hours` (e.g. AWS's Spot Advisor buckets are read
    per month: period 720 h). Exponential lifetimes: p = 1 − exp(−period/M), so
    M = −period / ln(1 − p). For small p, M ≈ period / p."""
    if not (isinstance(interruption_rate, int | float) and 0 < interruption_rate < 1):
        raise BadInputError(f"interruption rate is a probability per period and must be in "
                            f"(0, 1), not {interruption_rate!r}")
    _positive("interruption period", period_hours)
    return -period_hours / math.log1p(-interruption_rate)


def young_interval_s(checkpoint_s: float, mtbi_s: float) -> float:
    """Young (1974): the first-order optimum compute time between checkpoints, sqrt(2δM)."""
    return math.sqrt(2 * _positive("checkpoint time", checkpoint_s) * _positive("MTBI", mtbi_s))


def daly_interval_s(checkpoint_s: float, mtbi_s: float) -> float:
    """Daly (2006), eq. (37): τ = sqrt(2δM)·[1 + (1/3)·sqrt(δ/2M) + (1/9)·(δ/2M)] − δ for
    δ < 2M, else τ = M."""
    delta, m = _positive("checkpoint time", checkpoint_s), _positive("MTBI", mtbi_s)
    if delta >= 2 * m:
        return m
    x = delta / (2 * m)
    return math.sqrt(2 * delta * m) * (1 + math.sqrt(x) / 3 + x / 9) - delta


def daly_wall_time_s(solve_s: float, interval_s: float, checkpoint_s: float, restart_s: float,
                     mtbi_s: float) -> float:
    """Daly's expected completion time, as published (eq. 13):
    T_w = M·e^{R/M}·(e^{(τ+δ)/M} − 1)·T_s/τ — every interval, the last included, ends with a
    checkpoint, and T_s/τ need not be a whole number."""
    solve_s, tau = _positive("solve time", solve_s), _positive("interval", interval_s)
    delta, m = _positive("checkpoint time", checkpoint_s), _positive("MTBI", mtbi_s)
    r = _non_negative("restart time", restart_s)
    return m * math.exp(r / m) * math.expm1((tau + delta) / m) * solve_s / tau


def expected_wall_time_s(solve_s: float, interval_s: float, checkpoint_s: float,
                         restart_s: float, mtbi_s: float) -> float:
    """Daly's model for a job of finite length: n = ⌈T_s/τ⌉ − 1 intervals of τ each followed
    by a checkpoint, then the rest (≤ τ) with no checkpoint after it, since the job is done.
    A segment of length s takes M·e^{R/M}·(e^{s/M} − 1) on average (Daly's per-segment
    result), so T = M·e^{R/M}·[n·(e^{(τ+δ)/M} − 1) + (e^{(T_s − nτ)/M} − 1)].
    For a short job (τ ≥ T_s) this is one segment without checkpoints, where the published
    formula would still charge a checkpoint and a fraction of an interval."""
    solve_s, tau = _positive("solve time", solve_s), _positive("interval", interval_s)
    delta, m = _positive("checkpoint time", checkpoint_s), _positive("MTBI", mtbi_s)
    r = _non_negative("restart time", restart_s)
    n = max(math.ceil(solve_s / tau - _ROUND_EPS) - 1, 0)
    rest = solve_s - n * tau
    return m * math.exp(r / m) * (n * math.expm1((tau + delta) / m) + math.expm1(rest / m))


# -- billing -------------------------------------------------------------------------------------


def billed_seconds(wall_s: float, billing: Billing = Billing.SECOND,
                   minimum_s: float = 0.0) -> float:
    """Seconds billed for `wall_s` of use in one session: rounded up to the billing unit, and
    at least the minimum (e.g. AWS: per second, 60 s minimum)."""
    wall_s = _non_negative("wall time", wall_s)
    unit = GRANULARITY_S[Billing(billing)]
    rounded = math.ceil(wall_s / unit - _ROUND_EPS) * unit
    return max(rounded, _non_negative("billing minimum", minimum_s))


# -- the job -------------------------------------------------------------------------------------


def make_job(offer: Offer, *, gpu_hours: float | None = None, wall_hours: float | None = None,
             instances: int = 1) -> Job:
    """A job of `gpu_hours` GPU-hours, or of `wall_hours` on `instances` of the offer's
    instances (exactly one of the two)."""
    if (gpu_hours is None) == (wall_hours is None):
        raise BadInputError("give the job's size as GPU-hours or as wall hours (one of them)")
    if not isinstance(instances, int) or instances < 1:
        raise BadInputError(f"instances must be a whole number >= 1, not {instances!r}")
    gpus = offer.gpu_count * instances
    if gpu_hours is not None:
        gpu_hours = _positive("GPU-hours", gpu_hours)
        solve = gpu_hours / gpus
    else:
        solve = _positive("wall hours", wall_hours)  # type: ignore[arg-type]
        gpu_hours = solve * gpus
    return Job(gpu_hours=gpu_hours, gpus_per_instance=offer.gpu_count, instances=instances,
               solve_hours=solve)


def on_demand_cost(offer: Offer, job: Job) -> OnDemandCost:
    price = price_ref(offer, PricingModel.ON_DEMAND)
    billed_h = billed_seconds(job.solve_hours * 3600, offer.effective_billing,
                              offer.billing_minimum_s) / 3600
    return OnDemandCost(price=price, instances=job.instances, wall_hours=job.solve_hours,
                        billing=offer.effective_billing, billing_assumed=not offer.billing_known,
                        billing_minimum_s=offer.billing_minimum_s,
                        billed_hours=billed_h,
                        cost=billed_h * price.price_per_hour * job.instances,
                        currency=offer.currency)


def reserved_cost(offer: Offer, job: Job, term_years: int = 1,
                  utilization: float | None = None) -> ReservedCost:
    """A reservation of `term_years` for the job's instances. With `utilization` None the job
    is all that runs on it, so the job pays every term it needs in full; with a utilization
    (the share of reserved hours that carry work, this job's included) the job pays its
    hours at the effective rate price / utilization."""
    if term_years not in (1, 3):
        raise BadInputError(f"reserved terms are 1 or 3 years, not {term_years!r}")
    kind = PricingModel.RESERVED_1Y if term_years == 1 else PricingModel.RESERVED_3Y
    price = price_ref(offer, kind)
    if utilization is not None:
        utilization = _fraction("utilization", utilization)
    term_h = term_years * HOURS_PER_YEAR
    terms = max(math.ceil(job.solve_hours / term_h - _ROUND_EPS), 1)
    term_cost = terms * term_h * price.price_per_hour * job.instances
    if utilization is None:
        cost = term_cost
    else:
        cost = job.solve_hours * price.price_per_hour / utilization * job.instances
    od = offer.on_demand_price_per_hour
    break_even = price.price_per_hour / od if od else None
    return ReservedCost(price=price, term_years=term_years, term_hours=term_h,
                        instances=job.instances, terms_needed=terms, term_cost=term_cost,
                        wall_hours=job.solve_hours, utilization=utilization, cost=cost,
                        break_even_utilization=break_even, currency=offer.currency)


def checkpoint_plan(mtbi_hours: float, checkpoint_s: float, restart_s: float,
                    interval_s: float | None = None) -> CheckpointPlan:
    m_s = _positive("mean time between interruptions", mtbi_hours) * 3600
    young = young_interval_s(checkpoint_s, m_s)
    daly = daly_interval_s(checkpoint_s, m_s)
    _non_negative("restart time", restart_s)
    used = daly if interval_s is None else _positive("checkpoint interval", interval_s)
    return CheckpointPlan(mtbi_hours=mtbi_hours, checkpoint_s=checkpoint_s, restart_s=restart_s,
                          young_interval_s=young, daly_interval_s=daly, interval_s=used)


def spot_cost(offer: Offer, job: Job, *, mtbi_hours: float, checkpoint_s: float,
              restart_s: float, interval_s: float | None = None) -> SpotCost:
    """Expected wall time and cost on spot capacity. `mtbi_hours` is per instance: a job on
    n instances stops when any of them is interrupted, so its own MTBI is M/n."""
    price = price_ref(offer, PricingModel.SPOT)
    job_mtbi_h = _positive("mean time between interruptions", mtbi_hours) / job.instances
    plan = checkpoint_plan(job_mtbi_h, checkpoint_s, restart_s, interval_s)
    wall_s = expected_wall_time_s(job.solve_hours * 3600, plan.interval_s, checkpoint_s,
                                  restart_s, job_mtbi_h * 3600)
    wall_h = wall_s / 3600
    billed_h = billed_seconds(wall_s, offer.effective_billing, offer.billing_minimum_s) / 3600
    assumptions = (() if offer.billing_known else (BILLING_ASSUMPTION,)) + (
        "interruptions arrive at random (exponential lifetimes, Poisson process), "
        f"mean {job_mtbi_h:.4g} h between them for the job"
        + (f" ({mtbi_hours:.4g} h per instance ÷ {job.instances})" if job.instances > 1
           else ""),
        "the whole expected wall time is billed at the spot price, restarts included; "
        "billing rounding applied once, not per session",
        "the spot price stays as listed for the whole job",
    )
    return SpotCost(price=price, instances=job.instances, plan=plan, solve_hours=job.solve_hours,
                    expected_wall_hours=wall_h, expected_interruptions=wall_h / job_mtbi_h,
                    overhead_pct=(wall_h - job.solve_hours) / job.solve_hours * 100,
                    billed_hours=billed_h,
                    expected_cost=billed_h * price.price_per_hour * job.instances,
                    currency=offer.currency, assumptions=assumptions)


def compare_job(offer: Offer, job: Job, *, mtbi_hours: float | None = None,
                checkpoint_s: float = 300.0, restart_s: float = 600.0,
                interval_s: float | None = None, deadline_hours: float | None = None,
                reserved_utilization: float | None = None) -> JobComparison:
    """On-demand, reserved (1 and 3 years) and spot for the job, cheapest first, and the
    cheapest that meets the deadline. Spot is priced only with an MTBI: without one its
    expected time is unknown. Spot meets a deadline on average (its expected wall time), not
    with certainty."""
    if deadline_hours is not None:
        _positive("deadline", deadline_hours)
    if reserved_utilization is not None:
        _fraction("utilization", reserved_utilization)
    unpriced: list[Unpriced] = []
    od = r1 = r3 = spot = None
    try:
        od = on_demand_cost(offer, job)
    except BadInputError as exc:
        unpriced.append(Unpriced(name=PricingModel.ON_DEMAND, reason=str(exc)))
    for years in (1, 3):
        try:
            res = reserved_cost(offer, job, years, reserved_utilization)
        except BadInputError as exc:  # no such price: the checks of the inputs came first
            unpriced.append(Unpriced(name=PricingModel.RESERVED_1Y if years == 1 else
                                     PricingModel.RESERVED_3Y, reason=str(exc)))
            continue
        if years == 1:
            r1 = res
        else:
            r3 = res
    if offer.spot_price_per_hour is None:
        unpriced.append(Unpriced(name=PricingModel.SPOT,
                                 reason=f"{offer.key} has no spot price"))
    elif mtbi_hours is None:
        unpriced.append(Unpriced(name=PricingModel.SPOT,
                                 reason="no interruption rate or MTBI given"))
    else:
        spot = spot_cost(offer, job, mtbi_hours=mtbi_hours, checkpoint_s=checkpoint_s,
                         restart_s=restart_s, interval_s=interval_s)

    def option(name: str, wall: float, cost: float) -> PricingOption:
        meets = None if deadline_hours is None else wall <= deadline_hours
        return PricingOption(name=PricingModel(name), wall_hours=wall, cost=cost,
                             currency=offer.currency, meets_deadline=meets)

    options = []
    if od:
        options.append(option("on_demand", od.wall_hours, od.cost))
    if r1:
        options.append(option("reserved_1y", r1.wall_hours, r1.cost))
    if r3:
        options.append(option("reserved_3y", r3.wall_hours, r3.cost))
    if spot:
        options.append(option("spot", spot.expected_wall_hours, spot.expected_cost))
    options.sort(key=lambda o: (o.cost, o.wall_hours))
    eligible = [o for o in options if o.meets_deadline is not False]
    cheapest = eligible[0] if eligible else None
    return JobComparison(
        offer=offer.key, job=job, deadline_hours=deadline_hours, on_demand=od, reserved_1y=r1,
        reserved_3y=r3, spot=spot, options=tuple(options), unpriced=tuple(unpriced),
        cheapest=cheapest.name if cheapest else None,
        verdict=_verdict(options, cheapest, deadline_hours, offer.currency),
        currency=offer.currency, price_source=offer.source, price_date=offer.price_date)


_LABEL = {"on_demand": "on-demand", "reserved_1y": "1-year reserved",
          "reserved_3y": "3-year reserved", "spot": "spot"}


def _verdict(options: list[PricingOption], cheapest: PricingOption | None,
             deadline_hours: float | None, currency: str) -> str:
    if not options:
        return "nothing could be priced"
    if cheapest is None:
        fastest = min(options, key=lambda o: o.wall_hours)
        return (f"no option meets the {deadline_hours:g} h deadline: the fastest, "
                f"{_LABEL[fastest.name]}, needs {fastest.wall_hours:.4g} h")
    expected = "expected " if cheapest.name == "spot" else ""
    text = (f"{_LABEL[cheapest.name]} is cheapest"
            + (f" within the {deadline_hours:g} h deadline" if deadline_hours else "")
            + f": {expected}{cheapest.cost:,.2f} {currency}, {expected}"
              f"{cheapest.wall_hours:.4g} h")
    skipped = [o for o in options if o.cost < cheapest.cost]
    if skipped:
        text += "; " + ", ".join(f"{_LABEL[o.name]} ({o.cost:,.2f} {currency}) would take "
                                 f"{o.wall_hours:.4g} h" for o in skipped)
    return text
