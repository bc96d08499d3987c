"""The catalog's records: a loaded `Catalog`, the `Problem`s met reading it, the rows `LeftOut`
on purpose, and where each offer came from."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

from gpuaudit import parse
from gpuaudit.errors import BadInputError
from gpuaudit.model.cost import FIELDS, Offer
from gpuaudit.model.lite import Lite, frozen

# The four prices an offer may have, as `Offer` fields.
PRICE_FIELDS = ("on_demand_price_per_hour", "spot_price_per_hour",
                "reserved_1y_price_per_hour", "reserved_3y_price_per_hour")

# ISO 4217 codes a GPU price list is plausibly quoted in: the same set the command line takes
# (gpuaudit.parse); outside it, a code is far more often a typo ("UDS") or a symbol ("$").
ISO_CURRENCIES: frozenset[str] = parse.ISO_CURRENCIES

# Values catalogs use when a price is unknown: SkyPilot writes 0.0 (GCP a4 hosts) and 700.0
# (unavailable TPU regions), a Mithril fetcher produced 0.01, hand-made sheets use 9999.
PLACEHOLDER_PRICES: frozenset[float] = frozenset({0.0, 0.01, 700.0, 999.0, 9999.0, 99999.0})


class Problem(NamedTuple):
    """A row (or file) that could not be used as written. `line` is 1-based; None = file.
    (A tuple: a file of 27,000 bad rows makes 27,000 of them, read back from the cache.)"""

    file: str
    line: int | None
    message: str
    # malformed | bad-price | zero-price | no-price | duplicate | composition | unreadable
    code: str = "malformed"

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.message}"


PROBLEM_LABELS = {"malformed": "malformed", "bad-price": "negative price",
                  "zero-price": "zero price (a placeholder)", "no-price": "no price",
                  "duplicate": "repeated", "composition": "parts that do not add up",
                  "unreadable": "unreadable"}


def problem_summary(problems: tuple[Problem, ...] | list[Problem], examples: int = 3
                    ) -> list[str]:
    """One line per file for the rows that did not load: how many, of which kinds, and the
    first few, so that a file with 27,000 bad rows says so in one line, not 27,000
    (`catalog validate` lists every one)."""
    by_file: dict[str, list[Problem]] = {}
    for prob in problems:
        by_file.setdefault(prob.file, []).append(prob)
    out = []
    for file, probs in by_file.items():
        counts: dict[str, int] = {}
        for prob in probs:
            counts[prob.code] = counts.get(prob.code, 0) + 1
        kinds = ", ".join(f"{n:,} {PROBLEM_LABELS.get(code, code)}"
                          for code, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        first = "; ".join((f"line {p.line}: " if p.line else "") + p.message
                          for p in probs[:examples])
        more = " …" if len(probs) > examples else ""
        out.append(f"{file}: skipped {len(probs):,} row{'s' * (len(probs) != 1)} ({kinds});"
                   f" first: {first}{more} (`gpuaudit catalog validate FILE` lists all)")
    return out


@frozen
class Superseded(Lite):
    """A row that lost to another source's row for the same offer: the newer price date
    wins (the later source on a tie), and `catalog show` says which."""

    offer: Offer
    location: Location
    by: str  # the key of the offer that replaced it
    why: str


@frozen
class LeftOut(Lite):
    """Rows that were read and are fine, but left out on purpose (not a problem): e.g. prices
    of AWS Local Zones, which are not the region's prices."""

    file: str
    kind: str  # "local-zone" | "wavelength-zone" | "zero-spot" (a SpotPrice 0 read as none)
    rows: int
    zones: tuple[str, ...]

    def message(self, keep: str = "include_local_zones=True") -> str:
        """One line; `keep` names what keeps the rows (the CLI says --local-zones)."""
        if self.kind == "zero-spot":
            return (f"{self.file}: {self.rows} row{'s' * (self.rows != 1)} give SpotPrice 0, "
                    "a placeholder: read as no spot price (their on-demand prices are kept)")
        what = {"local-zone": "AWS Local Zones",
                "wavelength-zone": "AWS Wavelength Zones"}.get(self.kind, self.kind)
        shown = ", ".join(self.zones[:4]) + (", ..." if len(self.zones) > 4 else "")
        return (f"{self.file}: left out {self.rows} row{'s' * (self.rows != 1)} priced in "
                f"{what} ({shown}); {keep} keeps them as their own locations")

    def __str__(self) -> str:
        return self.message()


class Location(NamedTuple):
    """Where an offer was read (a tuple: one per offer, 10,000 read back from the cache)."""

    file: str
    line: int | None


_make_offer = partial(tuple.__new__, Offer)  # a row of Offer's fields → an Offer (no checks)


