"""Every offer in one pass, numbers only: which offers can do the task, at what cost and in
how long, and why the others cannot. The reasons and records are built afterwards, for the
offers shown only, by the per-offer evaluation in `ranking` (which a test holds this pass
to: the same choice, cost and hours for every offer of a catalog).

Why a separate pass: 10,000 offers share a few dozen hardware plans and a few billing units,
so the work per offer is a few dictionary lookups and four multiplications; building a
record, a closure and four price options for each of them cost several times the ranking
itself.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import compress, islice, repeat
from operator import eq, ge, itemgetter
from typing import Any

from gpuaudit.cost.catalog.records import OfferColumns
from gpuaudit.model.cost import FIELDS, Offer
from gpuaudit.model.pricing import PricingModel

from .context import Context
from .hardware import Hardware, Reject, with_network, without_network
from .network import PROVIDERS_WITH_NETWORKS, network_of
from .prices import unit_costs

_OD, _R1, _R3, _SPOT = (PricingModel.ON_DEMAND, PricingModel.RESERVED_1Y,
                        PricingModel.RESERVED_3Y, PricingModel.SPOT)
INF = math.inf


@dataclass(repr=False, eq=False)
class Sweep:
    """`ok`: (cost, hours, index, hardware, pricing model, price per hour of all nodes) of
    each feasible offer; `out`: (sort price, index, kind, reason maker, its arguments) of each
    excluded one. The index is the offer's in the sequence swept."""

    ok: list[tuple[float, float, int, Hardware, PricingModel, float]]
    out: list[tuple[float, int, str, Callable[..., str], tuple[Any, ...]]]


def _currency(currency: str, cur: str) -> str:
    return f"priced in {currency}; ranking in {cur} (no exchange rates)"


def _no_price() -> str:
    return "no price"


def _deadline(deadline: float, hours: float, model: PricingModel) -> str:
    return f"misses the {deadline:g} h deadline: {hours:,.0f} h at best ({model.label})"


def _budget(currency: str, cost: float, model: PricingModel, budget: float,
            serve_hours: float | None) -> str:
    if serve_hours is not None:
        return (f"costs {cost:,.0f} {currency} for {serve_hours:g} h, over the budget "
                f"of {budget:,.0f}")
    return (f"costs {cost:,.0f} {currency} ({model.label}), over the budget of "
            f"{budget:,.0f}")


def _no_serving_price() -> str:
    return ("no on-demand or reserved price (spot is not used for serving: an interruption "
            "breaks the SLO)")


def _no_usable_price() -> str:
    return "no usable price"


# The fields the sweep reads, in this order (an `Offer`'s others are read for those shown).
SWEPT = ("provider", "instance_type", "gpu_model", "gpu_count", "gpu_memory_gib", "currency",
         "on_demand_price_per_hour", "spot_price_per_hour", "reserved_1y_price_per_hour",
         "reserved_3y_price_per_hour", "billing", "billing_minimum_s")
_SWEPT_AT = itemgetter(*(FIELDS.index(name) for name in SWEPT))
# A plan of (GPU model, count, memory) that depends on the instance type's network.
_BY_NETWORK = ("by-network",)


def _priced(offer: Offer, ctx: Context, hw: Hardware | Reject | None, serving: bool
            ) -> tuple[Any, ...]:
    """What the sweep keeps per plan and billing unit: (kind, reason) for a plan that cannot
    do the task; else (plan, hours, pricing.py's cost per unit price on demand, reserved
    1 y, 3 y, spot (-1: none), spot hours); `_BY_NETWORK` when it depends on the network."""
    if hw is None:
        return _BY_NETWORK
    if isinstance(hw, tuple):
        return hw
    c = unit_costs(offer, hw.hours, hw.nodes, ctx, not serving)
    return (hw, c.hours, c.on_demand, c.reserved_1y, c.reserved_3y,
            c.spot if c.spot is not None else -1.0,
            c.spot_hours if c.spot_hours is not None else INF)


