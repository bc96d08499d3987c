"""The parsed catalog kept between runs (`gpuaudit.filecache`): reading 10,000 CSV rows into
checked offers takes about a second; reading them back takes a few milliseconds.

The entry is valid for the exact source files (path, mtime, size, content hash), the reading
options and the code that parses them (the mtimes and sizes of this package's modules and of
`model/cost.py`, so a changed parser never serves an old parse). A SkyPilot file's offers are
dated the day they are read (`price_date` = import day), so an entry holding one is valid
that day only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from datetime import date
from pathlib import Path
from typing import Any

from gpuaudit import filecache
from gpuaudit.model import cost as cost_model
from gpuaudit.model.cost import Offer

from .records import (
    Catalog,
    LeftOut,
    Location,
    Locations,
    OfferColumns,
    Problem,
    Superseded,
)

LAYOUT = 2  # of the payload below


def _code_salt() -> str:
    here = Path(__file__).parent
    files = [*sorted(here.glob("*.py")), Path(cost_model.__file__)]
    parts = []
    for f in files:
        try:
            st = os.stat(f)
        except OSError:
            continue
        parts.append(f"{f.name}:{st.st_mtime_ns}:{st.st_size}")
    return ";".join(parts)


def _encode(cat: Catalog) -> dict[str, Any]:
    # Column by column: a column with one value throughout (the currency, the source, the
    # price date, an empty reserved price...) is stored once; equal values share one object,
    # so the pickle stores each distinct date, provider, region... once.
    pool: dict[Any, Any] = {}

    def same(value: Any) -> Any:
        return pool.setdefault(value, value)

    columns: list[Any] = []
    for values in zip(*cat.offers, strict=True) if cat.offers else ():
        first = values[0]
        if all(v == first and type(v) is type(first) for v in values):
            columns.append(("one", first))
        else:
            columns.append(("each", [same(v) for v in values]))
    runs: list[tuple[str, list[int | None]]] = []
    for loc in cat.locations:
        if not runs or runs[-1][0] != loc.file:
            runs.append((loc.file, []))
        runs[-1][1].append(loc.line)
    return {
        "layout": LAYOUT,
        "day": date.today().toordinal() if "skypilot" in cat.formats else None,
        "count": len(cat.offers), "columns": columns, "locations": runs,
        "problems": [tuple(p) for p in cat.problems],
        "files": cat.files, "formats": cat.formats,
        "left_out": [(x.file, x.kind, x.rows, x.zones) for x in cat.left_out],
        "superseded": [(tuple(s.offer), tuple(s.location), s.by, s.why)
                       for s in cat.superseded],
    }


def _decode(d: dict[str, Any]) -> Catalog | None:
    if d.get("layout") != LAYOUT:
        return None
    if d["day"] is not None and d["day"] != date.today().toordinal():
        return None  # SkyPilot rows are dated the day they are read: read them again
    n = d["count"]
    # The offers stay columns until asked for (`OfferColumns`): ranking makes only those shown.
    offers = OfferColumns([[v] * n if kind == "one" else v for kind, v in d["columns"]]
                          ) if n else ()
    make = Offer.from_values
    return Catalog(
        offers=offers, locations=Locations(d["locations"]),
        problems=tuple(map(Problem._make, d["problems"])),
        files=tuple(d["files"]), formats=tuple(d["formats"]),
        left_out=tuple(LeftOut(*x) for x in d["left_out"]),
        superseded=tuple(Superseded(make(o), Location(*loc), by, why)
                         for o, loc, by, why in d["superseded"]))


def cached_catalog(sources: Sequence[Path], build: Callable[[], Catalog], options: str
                   ) -> Catalog:
    """`build()`'s catalog, from the cache when `sources` and `options` are unchanged."""
    return filecache.cached("catalog", [Path(s).absolute() for s in sources], build,
                            encode=_encode, decode=_decode,
                            salt=f"{options}|{_code_salt()}")
