"""Terminal view of `gpuaudit recommend`: the ranked offers, the excluded ones, the basis.

Pure builders (nothing prints). The currency is in every money column's header and the
summary, never implied.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuaudit.cost.pricing import mtbi_hours_from_rate
from gpuaudit.model.recommendation import RecommendResult
from gpuaudit.report.layout import Fit


def _hours(h: float) -> str:
    return f"{h:,.1f} h" if h < 48 else f"{h / 24:,.1f} d"


def _gpus(r) -> str:
    return (f"{r.nodes} × {r.offer.gpu_count} × {r.offer.gpu_model}" if r.nodes > 1
            else f"{r.offer.gpu_count} × {r.offer.gpu_model}")


def _memory(r) -> str:
    mem = f"{r.memory_per_gpu_bytes / 1e9:.3g} GB" if r.memory_per_gpu_bytes else "n/a"
    return mem + (f" ({r.sharding})" if r.sharding and r.sharding != "none" else "")


def _rate(r) -> str:
    return f"{r.rate:,.4g} {r.rate_unit}" + ("" if r.measured else " est.")


def ranked_table(result: RecommendResult) -> Fit:
    cur = result.currency
    table = Table(title=f"Recommended offers ({cur})", title_justify="left")
    for name, justify in (("#", "right"), ("offer", "left"), ("GPUs", "left"),
                          ("pricing", "left"), (f"{cur}/h", "right"), ("time", "right"),
                          (f"cost {cur}", "right"), ("rate", "right"),
                          ("memory/GPU", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in result.ranked:
        table.add_row(str(r.rank), r.offer.key, _gpus(r), r.pricing.label,
                      f"{r.price_per_hour:,.2f}", _hours(r.hours), f"{r.cost:,.2f}", _rate(r),
                      _memory(r))
    return Fit(table, alternatives=[_compact_ranked(result)], optional=("memory/GPU", "rate"))


def _compact_ranked(result: RecommendResult) -> Table:
    """For 80 columns: the offer, its GPUs and pricing in one cell (the key split at its
    region); every figure whole beside it."""
    cur = result.currency
    table = Table(title=f"Recommended offers ({cur})", title_justify="left", show_lines=True)
    for name, justify in (("#", "right"), ("offer", "left"), (f"{cur}/h", "right"),
                          ("time", "right"), (f"cost {cur}", "right"), ("rate", "right"),
                          ("memory/GPU", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in result.ranked:
        name, at, region = r.offer.key.partition("@")
        offer = "\n".join([name, *([f"@{region}"] if at else []), _gpus(r), r.pricing.label])
        table.add_row(str(r.rank), offer, f"{r.price_per_hour:,.2f}", _hours(r.hours),
                      f"{r.cost:,.2f}", _rate(r), _memory(r))
    return table


def reasons_text(result: RecommendResult) -> Text:
    """Why each ranked offer is where it is (below the table: too long for a column)."""
    text = Text()
    for r in result.ranked:
        text.append(f"#{r.rank} {r.offer.key}: ", style="bold")
        text.append("; ".join(r.reasons[1:]) + "\n")
    return text


def excluded_table(result: RecommendResult) -> Fit:
    table = Table(title="Excluded (cheapest first)", title_justify="left")
    table.add_column("offer")
    table.add_column("GPUs")
    table.add_column("why not")
    for e in result.excluded:
        table.add_row(e.offer_key, f"{e.gpu_count} × {e.gpu_model}", f"{e.kind}: {e.reason}")
    return Fit(table)


def recommend_view(result: RecommendResult) -> RenderableType:
    parts: list[RenderableType] = []
    if result.ranked:
        parts.append(ranked_table(result))
        parts.append(reasons_text(result))
    else:
        parts.append(Text("No offer meets the task's constraints.", style="yellow"))
    if result.excluded:
        parts.append(excluded_table(result))
    counts = ", ".join(f"{k} {v}" for k, v in sorted(result.excluded_counts.items()))
    parts.append(Text(f"{result.considered} offers considered, {result.feasible} feasible"
                      + (f"; excluded: {counts}" if counts else "")
                      + f". Prices in {result.currency}.", style="dim"))
    a = result.assumptions
    parts.append(Text(
        f"Assumptions: MFU {a.mfu:.0%}; scaling efficiency {a.intra_node_efficiency_nvlink:.0%}"
        f" within an NVLink node ({a.intra_node_efficiency_pcie:.0%} PCIe), "
        f"×{a.inter_node_efficiency:.0%} across nodes; {a.bandwidth_efficiency:.0%} of "
        f"datasheet memory bandwidth; {a.memory_margin:.0%} of GPU memory kept free; spot: "
        f"{a.spot_interruptions_per_hour:.0%} chance of an interruption per instance-hour "
        f"(MTBI {mtbi_hours_from_rate(a.spot_interruptions_per_hour):.3g} h), checkpoint "
        f"{a.checkpoint_minutes:g} min at Daly's interval, restart {a.restart_minutes:g} min.",
        style="dim"))
    for note in result.notes:
        parts.append(Text(note, style="dim"))
    return Group(*parts)