def sweep(offers: Sequence[Offer], ctx: Context, serving: bool) -> Sweep:
    """Each offer's hardware plan (memoized per GPU model, count and memory, and network
    where the plan depends on it: `hardware.without_network`), its pricing models at
    pricing.py's figures × its prices, the cheapest that meets the deadline (serving:
    on-demand or reserved), then the budget. An `Offer` is made only for the plans and
    billing units met first (`OfferColumns` keeps the rest as fields)."""
    cons = ctx.cons
    # Serving has no deadline: its hours are the hours asked for.
    cur, budget = cons.currency, cons.budget
    deadline = None if serving else cons.deadline_hours
    serve_hours = getattr(ctx.task, "hours", None) if serving else None
    # (GPU model, count, memory, billing unit, minimum) → `_priced`: the plan whatever the
    # network, or `_BY_NETWORK`: then the instance type's network is looked up (a regular
    # expression per instance type, most of a catalog's being distinct) and the plan kept
    # per network too.
    plans: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    by_network: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    ok: list[tuple[float, float, int, Hardware, PricingModel, float]] = []
    out: list[tuple[float, int, str, Callable[..., str], tuple[Any, ...]]] = []
    add_ok, add_out = ok.append, out.append
    pooled = PROVIDERS_WITH_NETWORKS
    rows = (offers.fields(SWEPT) if isinstance(offers, OfferColumns)
            else map(_SWEPT_AT, offers))
    for i, (provider, itype, gpu_model, count, mem, currency, od, spot, r1, r3, billing,
            minimum) in enumerate(rows):
        if currency != cur:
            add_out((od or spot or INF, i, "currency", _currency, (currency, cur)))
            continue
        if not (od or spot or r1 or r3):
            add_out((INF, i, "price", _no_price, ()))
            continue
        key = (gpu_model, count, mem, billing, minimum)
        plan = plans.get(key)
        if plan is None:
            plan = plans[key] = _priced(offers[i], ctx, without_network(offers[i], ctx,
                                                                        serving), serving)
        if plan is _BY_NETWORK:
            net = network_of(provider, itype) if provider in pooled else None  # memoized
            plan = by_network.get((net, key))  # type: ignore[assignment]
            if plan is None:
                plan = by_network[net, key] = _priced(
                    offers[i], ctx, with_network(offers[i], ctx, net), serving)
        if len(plan) == 2:  # (kind, reason): the plan cannot do the task
            add_out((od or spot or INF, i, plan[0], plan[1], (itype,)))
            continue
        hw, hours, odu, r1u, r3u, su, sh = plan
        # pricing.compare_job's rule, unrolled: the cheapest option (ties: the shorter, then
        # the first of on-demand, reserved 1 y, 3 y, spot) whose hours meet the deadline.
        bc = bh = fh = INF
        bm = fm = None
        bp = 0.0
        if od is not None and od > 0:
            fh, fm = hours, _OD
            if deadline is None or hours <= deadline:
                bc, bh, bm, bp = odu * od, hours, _OD, od
        for model, price, unit in ((_R1, r1, r1u), (_R3, r3, r3u)) if (r1 or r3) else ():
            if price is not None and price > 0:
                if hours < fh:
                    fh, fm = hours, model
                if deadline is None or hours <= deadline:
                    c = unit * price
                    if c < bc or (c == bc and hours < bh):
                        bc, bh, bm, bp = c, hours, model, price
        if spot is not None and spot > 0 and su >= 0:
            if sh < fh:
                fh, fm = sh, _SPOT
            if deadline is None or sh <= deadline:
                c = su * spot
                if c < bc or (c == bc and sh < bh):
                    bc, bh, bm, bp = c, sh, _SPOT, spot
        if bm is None:
            if fm is not None and deadline is not None:
                add_out((od or spot or INF, i, "deadline", _deadline, (deadline, fh, fm)))
            else:
                add_out((od or spot or INF, i, "price",
                         _no_serving_price if serving else _no_usable_price, ()))
            continue
        if budget is not None and bc > budget:
            add_out((od or spot or INF, i, "budget", _budget,
                     (currency, bc, bm, budget, serve_hours)))
            continue
        add_ok((bc, bh, i, hw, bm, bp * hw.nodes))
    return Sweep(ok, out)


def in_order(ok: list[tuple[float, float, int, Hardware, PricingModel, float]], by_time: bool,
             offers: Sequence[Offer]
             ) -> Iterator[tuple[float, float, int, Hardware, PricingModel, float]]:
    """The feasible rows cheapest first (ties: the shorter, then the offer key), or fastest
    first (ties: the cheaper, then the key), ordered a part at a time as the walk over them
    asks: showing ten of 5,000 feasible offers orders a few dozen. Each part is every row up
    to a bound (all rows tied with the last included), so it begins with the part before."""
    figures = itemgetter(1, 0) if by_time else itemgetter(0, 1)
    n, done = 64, 0
    while done < len(ok):
        if n >= len(ok):
            part = sorted(ok, key=figures)
        else:
            bound = figures(heapq.nsmallest(n, ok, key=figures)[-1])
            part = sorted(compress(ok, map(ge, repeat(bound), map(figures, ok))), key=figures)
        _ties_by_key(part, figures, offers)
        yield from part[done:]
        done, n = len(part), n * 8


def _ties_by_key(rows: list[Any], figures: Callable[[Any], Any], offers: Sequence[Offer]
                 ) -> None:
    """Each run of equal figures ordered by offer key, as a reader expects, in place. Ties
    are rare: the runs are found without a Python step per row (j: row j ties row j + 1)."""
    keys = list(map(figures, rows))
    for j in compress(range(len(keys)), map(eq, keys, islice(keys, 1, None))):
        if j > 0 and keys[j - 1] == keys[j]:
            continue  # inside a run already ordered
        end = j + 1
        while end + 1 < len(rows) and keys[end + 1] == keys[j]:
            end += 1
        rows[j:end + 1] = sorted(rows[j:end + 1], key=lambda r: offers[r[2]].key)
