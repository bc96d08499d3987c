"""Our catalog format (docs/cost-catalog.md): the `Offer` fields as columns, plus optional
GCP-style parts (host price + per-GPU price) that the reader sums into the instance price.
Read and written here."""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterable
from datetime import date
from pathlib import Path
from typing import Any

from gpuaudit.errors import BadInputError
from gpuaudit.model.cost import Billing, Offer

from .records import PRICE_FIELDS, Catalog, Location, Problem
from .table import ReadOptions, RowError, Table, make_offer, number, price_text

# Our format, in the order `write_catalog` writes it. The four *_part columns are optional.
COLUMNS: tuple[str, ...] = (
    "provider", "instance_type", "region", "gpu_model", "gpu_count", "gpu_memory_gib", "vcpus",
    "ram_gib", "currency", "on_demand_price_per_hour", "spot_price_per_hour",
    "reserved_1y_price_per_hour", "reserved_3y_price_per_hour",
    "host_on_demand_price_per_hour", "host_spot_price_per_hour",
    "gpu_on_demand_price_per_hour", "gpu_spot_price_per_hour",
    "billing", "billing_minimum_s", "source", "price_date", "notes",
)
REQUIRED = ("provider", "instance_type", "gpu_model", "gpu_count", "source", "price_date")
PART_FIELDS = ("host_on_demand_price_per_hour", "host_spot_price_per_hour",
               "gpu_on_demand_price_per_hour", "gpu_spot_price_per_hour")

# Relative tolerance for "the stated total equals host + N × GPU": prices carry 5-6 decimals.
COMPOSE_TOLERANCE = 1e-4

# Words a billing cell may use for "not known" (None). An empty cell keeps its old meaning,
# per second, so that catalogs written before `billing` could be unknown load as they did.
BILLING_UNKNOWN = frozenset({"unknown", "none", "?"})


def compose_price(host: float | None, gpu_each: float | None, gpu_count: int) -> float | None:
    """An instance priced in parts (GCP): host machine + N × per-GPU price; None when a part is
    missing, because half a price is worse than none."""
    if host is None or gpu_each is None:
        return None
    return round(host + gpu_count * gpu_each, 6)


class OursFormat:
    name = "gpuaudit"

    def matches(self, fields: set[str]) -> bool:
        return {"provider", "instance_type"} <= fields

    def read(self, table: Table, options: ReadOptions) -> Catalog:
        name, fields = table.name, table.fields
        missing = [c for c in REQUIRED if c not in fields]
        if missing:
            raise BadInputError(f"catalog {name}:{table.header_line}: header lacks column(s) "
                                + ", ".join(missing))
        offers: list[Offer] = []
        locations: list[Location] = []
        problems: list[Problem] = []
        seen: dict[str, int] = {}
        for line, cells in table.rows:
            if len(cells) > len(fields):
                problems.append(Problem(name, line, f"{len(cells)} cells but the header has "
                                        f"{len(fields)} columns (an unquoted comma?)"))
                continue
            row = dict(zip(fields, (c.strip() for c in cells), strict=False))
            try:
                offer = offer_from_row(row)
            except RowError as exc:
                problems.append(Problem(name, line, str(exc), exc.code))
                continue
            if offer.key in seen:
                problems.append(Problem(name, line, f"{offer.key} repeats line "
                                        f"{seen[offer.key]}; this row is ignored", "duplicate"))
                continue
            seen[offer.key] = line
            offers.append(offer)
            locations.append(Location(name, line))
        return Catalog(offers=tuple(offers), problems=tuple(problems),
                       locations=tuple(locations), files=(name,), formats=(self.name,))


