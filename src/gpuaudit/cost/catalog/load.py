"""Loading: the shipped catalog, the user's imported rows, or one file in any known format.

Loading never stops at a bad row: the row is reported with its file and line (a `Problem`) and
the rest loads, because one typo in a 10,000-row file must not hide the other 9,999 offers.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuaudit.errors import BadInputError
from gpuaudit.model.cost import Offer
from gpuaudit.reading import read_text

from .records import Catalog, Location, Superseded

if TYPE_CHECKING:
    from .table import CatalogFormat, ReadOptions

USER_CATALOG_ENV = "GPUAUDIT_USER_CATALOG"


@functools.cache
def formats() -> tuple[CatalogFormat, ...]:
    """The formats a file may be in, asked in order: the first whose columns match reads it.
    (Imported when a file is read, not when the parsed catalog comes from the cache.)"""
    from .ours import OursFormat
    from .skypilot import SkyPilotFormat

    return (SkyPilotFormat(), OursFormat())


def __getattr__(name: str) -> Any:
    if name == "FORMATS":
        return formats()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# csv, importlib.resources and platformdirs are imported where they are needed: a command
# given a catalog file, read back from the cache, needs none of them.


def shipped_catalog_path() -> Path:
    from importlib import resources

    return Path(str(resources.files("gpuaudit") / "data" / "catalog.csv"))


def user_catalog_path() -> Path:
    """GPUAUDIT_USER_CATALOG when set, else catalog.csv in the user data directory (the
    directory the store uses for its SQLite file)."""
    env = os.environ.get(USER_CATALOG_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("gpuaudit")) / "catalog.csv"


def load_catalog(path: str | os.PathLike[str] | None = None, *, include_user: bool = True,
                 provider: str | None = None, include_local_zones: bool = False) -> Catalog:
    """The shipped catalog plus the user's imported rows (`merge`: the newer price date wins
    for the same offer) when `path` is None; else just that file, in our
    format or SkyPilot's. `provider` names the cloud of a SkyPilot file whose path does not;
    `include_local_zones` keeps a SkyPilot AWS file's Local/Wavelength Zone rows.

    An unreadable file raises BadInputError; bad rows become `Catalog.problems`.

    The parsed result is kept in the user cache directory (`cache.cached_catalog`) and read
    back while the files, the options and the parsing code are unchanged."""
    from .cache import cached_catalog

    if path is not None:
        options = f"file|{provider}|{include_local_zones}"
        return cached_catalog([Path(path)], lambda: merge([read_catalog_file(
            path, provider=provider, include_local_zones=include_local_zones)]), options)
    shipped = shipped_catalog_path()
    user = user_catalog_path() if include_user else None

    def build() -> Catalog:
        parts = [read_catalog_file(shipped)]
        if user is not None and user.is_file():
            parts.append(read_catalog_file(user))
        return merge(parts)

    # The user catalog counts even while it does not exist: importing one invalidates.
    return cached_catalog([shipped, *([user] if user is not None else [])], build,
                          f"default|{include_user}")


def merge(parts: Sequence[Catalog]) -> Catalog:
    """One catalog from several. Two sources pricing the same offer: the newer price date
    wins, the later source on a tie (the user's imported rows over the shipped ones); the
    loser is kept in `superseded`, never dropped silently. A provider's region-less row
    ("the same price everywhere") and its per-region rows of the same instance type are the
    same offer too: the newer side wins."""
    by_key: dict[str, tuple[Offer, Location]] = {}
    lost: list[Superseded] = []
    for part in parts:
        incoming = list(zip(part.offers, part.locations, strict=True))
        for offer, loc in incoming:
            old = by_key.get(offer.key)
            if old is not None:
                winner, loser = ((offer, loc), old) if offer.price_date >= old[0].price_date \
                    else (old, (offer, loc))
                by_key[offer.key] = winner
                lost.append(Superseded(loser[0], loser[1], winner[0].key,
                                       _why(winner[0], loser[0])))
            else:
                by_key[offer.key] = (offer, loc)
        _region_rule(by_key, {(o.provider, o.instance_type) for o, _ in incoming}, lost)
    return Catalog(offers=tuple(o for o, _ in by_key.values()),
                   locations=tuple(loc for _, loc in by_key.values()),
                   problems=tuple(p for part in parts for p in part.problems),
                   files=tuple(f for part in parts for f in part.files),
                   left_out=tuple(x for part in parts for x in part.left_out),
                   superseded=tuple(lost),
                   formats=tuple(f for part in parts for f in part.formats))


def _region_rule(by_key: dict[str, tuple[Offer, Location]], touched: set[tuple[str, str]],
                 lost: list[Superseded]) -> None:
    """Region-less and per-region rows of one instance type: keep the newer side."""
    groups: dict[tuple[str, str], list[str]] = {}
    for key, (o, _) in by_key.items():
        if (o.provider, o.instance_type) in touched:
            groups.setdefault((o.provider, o.instance_type), []).append(key)
    for keys in groups.values():
        anywhere = [k for k in keys if by_key[k][0].region is None]
        regional = [k for k in keys if by_key[k][0].region is not None]
        if not anywhere or not regional:
            continue
        newest_regional = max(by_key[k][0].price_date for k in regional)
        if newest_regional >= by_key[anywhere[0]][0].price_date:
            drop, keep = anywhere, regional
        else:
            drop, keep = regional, anywhere
        for k in drop:
            offer, loc = by_key.pop(k)
            winner = by_key[keep[0]][0]
            lost.append(Superseded(offer, loc, winner.key, _why(winner, offer) + (
                f" (its {len(keep)} per-region rows)" if len(keep) > 1 else "")))


def _why(winner: Offer, loser: Offer) -> str:
    if winner.price_date > loser.price_date:
        return f"newer prices ({winner.price_date} over {loser.price_date})"
    return f"the same price date ({winner.price_date}): the later source wins"


def read_catalog_file(path: str | os.PathLike[str], *, provider: str | None = None,
                      include_local_zones: bool = False) -> Catalog:
    """One catalog file, its format told from the header."""
    p = Path(path)
    name = str(p)
    text = read_text(p, "catalog")  # a regular UTF-8 file, bounded: else one line
    import csv

    from .table import ReadOptions

    options = ReadOptions(provider=provider, include_local_zones=include_local_zones)
    try:
        return _read_text(name, p, text, options)
    except csv.Error as exc:  # a field over csv's size limit, a stray quote at the end
        raise BadInputError(f"catalog {name}: not a readable CSV file: {exc}") from None


def _read_text(name: str, p: Path, text: str, options: ReadOptions) -> Catalog:
    from .table import Table, csv_rows

    rows = csv_rows(text)
    header_line, header = next(rows, (0, []))
    if not header:
        raise BadInputError(f"catalog {name}: empty (no header row)")
    fields = [h.strip() for h in header]
    twice = sorted({f for f in fields if f and fields.count(f) > 1})
    if twice:  # read as a dict, the last of them would win silently
        raise BadInputError(f"catalog {name}:{header_line}: column(s) {', '.join(twice)} "
                            "given twice in the header")
    for fmt in formats():
        if fmt.matches(set(fields)):
            return fmt.read(Table(name, p, header_line, fields, rows), options)
    raise BadInputError(
        f"catalog {name}:{header_line}: unknown format: the header has neither our columns "
        "(provider, instance_type, ...) nor SkyPilot's (InstanceType, AcceleratorName, Price)")
