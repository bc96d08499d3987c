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

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gpuaudit.model.cost import Offer
from gpuaudit.model.pricing import PricingModel

from .context import Context
from .hardware import Hardware
from .network import PROVIDERS_WITH_NETWORKS, network_of
from .prices import unit_costs

_OD, _R1, _R3, _SPOT = (PricingModel.ON_DEMAND, PricingModel.RESERVED_1Y,
                        PricingModel.RESERVED_3Y, PricingModel.SPOT)
INF = math.inf


@dataclass(repr=False, eq=False)
class Sweep:
    """`ok`: (cost, hours, index, offer, hardware, pricing model, price per hour of all
    nodes) of each feasible offer; `out`: (sort price, index, offer, kind, reason maker,
    its arguments) of each excluded one."""

    ok: list[tuple[float, float, int, Offer, Hardware, PricingModel, float]]
    out: list[tuple[float, int, Offer, str, Callable[..., str], tuple[Any, ...]]]


def _currency(offer: Offer, cur: str) -> str:
    return f"priced in {offer.currency}; ranking in {cur} (no exchange rates)"


def _no_price() -> str:
    return "no price"


def _call(make: Callable[[], str]) -> str:
    return make()


def _deadline(deadline: float, hours: float, model: PricingModel) -> str:
    return f"misses the {deadline:g} h deadline: {hours:,.0f} h at best ({model.label})"


def _budget(offer: Offer, cost: float, model: PricingModel, budget: float,
            serve_hours: float | None) -> str:
    if serve_hours is not None:
        return (f"costs {cost:,.0f} {offer.currency} for {serve_hours:g} h, over the budget "
                f"of {budget:,.0f}")
    return (f"costs {cost:,.0f} {offer.currency} ({model.label}), over the budget of "
            f"{budget:,.0f}")


def _no_serving_price() -> str:
    return ("no on-demand or reserved price (spot is not used for serving: an interruption "
            "breaks the SLO)")


def _no_usable_price() -> str:
    return "no usable price"


def sweep(offers: Iterable[Offer], ctx: Context,
          build: Callable[[Offer, Context], Hardware | tuple[str, Callable[[], str]]],
          serving: bool) -> Sweep:
    """Each offer's hardware plan (memoized per GPU model, count, memory and network), its
    pricing models at pricing.py's figures × its prices, the cheapest that meets the
    deadline (serving: on-demand or reserved), then the budget."""
    cons = ctx.cons
    # Serving has no deadline: its hours are the hours asked for.
    cur, budget = cons.currency, cons.budget
    deadline = None if serving else cons.deadline_hours
    serve_hours = getattr(ctx.task, "hours", None) if serving else None
    memo = ctx.memo
    nets: dict[tuple[str, str], Any] = {}
    units: dict[tuple[Any, ...], tuple[float, ...]] = {}
    ok: list[tuple[float, float, int, Offer, Hardware, PricingModel, float]] = []
    out: list[tuple[float, int, Offer, str, Callable[..., str], tuple[Any, ...]]] = []
    add_ok, add_out = ok.append, out.append
    pooled = PROVIDERS_WITH_NETWORKS
    for i, offer in enumerate(offers):
        (provider, itype, _region, gpu_model, count, mem, _vcpus, _ram, currency, od, spot,
         r1, r3, billing, minimum, _host, _gpu, _source, _date, _notes) = offer
        if currency != cur:
            add_out((od or spot or INF, i, offer, "currency", _currency, (offer, cur)))
            continue
        if not (od or spot or r1 or r3):
            add_out((INF, i, offer, "price", _no_price, ()))
            continue
        net = None
        if provider in pooled:
            net = nets.get((provider, itype), 0)
            if net == 0:
                net = nets[(provider, itype)] = network_of(provider, itype)
        key = ("hw", gpu_model, count, mem, net)
        hw = memo.get(key)
        if hw is None:
            hw = memo[key] = build(offer, ctx)
        if hw.__class__ is tuple:
            add_out((od or spot or INF, i, offer, hw[0], _call, (hw[1],)))
            continue
        ukey = (id(hw), billing, minimum)
        u = units.get(ukey)
        if u is None:
            c = unit_costs(offer, hw.hours, hw.nodes, ctx, not serving)
            u = units[ukey] = (c.hours, c.on_demand, c.reserved_1y, c.reserved_3y,
                               c.spot if c.spot is not None else -1.0,
                               c.spot_hours if c.spot_hours is not None else INF)
        hours, odu, r1u, r3u, su, sh = u
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
                add_out((od or spot or INF, i, offer, "deadline", _deadline,
                         (deadline, fh, fm)))
            else:
                add_out((od or spot or INF, i, offer, "price",
                         _no_serving_price if serving else _no_usable_price, ()))
            continue
        if budget is not None and bc > budget:
            add_out((od or spot or INF, i, offer, "budget", _budget,
                     (offer, bc, bm, budget, serve_hours)))
            continue
        add_ok((bc, bh, i, offer, hw, bm, bp * hw.nodes))
    return Sweep(ok, out)


def order(ok: list[tuple[float, float, int, Offer, Hardware, PricingModel, float]],
          by_time: bool) -> None:
    """Cheapest first (ties: the shorter, then the offer key), or fastest first (ties: the
    cheaper, then the key); in place."""
    first, second = (1, 0) if by_time else (0, 1)
    ok.sort(key=lambda r: (r[first], r[second]))
    # Ties are rare: order each run of equal figures by offer key, as a reader expects.
    i, n = 0, len(ok)
    while i < n:
        j = i + 1
        while j < n and ok[j][0] == ok[i][0] and ok[j][1] == ok[i][1]:
            j += 1
        if j - i > 1:
            ok[i:j] = sorted(ok[i:j], key=lambda r: r[3].key)
        i = j
