"""The listing of offers (`catalog list`) and their JSON documents: plain text laid out once,
no rich, no pydantic, so that listing 2,000 offers costs little more than reading them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuaudit.model.cost import Offer
from gpuaudit.model.version import SCHEMA_VERSION

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


# The listing's columns: (header, justify, optional). Optional columns are dropped, last
# first, when the terminal is too narrow, and named below the listing.
_COLUMNS = (("offer", "<", False), ("GPU", "<", False), ("n", ">", False),
            ("on-demand/h", ">", False), ("per GPU-h", ">", False), ("spot/h", ">", False),
            ("spot per GPU-h", ">", True), ("currency", "<", False), ("billing", "<", True),
            ("date", "<", True))
_GAP = "  "


def _offer_cells(o: Offer) -> tuple[str, ...]:
    return (o.key, o.gpu_model, str(o.gpu_count), price(o.on_demand_price_per_hour),
            per_gpu(o, o.on_demand_price_per_hour), price(o.spot_price_per_hour),
            per_gpu(o, o.spot_price_per_hour), o.currency,
            o.billing.value if o.billing else "unknown", o.price_date.isoformat())


class OffersListing:
    """Every offer with its prices, as aligned plain text laid out once when printed: the
    column widths are the widest cell of each, so the layout that fits the terminal is
    found by arithmetic, not by rendering the table at several widths (a rich Table of
    2,000 rows takes seconds to render once). Narrower terminals lose the spot per
    GPU-hour, billing and date columns first (named below), then each offer's figures move
    under its key; a value is never cut."""

    def __init__(self, offers: Sequence[Offer], title: str | None = None) -> None:
        self.title = title
        self.rows = [_offer_cells(o) for o in offers]
        self.widths = [max([len(h), *(len(r[i]) for r in self.rows)])
                       for i, (h, _, _) in enumerate(_COLUMNS)]

    def text(self, width: int) -> str:
        shown = list(range(len(_COLUMNS)))
        for i in reversed(range(len(_COLUMNS))):
            if self._width(shown) <= width:
                break
            if _COLUMNS[i][2]:
                shown.remove(i)
        lines = [self.title] if self.title else []
        if self._width(shown) <= width:
            lines += [self._line([h for h, _, _ in _COLUMNS], shown),
                      self._line(["-" * w for w in self.widths], shown)]
            lines += [self._line(r, shown) for r in self.rows]
        else:  # two lines per offer: its key, then its figures indented
            rest = [i for i in shown if i]
            lines += ["offer", "  " + self._line([h for h, _, _ in _COLUMNS], rest)]
            for r in self.rows:
                lines += [r[0], "  " + self._line(r, rest)]
        dropped = [_COLUMNS[i][0] for i in range(len(_COLUMNS)) if i not in shown]
        if dropped:
            lines += [f"left out at this width: {', '.join(dropped)}",
                      "(a wider terminal, `gpuaudit catalog show OFFER` or --json shows them)"]
        return "\n".join(line.rstrip() for line in lines)

    def _width(self, shown: list[int]) -> int:
        return sum(self.widths[i] for i in shown) + len(_GAP) * (len(shown) - 1)

    def _line(self, cells: Sequence[str], shown: list[int]) -> str:
        return _GAP.join(f"{cells[i]:{_COLUMNS[i][1]}{self.widths[i]}}" for i in shown)

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.text import Text

        yield Text(self.text(options.max_width), no_wrap=True, overflow="ignore")


def offers_table(offers: Sequence[Offer], *, title: str | None = None) -> OffersListing:
    return OffersListing(offers, title)


Replaced = Sequence[tuple[Offer, str | None, str]]  # (the other source's row, where, why)


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
