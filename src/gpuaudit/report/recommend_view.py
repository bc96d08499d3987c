"""Terminal view of `gpuaudit recommend`: the ranked offers, the excluded ones, the basis.

Plain text laid out once for the terminal's width (`report.plain`): no rich import on the
command's path. Pure builders (nothing prints). The currency is in every money column's
header and the summary, never implied.
"""

from __future__ import annotations

from gpuaudit.cost.pricing import mtbi_hours_from_rate
from gpuaudit.model.recommendation import Recommendation, RecommendResult
from gpuaudit.report.plain import PlainText, table, wrap


def _hours(h: float) -> str:
    return f"{h:,.1f} h" if h < 48 else f"{h / 24:,.1f} d"


def _gpus(r: Recommendation) -> str:
    return (f"{r.nodes} × {r.offer.gpu_count} × {r.offer.gpu_model}" if r.nodes > 1
            else f"{r.offer.gpu_count} × {r.offer.gpu_model}")


def _memory(r: Recommendation) -> str:
    mem = f"{r.memory_per_gpu_bytes / 1e9:.3g} GB" if r.memory_per_gpu_bytes else "n/a"
    return mem + (f" ({r.sharding})" if r.sharding and r.sharding != "none" else "")


def _rate(r: Recommendation) -> str:
    return f"{r.rate:,.4g} {r.rate_unit}" + ("" if r.measured else " est.")


def _feed(r: Recommendation) -> str:
    f = r.feed
    if f is None or f.verdict == "unknown":
        return "?"
    if f.verdict == "short":
        return f"SHORT: waits {f.gpu_wait_share:.0%}" if f.gpu_wait_share else "SHORT: memory"
    return "ok"


def ranked_lines(result: RecommendResult, width: int) -> list[str]:
    cur = result.currency
    headers: tuple[str, ...] = ("#", "offer", "GPUs", "pricing", f"{cur}/h", "time",
                                f"cost {cur}", "rate", "memory/GPU")
    rows: list[tuple[str, ...]] = [
        (str(r.rank), r.offer.key, _gpus(r), r.pricing.label, f"{r.price_per_hour:,.2f}",
         _hours(r.hours), f"{r.cost:,.2f}", _rate(r), _memory(r)) for r in result.ranked]
    aligns = "<<<<>>>>>"
    if result.feed is not None:  # the host's feed: marked where it cannot keep up
        headers += ("feed",)
        rows = [(*row, _feed(r)) for row, r in zip(rows, result.ranked, strict=True)]
        aligns += "<"
    lines, dropped = table(headers, rows, aligns, width, optional=(7, 8), key=1)
    out = [f"Recommended offers ({cur})", *lines]
    if dropped:
        out += wrap(f"left out at this width: {', '.join(dropped)} (a wider terminal or "
                    "--json shows them)", width)
    return out


def reasons_lines(result: RecommendResult, width: int) -> list[str]:
    """Why each ranked offer is where it is (below the table: too long for a column)."""
    out = []
    for r in result.ranked:
        out += wrap(f"#{r.rank} {r.offer.key}: " + "; ".join(r.reasons[1:]), width, "    ")
    return out


def excluded_lines(result: RecommendResult, width: int) -> list[str]:
    out = ["Excluded (cheapest first)"]
    for e in result.excluded:
        out += wrap(f"{e.offer_key} ({e.gpu_count} × {e.gpu_model}): {e.kind}: {e.reason}",
                    width, "    ")
    return out


def summary_lines(result: RecommendResult, width: int) -> list[str]:
    counts = ", ".join(f"{k} {v}" for k, v in sorted(result.excluded_counts.items()))
    a = result.assumptions
    out = wrap(f"{result.considered} offers considered, {result.feasible} feasible"
               + (f"; excluded: {counts}" if counts else "")
               + f". Prices in {result.currency}.", width)
    out += wrap(
        f"Assumptions: MFU {a.mfu:.0%}; scaling efficiency {a.intra_node_efficiency_nvlink:.0%}"
        f" within an NVLink node ({a.intra_node_efficiency_pcie:.0%} PCIe); across nodes "
        f"computed per offer ({a.inter_node_efficiency:.0%} where no model of the step sizes "
        f"it); {a.bandwidth_efficiency:.0%} of "
        f"datasheet memory bandwidth; {a.memory_margin:.0%} of GPU memory kept free; spot: "
        f"{a.spot_interruptions_per_hour:.0%} chance of an interruption per instance-hour "
        f"(MTBI {mtbi_hours_from_rate(a.spot_interruptions_per_hour):.3g} h), checkpoint "
        f"{a.checkpoint_minutes:g} min at Daly's interval, restart {a.restart_minutes:g} min.",
        width)
    for note in result.notes:
        out += wrap(note, width)
    return out


def recommend_text(result: RecommendResult, width: int) -> str:
    lines: list[str] = []
    if result.ranked:
        lines += [*ranked_lines(result, width), "", *reasons_lines(result, width)]
    else:
        lines.append("No offer meets the task's constraints.")
    if result.excluded:
        lines += ["", *excluded_lines(result, width)]
    lines += ["", *summary_lines(result, width)]
    return "\n".join(lines)


def recommend_view(result: RecommendResult) -> PlainText:
    return PlainText(lambda width: recommend_text(result, width))