def offer_from_row(row: dict[str, str]) -> Offer:
    for key in REQUIRED:
        if not row.get(key):
            raise RowError(f"{key} is empty")
    count_f = number(row, "gpu_count", integer=True, allow_zero=False)
    assert count_f is not None  # required above
    count = int(count_f)
    prices = {k: number(row, k) for k in PRICE_FIELDS}
    parts = {k: number(row, k) for k in PART_FIELDS}
    for key, value in (*prices.items(), *parts.items()):
        if value == 0:
            # A placeholder for "unknown", which every cost computed from it would read as
            # free: the row is a data error, never a cheaper rank.
            raise RowError(f"{key} is zero (a placeholder, not a price; leave it empty when "
                           "unknown)", "zero-price")
    if all(v is None for v in (*prices.values(), *parts.values())):
        raise RowError("no price at all (on-demand, spot, reserved or parts)", "no-price")
    notes = row.get("notes") or None
    composed = []
    for total_key, host_key, gpu_key, label in (
            ("on_demand_price_per_hour", "host_on_demand_price_per_hour",
             "gpu_on_demand_price_per_hour", "on-demand"),
            ("spot_price_per_hour", "host_spot_price_per_hour", "gpu_spot_price_per_hour",
             "spot")):
        host, each = parts[host_key], parts[gpu_key]
        total = compose_price(host, each, count)
        if total is None:
            if (host is None) != (each is None) and prices[total_key] is None:
                # One part alone cannot price the instance; say so rather than guess.
                composed.append(f"{label}: only the {'host' if each is None else 'GPU'} part"
                                " is known, no total")
            continue
        stated = prices[total_key]
        if stated is not None and not math.isclose(stated, total, rel_tol=COMPOSE_TOLERANCE,
                                                   abs_tol=1e-6):
            raise RowError(f"{total_key} {price_text(stated)} is not host {price_text(host)} "
                           f"+ {count} × GPU {price_text(each)} = {price_text(total)}",
                           "composition")
        prices[total_key] = total
        composed.append(f"{label} = host {price_text(host)} + {count} × GPU "
                        f"{price_text(each)} = {price_text(total)}")
    # Idempotent: a file written by `write_catalog` already carries the arithmetic in its
    # notes, and reading it back must not repeat it.
    composed = [c for c in composed if not (notes and c in notes)]
    if composed:
        notes = "; ".join(filter(None, [notes, "composed: " + "; ".join(composed)]))
    billing = parse_billing(row.get("billing"))
    try:
        price_date = date.fromisoformat(row["price_date"])
    except ValueError:
        raise RowError(f"price_date {row['price_date']!r} is not a date (YYYY-MM-DD)"
                       ) from None
    vcpus = number(row, "vcpus", integer=True)
    return make_offer(
        provider=row["provider"].lower(), instance_type=row["instance_type"],
        region=row.get("region") or None, gpu_model=row["gpu_model"], gpu_count=count,
        gpu_memory_gib=number(row, "gpu_memory_gib"),
        vcpus=None if vcpus is None else int(vcpus), ram_gib=number(row, "ram_gib"),
        currency=(row.get("currency") or "USD").upper(), billing=billing,
        billing_minimum_s=number(row, "billing_minimum_s") or 0.0,
        host_price_per_hour=parts["host_on_demand_price_per_hour"],
        gpu_price_per_hour=parts["gpu_on_demand_price_per_hour"],
        source=row["source"], price_date=price_date, notes=notes, **prices)


def parse_billing(raw: str | None) -> Billing | None:
    text = (raw or "second").strip().lower() or "second"
    if text in BILLING_UNKNOWN:
        return None
    try:
        return Billing(text)
    except ValueError:
        raise RowError(f"billing {text!r} is not second, minute, hour or unknown") from None


# -- writing -------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return price_text(value)
    return str(value.value if hasattr(value, "value") else value)


# Offer fields written under another column name by `write_catalog`.
_WRITTEN_AS = {"host_on_demand_price_per_hour": "host_price_per_hour",
               "gpu_on_demand_price_per_hour": "gpu_price_per_hour"}


def write_catalog(offers: Iterable[Offer], path: str | os.PathLike[str]) -> None:
    """Offers in our format: totals, the on-demand host/GPU parts of composed offers (their
    arithmetic is also in notes), an unknown billing as `unknown`. Written to a temporary file
    first so a crash never leaves half a file."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        fh.write("# gpuaudit user price catalog (written by `gpuaudit catalog import`). "
                 "Format: docs/cost-catalog.md\n")
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(COLUMNS)
        for o in offers:
            data = o.model_dump()
            data.update({col: data[field] for col, field in _WRITTEN_AS.items()})
            if data["billing"] is None:
                data["billing"] = "unknown"
            w.writerow([_cell(data.get(c)) if c in data else "" for c in COLUMNS])
    tmp.replace(p)