class OfferColumns(Sequence[Offer]):
    """Offers kept field by field, as the parsed-catalog cache stores them, each made into an
    `Offer` only when asked for: ranking 10,000 offers reads their fields (`rows`) and makes
    the few it shows (making all of them costs a fast command several milliseconds). Iterating
    makes them all, once."""

    def __init__(self, columns: Sequence[list[Any]]) -> None:
        # one list per Offer field, in Offer's order, all of the same length
        self._columns = columns
        self._made: tuple[Offer, ...] | None = None

    def rows(self) -> Iterator[tuple[Any, ...]]:
        """Every offer's fields in Offer's order, as plain tuples: no record made."""
        return zip(*self._columns, strict=True)

    def fields(self, names: Sequence[str]) -> Iterator[tuple[Any, ...]]:
        """Every offer's fields `names` (Offer's field names), in that order, as plain
        tuples: only the columns asked for are read."""
        return zip(*(self._columns[FIELDS.index(name)] for name in names), strict=True)

    def _all(self) -> tuple[Offer, ...]:
        if self._made is None:
            self._made = tuple(map(_make_offer, self.rows()))
        return self._made

    def __len__(self) -> int:
        return len(self._columns[0]) if self._columns else 0

    def __getitem__(self, i):  # type: ignore[no-untyped-def, override]
        if self._made is not None or isinstance(i, slice):
            return self._all()[i]
        return _make_offer([column[i] for column in self._columns])

    def __iter__(self) -> Iterator[Offer]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OfferColumns({len(self)} offers)"


class Locations(Sequence[Location]):
    """Where each offer was read, kept as runs of (file, lines) and made into `Location`s
    when first asked: a command that only ranks the offers never asks."""

    def __init__(self, runs: Sequence[tuple[str, Sequence[int | None]]]) -> None:
        self._runs = runs
        self._made: tuple[Location, ...] | None = None

    def _all(self) -> tuple[Location, ...]:
        if self._made is None:
            self._made = tuple(Location(f, line) for f, lines in self._runs for line in lines)
        return self._made

    def __len__(self) -> int:
        return sum(len(lines) for _, lines in self._runs)

    def __getitem__(self, i):  # type: ignore[no-untyped-def, override]
        return self._all()[i]

    def __iter__(self) -> Iterator[Location]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Locations({len(self)} offers)"


@dataclass(frozen=True)
class Catalog:
    """Offers with where each came from, the problems met while reading them, and the rows
    left out on purpose."""

    offers: Sequence[Offer] = ()  # a tuple, or `OfferColumns` read back from the cache
    problems: tuple[Problem, ...] = ()
    locations: Sequence[Location] = ()  # parallel to `offers` (a tuple or `Locations`)
    files: tuple[str, ...] = ()  # what was read, in order (later files override earlier)
    left_out: tuple[LeftOut, ...] = ()
    superseded: tuple[Superseded, ...] = ()
    # the format each file was read in ("gpuaudit", "skypilot"), parallel to `files`
    formats: tuple[str, ...] = ()
    _index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.offers)

    def _where(self, key: str) -> int | None:
        # Built on first use: a command that only ranks the offers never pays for it.
        if not self._index and self.offers:
            for i, offer in enumerate(self.offers):
                self._index.setdefault(offer.key, i)
        return self._index.get(key)

    def get(self, key: str) -> Offer | None:
        i = self._where(key)
        return None if i is None else self.offers[i]

    def location(self, offer: Offer) -> Location | None:
        i = self._where(offer.key)
        return self.locations[i] if i is not None and i < len(self.locations) else None

    def superseded_by(self, key: str) -> list[Superseded]:
        """The rows of other sources that this offer replaced."""
        return [s for s in self.superseded if s.by == key]

    def find(self, provider: str, instance_type: str, region: str | None = None
             ) -> list[Offer]:
        """Offers of one instance type; all its regions when `region` is None."""
        p, it = provider.casefold(), instance_type.casefold()
        return [o for o in self.offers
                if o.provider.casefold() == p and o.instance_type.casefold() == it
                and (region is None or (o.region or "").casefold() == region.casefold())]

    def select(self, *, gpu: str | None = None, provider: str | None = None,
               max_price_per_hour: float | None = None) -> list[Offer]:
        """Offers matching every filter given; `max_price_per_hour` is the instance's
        on-demand price (offers without one are left out when it is set)."""
        out = []
        for o in self.offers:
            if gpu is not None and o.gpu_model.casefold() != gpu.casefold():
                continue
            if provider is not None and o.provider.casefold() != provider.casefold():
                continue
            if max_price_per_hour is not None and (
                    o.on_demand_price_per_hour is None
                    or o.on_demand_price_per_hour > max_price_per_hour):
                continue
            out.append(o)
        return out


def parse_key(text: str) -> tuple[str, str, str | None]:
    """PROVIDER/INSTANCE[@REGION] → its parts (BadInputError when it has no '/')."""
    head, _, region = text.partition("@")
    provider, sep, instance = head.partition("/")
    if not sep or not provider or not instance:
        raise BadInputError(f"{text!r}: expected PROVIDER/INSTANCE[@REGION], e.g. "
                            "aws/p5.48xlarge@us-east-1")
    return provider.strip(), instance.strip(), region.strip() or None
