"""Rich renderables and JSON documents for the price catalog. Nothing here prints."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gpuaudit.model.base import SCHEMA_VERSION
from gpuaudit.model.cost import Offer
from gpuaudit.model.finding import Finding, Severity
from gpuaudit.report.layout import Fit
from gpuaudit.report.terminal import severity_text

NA = "—"


def price(value: float | None) -> str:
    """A price as catalogs write it: up to 4 decimals (cents and their fractions matter at
    per-GPU-hour scale), '—' when unpublished."""
    if value is None:
        return NA
    text = f"{value:.4f}"
    while text.endswith("0") and len(text.partition(".")[2]) > 2:
        text = text[:-1]
    return text


def per_gpu(offer: Offer, value: float | None) -> str:
    return price(offer.per_gpu(value))


def offers_table(offers: Sequence[Offer], *, title: str | None = None) -> Fit:
    """Every offer with its prices; narrower terminals lose the spot per GPU-hour, billing and
    date columns first (said below the table), never a price's digits."""
    t = Table(title=title, show_lines=False, header_style="bold")
    for name, justify in (("offer", "left"), ("GPU", "left"), ("n", "right"),
                          ("on-demand/h", "right"), ("per GPU-h", "right"),
                          ("spot/h", "right"), ("spot per GPU-h", "right"),
                          ("currency", "left"), ("billing", "left"), ("date", "left")):
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    for o in offers:
        t.add_row(escape(o.key), escape(o.gpu_model), str(o.gpu_count),
                  price(o.on_demand_price_per_hour), per_gpu(o, o.on_demand_price_per_hour),
                  price(o.spot_price_per_hour), per_gpu(o, o.spot_price_per_hour), o.currency,
                  o.billing.value if o.billing else "unknown", o.price_date.isoformat())
    return Fit(t, alternatives=[_compact_offers(offers, title)], optional=("spot",))


def _compact_offers(offers: Sequence[Offer], title: str | None) -> Table:
    """For 80 columns: the offer's key split at its region, its GPUs under it, and the prices
    (all of them, whole) beside; billing and date are left to `catalog show` and --json."""
    t = Table(title=title, header_style="bold", show_edge=False, show_lines=True,
              caption="billing and price date: `gpuaudit catalog show OFFER` or --json",
              caption_justify="left")
    t.add_column("offer")
    for name in ("on-demand", "per GPU", "spot"):
        t.add_column(name, justify="right")
    t.add_column("cur")
    for o in offers:
        name, at, region = o.key.partition("@")
        cell = escape(name) + (f"\n@{escape(region)}" if at else "") \
            + f"\n[dim]{o.gpu_count} × {escape(o.gpu_model)}[/]"
        t.add_row(cell, price(o.on_demand_price_per_hour), per_gpu(o, o.on_demand_price_per_hour),
                  price(o.spot_price_per_hour), o.currency)
    return t


Replaced = Sequence[tuple[Offer, str | None, str]]  # (the other source's row, where, why)


def offer_view(o: Offer, location: str | None = None, replaced: Replaced = ()) -> Table:
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    cur = o.currency
    t.add_row("offer", escape(o.key))
    t.add_row("GPU", f"{o.gpu_count} × {escape(o.gpu_model)}"
              + (f" ({o.gpu_memory_gib:g} GiB each)" if o.gpu_memory_gib else ""))
    host = ", ".join(x for x in (f"{o.vcpus} vCPUs" if o.vcpus else "",
                                 f"{o.ram_gib:g} GiB RAM" if o.ram_gib else "") if x)
    t.add_row("host", host or NA)
    for label, value in (("on-demand", o.on_demand_price_per_hour),
                         ("spot", o.spot_price_per_hour),
                         ("reserved 1 year", o.reserved_1y_price_per_hour),
                         ("reserved 3 years", o.reserved_3y_price_per_hour)):
        text = (f"{price(value)} {cur}/h ({per_gpu(o, value)} {cur} per GPU-hour)"
                if value is not None else f"{NA} (not published)")
        t.add_row(label, text)
    minimum = f", first {o.billing_minimum_s:g} s billed in full" if o.billing_minimum_s else ""
    t.add_row("billing", f"per {o.billing.value}{minimum}" if o.billing
              else "not listed (per second assumed in costs)")
    t.add_row("source", escape(o.source))
    t.add_row("price date", o.price_date.isoformat())
    if o.notes:
        t.add_row("notes", escape(o.notes))
    if location:
        t.add_row("from", escape(location))
    for other, where, why in replaced:
        t.add_row("replaces", escape(
            f"{other.key} from {other.source} (price date {other.price_date}"
            + (f", {where}" if where else "") + f"): {why}; its on-demand was "
            + f"{price(other.on_demand_price_per_hour)} {other.currency}/h"))
    return t


def findings_table(findings: Sequence[Finding]) -> Fit:
    t = Table(header_style="bold")
    t.add_column("severity")
    t.add_column("rule")
    t.add_column("where")
    t.add_column("finding")
    for f in findings:
        ev = f.evidence
        where = (f"{ev.get('file')}:{ev.get('line')}" if ev.get("line") is not None
                 else str(ev.get("file") or ""))
        t.add_row(severity_text(f.severity), f.code.removeprefix("catalog."), escape(where),
                  escape(f.message))
    return Fit(t)


def findings_summary(findings: Sequence[Finding], offers: int) -> Text:
    errors = sum(f.severity is Severity.FAIL for f in findings)
    warnings = sum(f.severity is Severity.WARN for f in findings)
    style = "bold red" if errors else ("yellow" if warnings else "green")
    return Text(f"{offers} offers checked: {errors} errors, {warnings} warnings", style=style)


def offer_doc(o: Offer, location: str | None = None, replaced: Replaced = ()
              ) -> dict[str, Any]:
    doc = o.model_dump(mode="json")
    doc["key"] = o.key
    doc["on_demand_price_per_gpu_hour"] = o.per_gpu(o.on_demand_price_per_hour)
    doc["spot_price_per_gpu_hour"] = o.per_gpu(o.spot_price_per_hour)
    if location is not None:
        doc["from"] = location
    if replaced:
        doc["replaces"] = [{"key": other.key, "source": other.source,
                            "price_date": other.price_date.isoformat(), "from": where,
                            "why": why} for other, where, why in replaced]
    return doc


def offers_doc(offers: Sequence[Offer]) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "offers": [offer_doc(o) for o in offers]}


def findings_doc(findings: Sequence[Finding], offers: int) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "offers_checked": offers,
            "errors": sum(f.severity is Severity.FAIL for f in findings),
            "warnings": sum(f.severity is Severity.WARN for f in findings),
            "findings": [f.model_dump(mode="json") for f in findings]}
