"""A catalog file as a table, and what every format needs to read its cells.

A format (our CSV, SkyPilot's vms.csv, ...) is an adapter, as a gpuhunt provider is: it says
whether a header is its own (`matches`) and turns the table into a `Catalog` (`read`).
`load.read_catalog_file` splits the file into a `Table` and asks each format in turn.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpuaudit.model.cost import Offer

from .records import Catalog


@dataclass(frozen=True)
class ReadOptions:
    """What the caller says about a file: `provider` names the cloud of a SkyPilot file whose
    path does not; `include_local_zones` keeps AWS Local and Wavelength Zone rows (as offers
    of their own location) instead of leaving them out."""

    provider: str | None = None
    include_local_zones: bool = False


@dataclass
class Table:
    """A catalog file split into cells: `rows` yields (line number, cells) after the header."""

    name: str  # the path as given, for messages
    path: Path
    header_line: int
    fields: list[str]
    rows: Iterator[tuple[int, list[str]]]


class CatalogFormat(Protocol):
    """One file format. `name` is for messages; `matches` sees the header's column names."""

    name: str

    def matches(self, fields: set[str]) -> bool: ...

    def read(self, table: Table, options: ReadOptions) -> Catalog: ...


def csv_rows(text: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of each non-empty, non-comment row. Comment lines are blanked, not
    dropped, so csv's line counter still matches the file."""
    lines = ["" if ln.lstrip().startswith("#") else ln for ln in text.splitlines()]
    reader = csv.reader(io.StringIO("\n".join(lines) + "\n"))
    start = 1
    for cells in reader:
        line = start
        start = reader.line_num + 1
        if any(c.strip() for c in cells):
            yield line, cells


class RowError(ValueError):
    """A row that cannot be used; `code` is the `Problem.code` it becomes."""

    def __init__(self, message: str, code: str = "malformed") -> None:
        super().__init__(message)
        self.code = code


def number(row: dict[str, str], key: str, *, integer: bool = False,
           allow_zero: bool = True) -> float | None:
    """A cell as a finite, non-negative number; None when empty; RowError otherwise."""
    raw = (row.get(key) or "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise RowError(f"{key} {raw!r} is not a number") from None
    if not math.isfinite(value):
        raise RowError(f"{key} {raw!r} is not a finite number")
    if value < 0:
        raise RowError(f"{key} {raw} is negative",
                       "bad-price" if "price" in key.lower() else "malformed")
    if not allow_zero and value == 0:
        raise RowError(f"{key} is zero")
    if integer and value != int(value):
        raise RowError(f"{key} {raw} is not a whole number")
    return value


def lenient_float(raw: str | None) -> float | None:
    """A descriptive cell (vCPUs, memory): None when it is not a usable number, never an
    error, because a wrong vCPU count must not cost the row its prices."""
    try:
        value = float(raw) if raw else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value >= 0 else None


def lenient_int(raw: str | None) -> int | None:
    value = lenient_float(raw)
    return None if value is None else int(value)


def price_text(value: float | None) -> str:
    """A price as written in catalogs: up to 6 decimals, no trailing zeros."""
    if value is None:
        return "none"
    return f"{value:.6f}".rstrip("0").rstrip(".")


def make_offer(**fields: Any) -> Offer:
    """An `Offer`, its validation error as a RowError (one line, the field named)."""
    try:
        return Offer(**fields)
    except ValueError as exc:
        raise RowError(str(exc)) from None
