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

from .records import Catalog, LeftOut, Location, Problem, Superseded

LAYOUT = 1  # of the payload below


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
    # Equal values share one object, so the pickle stores each distinct date, provider,
    # region, source... once (10,000 offers have a few hundred distinct cells).
    pool: dict[Any, Any] = {}

    def same(value: Any) -> Any:
        return pool.setdefault(value, value)

    def offer(o: Offer) -> tuple[Any, ...]:
        return tuple(same(v) for v in o)

    return {
        "layout": LAYOUT,
        "day": date.today().toordinal() if "skypilot" in cat.formats else None,
        "offers": [offer(o) for o in cat.offers],
        "locations": [(same(loc.file), loc.line) for loc in cat.locations],
        "problems": [tuple(p) for p in cat.problems],
        "files": cat.files, "formats": cat.formats,
        "left_out": [(x.file, x.kind, x.rows, x.zones) for x in cat.left_out],
        "superseded": [(offer(s.offer), (s.location.file, s.location.line), s.by, s.why)
                       for s in cat.superseded],
    }


def _decode(d: dict[str, Any]) -> Catalog | None:
    if d.get("layout") != LAYOUT:
        return None
    if d["day"] is not None and d["day"] != date.today().toordinal():
        return None  # SkyPilot rows are dated the day they are read: read them again
    make = Offer.from_values
    return Catalog(
        offers=tuple(map(make, d["offers"])),
        locations=tuple(map(Location._make, d["locations"])),
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
