"""Prices: cost/pricing.py's models (billing rounding, whole reserved terms, spot with Daly's
checkpoint interval), computed once per (plan, billing) at a unit price; the pricing model
compare_job would pick; and the reasons that quote its records."""

from __future__ import annotations

from dataclasses import dataclass

from gpuaudit.cost.pricing import (
    compare_job,
    make_job,
    mtbi_hours_from_rate,
    on_demand_cost,
    reserved_cost,
    spot_cost,
)
from gpuaudit.model.cost import Billing, Offer
from gpuaudit.model.lite import Lite, frozen
from gpuaudit.model.pricing import JobComparison
from gpuaudit.model.recommendation import Assumptions, PricingModel

from .context import Context

# pricing.py is the one model of billing, reserved terms and spot (Daly's checkpoint interval
# and expected completion time). Each of its costs is linear in the price: billed hours ×
# price × instances, whole terms × price × instances, expected billed hours × spot price ×
# instances. So its functions run once per distinct (hours, nodes, billing, minimum), with
# every price set to 1, and each offer's cost is that figure × its price: 10,000 offers with
# a few dozen hardware plans and three billing units need a few hundred calls, not 40,000.


def for_pricing(offer: Offer) -> tuple[Offer, bool]:
    """The offer as pricing.py takes it, and whether its billing unit was listed. A catalog
    row without one is billed per second with no minimum (the finest granularity: the
    cheapest reading, which the reasons state)."""
    billing = getattr(offer, "billing", None)
    minimum = getattr(offer, "billing_minimum_s", None)
    if billing is None or minimum is None:
        priced = offer.model_copy(update={"billing": billing or Billing.SECOND,
                                          "billing_minimum_s": minimum or 0.0})
        return priced, billing is not None
    return offer, True


def spot_inputs(ass: Assumptions) -> dict[str, float]:
    """pricing.spot_cost's arguments: the per-instance MTBI from the probability of an
    interruption within an hour (pricing.mtbi_hours_from_rate), checkpoint and restart."""
    return {"mtbi_hours": mtbi_hours_from_rate(ass.spot_interruptions_per_hour, 1.0),
            "checkpoint_s": ass.checkpoint_minutes * 60,
            "restart_s": ass.restart_minutes * 60}


@frozen
class UnitCosts(Lite):
    """pricing.py's figures for one plan at a price of 1 per hour (all nodes)."""

    hours: float  # wall-clock hours without interruptions
    on_demand: float  # cost per unit price: billed hours × nodes
    reserved_1y: float  # whole terms × nodes
    reserved_3y: float
    spot_hours: float | None  # expected wall-clock hours on spot (Daly); None: not offered
    spot: float | None  # expected cost per unit price


_UNIT_PRICES = {"on_demand_price_per_hour": 1.0, "spot_price_per_hour": 1.0,
                "reserved_1y_price_per_hour": 1.0, "reserved_3y_price_per_hour": 1.0}


def unit_costs(offer: Offer, hours: float, nodes: int, ctx: Context, spot_ok: bool
               ) -> UnitCosts:
    billing = getattr(offer, "billing", None) or Billing.SECOND
    minimum = getattr(offer, "billing_minimum_s", None) or 0.0
    key = ("unit", hours, nodes, billing, minimum, spot_ok)
    unit = ctx.memo.get(key)
    if unit is None:
        one = offer.model_copy(update={**_UNIT_PRICES, "billing": billing,
                                       "billing_minimum_s": minimum})
        job = make_job(one, wall_hours=hours, instances=nodes)
        spot = spot_cost(one, job, **spot_inputs(ctx.ass)) if spot_ok else None
        # Whole reserved terms are the same whatever the billing unit: once per plan.
        terms = ("reserved", hours, nodes)
        if terms not in ctx.memo:
            ctx.memo[terms] = (reserved_cost(one, job, 1).cost, reserved_cost(one, job, 3).cost)
        r1, r3 = ctx.memo[terms]
        unit = ctx.memo[key] = UnitCosts(
            hours, on_demand_cost(one, job).cost, r1, r3,
            spot.expected_wall_hours if spot else None, spot.expected_cost if spot else None)
    return unit  # type: ignore[no-any-return]


@dataclass(repr=False, eq=False)
class PriceOption:
    model: PricingModel
    per_hour: float  # all nodes
    hours: float  # expected wall-clock hours under this model
    cost: float


def price_options(offer: Offer, unit: UnitCosts, nodes: int) -> list[PriceOption]:
    """Each pricing model the offer has a price for, with the task's (expected) hours and
    cost: pricing.py's figure at a unit price × the offer's price."""
    out: list[PriceOption] = []
    for model, price, cost in (
            (PricingModel.ON_DEMAND, offer.on_demand_price_per_hour, unit.on_demand),
            (PricingModel.RESERVED_1Y, offer.reserved_1y_price_per_hour, unit.reserved_1y),
            (PricingModel.RESERVED_3Y, offer.reserved_3y_price_per_hour, unit.reserved_3y)):
        if price is not None and price > 0:
            out.append(PriceOption(model, price * nodes, unit.hours, cost * price))
    spot = offer.spot_price_per_hour
    if unit.spot is not None and unit.spot_hours is not None and spot is not None and spot > 0:
        out.append(PriceOption(PricingModel.SPOT, spot * nodes, unit.spot_hours,
                               unit.spot * spot))
    return out


def pick_price(options: list[PriceOption], deadline: float | None
               ) -> tuple[PriceOption | None, str]:
    """pricing.compare_job's rule: the cheapest option (ties: the shorter) whose expected
    wall time meets the deadline; '' or the deadline miss when none does. (A test checks
    that both pick the same on every offer of a catalog.)"""
    if not options:
        return None, ""
    meeting = [p for p in options if deadline is None or p.hours <= deadline]
    if not meeting:
        best = min(options, key=lambda p: p.hours)
        return None, f"{best.hours:,.0f} h at best ({best.model.label})"
    return min(meeting, key=lambda p: (p.cost, p.hours)), ""


def compare(offer: Offer, hours: float, nodes: int, ctx: Context, spot_ok: bool,
            deadline: float | None) -> tuple[JobComparison, bool]:
    """pricing.compare_job on the offer itself: the records the reasons quote (built only
    for the offers shown)."""
    priced, billing_known = for_pricing(offer)
    job = make_job(priced, wall_hours=hours, instances=nodes)
    spot = spot_inputs(ctx.ass) if spot_ok else {}
    return compare_job(priced, job, deadline_hours=deadline, **spot), billing_known


def pricing_reasons(price: PriceOption, cmp: JobComparison, billing_known: bool,
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
        text = (f"{price.model.label}: paying {terms} in full ({res.term_cost:,.0f}) costs "
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
        out.append(f"{price.model.label}: spot is not used for serving (interruptions break "
                   "the SLO)")
    if not billing_known:
        out.append("billing unit not listed: billed per second, no minimum (assumed)")
    elif cmp.on_demand is not None and cmp.on_demand.billing is not Billing.SECOND:
        out.append(f"billed per {cmp.on_demand.billing.value}, rounded up")
    return out


