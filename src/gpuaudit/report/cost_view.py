"""Rich renderables and JSON documents for the price catalog. Nothing here prints. The
listing of offers and their JSON documents are in `offers_view` (no rich: `catalog list`)."""

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
from gpuaudit.report.offers_view import (  # noqa: F401 - the listing's names, as before
    NA,
    OffersListing,
    Replaced,
    offer_doc,
    offers_doc,
    offers_table,
    per_gpu,
    price,
)
from gpuaudit.report.terminal import severity_text


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


def findings_doc(findings: Sequence[Finding], offers: int) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "offers_checked": offers,
            "errors": sum(f.severity is Severity.FAIL for f in findings),
            "warnings": sum(f.severity is Severity.WARN for f in findings),
            "findings": [f.model_dump(mode="json") for f in findings]}
