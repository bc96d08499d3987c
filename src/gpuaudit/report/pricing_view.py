"""Terminal views of `gpuaudit cost job|tco|work|idle`: rich renderables, built, never printed.

Every money figure is shown with its currency, and every view ends with where the prices came
from and how old they are.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuaudit.model.economics import IdleCost, PricePerformance, Tco
from gpuaudit.model.pricing import JobComparison, PriceRef
from gpuaudit.report.layout import Fit

_LABEL = {"on_demand": "on-demand", "reserved_1y": "reserved 1 y", "reserved_3y": "reserved 3 y",
          "spot": "spot"}


def money(value: float, currency: str) -> str:
    """2 decimals for sums a person pays, more where the figure is small (per-token costs)."""
    if value != 0 and abs(value) < 1:
        return f"{value:.4g} {currency}"
    return f"{value:,.2f} {currency}"


def hours(value: float) -> str:
    return f"{value:,.2f} h" if value >= 1 else f"{value * 60:.1f} min"


def _source(ref: PriceRef | None = None, *, source: str | None = None,
            price_date: object | None = None) -> Text:
    if ref is not None:
        source, price_date = ref.source, ref.price_date
    when = f", {price_date}" if price_date else ""
    return Text(f"prices: {source}{when}", style="dim")


def job_view(c: JobComparison) -> RenderableType:
    job = c.job
    head = Text(f"{c.offer}: {job.gpu_hours:,.4g} GPU-hours on {job.instances} × "
                f"{job.gpus_per_instance} GPUs = {hours(job.solve_hours)} without interruptions"
                + (f"; deadline {hours(c.deadline_hours)}" if c.deadline_hours else ""))
    table = Table(show_edge=False, pad_edge=False)
    for col in ("option", "price/h (instance)", "wall time", "cost", "deadline", "note"):
        table.add_column(col, justify="right" if col in ("wall time", "cost",
                                                         "price/h (instance)") else "left")
    details = {"on_demand": c.on_demand, "reserved_1y": c.reserved_1y,
               "reserved_3y": c.reserved_3y, "spot": c.spot}
    for o in c.options:
        d = details[o.name]
        note = ""
        if o.name == "on_demand" and c.on_demand:
            note = (f"billed {hours(c.on_demand.billed_hours)} per instance "
                    f"({c.on_demand.billing.value}"
                    + (" assumed: not listed" if c.on_demand.billing_assumed else "")
                    + (f", {c.on_demand.billing_minimum_s:g} s minimum"
                       if c.on_demand.billing_minimum_s else "") + ")")
        elif o.name.startswith("reserved") and d is not None:
            be = d.break_even_utilization  # type: ignore[union-attr]
            note = ("whole term" if d.utilization is None  # type: ignore[union-attr]
                    else f"at {d.utilization:.0%} use")  # type: ignore[union-attr]
            if be is not None:
                note += f"; breaks even with on-demand at {be:.0%} use"
        elif o.name == "spot" and c.spot:
            p = c.spot.plan
            note = (f"expected; {c.spot.expected_interruptions:.2g} interruptions, "
                    f"checkpoint every {p.interval_s / 60:.1f} min (Daly; Young "
                    f"{p.young_interval_s / 60:.1f}), +{c.spot.overhead_pct:.1f} %")
        deadline = "" if o.meets_deadline is None else ("meets" if o.meets_deadline
                                                        else "misses")
        style = "bold green" if o.name == c.cheapest else None
        table.add_row(_LABEL[o.name], money(d.price.price_per_hour, c.currency),  # type: ignore[union-attr]
                      hours(o.wall_hours), money(o.cost, c.currency), deadline, note,
                      style=style)
    parts: list[RenderableType] = [head, Fit(table), Text(c.verdict, style="bold")]
    for u in c.unpriced:
        parts.append(Text(f"{_LABEL[u.name]}: not priced ({u.reason})", style="dim"))
    if c.spot:
        parts.extend(Text(f"spot assumes: {a}", style="dim") for a in c.spot.assumptions)
    parts.append(_source(source=c.price_source, price_date=c.price_date))
    return Group(*parts)


def tco_view(t: Tco) -> RenderableType:
    cur = t.currency
    table = Table(show_edge=False, pad_edge=False, show_header=False)
    table.add_column("item")
    table.add_column("value", justify="right")
    table.add_column("how", style="dim")
    table.add_row("capital (per year)", money(t.annual_capital_cost, cur),
                  f"{money(t.capex, cur)} over {t.amortization_years:g} y at "
                  f"{t.cost_of_capital_pct:g} %, residual {t.residual_value_pct:g} %")
    table.add_row("energy (per year)", money(t.annual_energy_cost, cur),
                  f"{t.power_w:,.0f} W ({t.power_source}) × PUE {t.pue:g} × 8760 h × "
                  f"{t.price_per_kwh:g} {cur}/kWh")
    table.add_row("colocation (per year)", money(t.annual_colocation_cost, cur),
                  f"{money(t.colocation_per_month, cur)} per month")
    table.add_row("maintenance (per year)", money(t.annual_maintenance_cost, cur),
                  f"{t.maintenance_pct_per_year:g} % of capex")
    table.add_row("total (per year)", money(t.annual_cost, cur), f"{t.gpu_count} GPUs",
                  style="bold")
    table.add_row("per GPU-hour, fully used", money(t.cost_per_gpu_hour_at_full_use, cur), "")
    table.add_row("per used GPU-hour", money(t.cost_per_used_gpu_hour, cur),
                  f"at {t.utilization:.0%} utilization", style="bold")
    parts: list[RenderableType] = [Fit(table)]
    if t.rental_price_per_gpu_hour is not None and t.break_even_utilization is not None:
        be = t.break_even_utilization
        rent = money(t.rental_price_per_gpu_hour, cur)
        if be > 1:
            parts.append(Text(f"against renting at {rent} per GPU-hour: owning never pays "
                              f"(it would need {be:.0%} utilization)", style="bold"))
        else:
            parts.append(Text(f"against renting at {rent} per GPU-hour: owning is cheaper above "
                              f"{be:.1%} utilization; at {t.utilization:.0%}, {t.cheaper}",
                              style="bold"))
    return Group(*parts)


def work_view(p: PricePerformance) -> RenderableType:
    table = Table(show_edge=False, pad_edge=False)
    for col in ("work", "cost", "rate (instance)", "basis", "assumptions"):
        table.add_column(col, justify="right" if col in ("cost", "rate (instance)") else "left")
    names = {"pflop_hour": "PFLOP-hour", "million_training_tokens": "1M training tokens",
             "thousand_inferences": "1000 inferences", "epoch": "epoch"}
    for r in p.results:
        basis = f"measured (run {r.run_id})" if r.basis == "measured" else r.basis
        table.add_row(names[r.metric], money(r.cost, r.currency), f"{r.rate:,.4g} {r.rate_unit}",
                      basis, "; ".join(r.assumptions))
    ref = p.price
    head = Text(f"{ref.offer} ({ref.gpu_count} × {p.gpu_model}), {ref.kind.value.replace('_', '-')}"
                f" {money(ref.price_per_hour, ref.currency)} per hour")
    parts: list[RenderableType] = [head, Fit(table)]
    parts.extend(Text(n, style="yellow") for n in p.notes)
    parts.append(_source(ref))
    return Group(*parts)


def idle_view(c: IdleCost) -> RenderableType:
    cur = c.currency
    table = Table(show_edge=False, pad_edge=False)
    for col in ("host", "GPU", "observed", "idle", "unknown", "idle cost"):
        table.add_column(col, justify="left" if col == "host" else "right")
    for g in c.gpus:
        table.add_row(g.hostname, str(g.gpu), hours(g.observed_hours), hours(g.idle_hours),
                      hours(g.unknown_hours), money(g.idle_cost, cur))
    frac = "" if c.idle_fraction is None else f" ({c.idle_fraction:.1%} of the observed time)"
    summary = Text(f"{c.idle_gpu_hours:,.3g} idle GPU-hours{frac} between "
                   f"{c.since:%Y-%m-%d %H:%M} and {c.until:%Y-%m-%d %H:%M} UTC: "
                   f"{money(c.idle_cost, cur)} at {money(c.price_per_gpu_hour, cur)} per "
                   f"GPU-hour", style="bold")
    rule = Text(f"idle: activity (SM activity, else GPU utilization) under {c.threshold_pct:g} %;"
                " readings missing or unreadable count as unknown, never idle", style="dim")
    parts: list[RenderableType] = [Fit(table)] if c.gpus else [Text("no telemetry in that range")]
    return Group(*parts, summary, rule, _source(source=c.price_source, price_date=c.price_date))
