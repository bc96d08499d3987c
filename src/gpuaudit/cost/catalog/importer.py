"""`catalog import`: merge a catalog file (ours or SkyPilot's) into the user catalog."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gpuaudit.errors import BadInputError
from gpuaudit.model.cost import Offer

from .load import read_catalog_file, user_catalog_path
from .ours import write_catalog
from .records import ISO_CURRENCIES, PRICE_FIELDS, Catalog, LeftOut, Problem


@dataclass(frozen=True)
class ImportResult:
    dest: Path
    added: tuple[str, ...]  # keys new to the user catalog
    replaced: tuple[str, ...]  # keys whose rows were replaced
    skipped: tuple[Problem, ...]  # rows of the source that did not load
    total: int  # rows in the user catalog afterwards
    left_out: tuple[LeftOut, ...] = ()  # rows of the source left out on purpose


def import_catalog(src: str | os.PathLike[str], dest: str | os.PathLike[str] | None = None,
                   *, provider: str | None = None, include_local_zones: bool = False
                   ) -> ImportResult:
    """Merge a catalog file (ours or SkyPilot's) into the user catalog (`dest`, default
    `user_catalog_path()`): a row with the same provider/instance/region replaces the old one.
    AWS Local and Wavelength Zone rows of a SkyPilot file are left out (and counted in
    `left_out`) unless `include_local_zones`.

    Refused with BadInputError (nothing written) when the source is unreadable, has no usable
    row, or has a negative or zero price or an unknown currency: those are wrong numbers, not
    missing ones, and would silently skew every cost computed from them. Other bad rows are
    skipped and returned in `skipped`."""
    incoming = read_catalog_file(src, provider=provider,
                                 include_local_zones=include_local_zones)
    for prob in incoming.problems:
        if prob.code == "bad-price":
            raise BadInputError(f"import refused: {prob}")
    for offer, loc in zip(incoming.offers, incoming.locations, strict=True):
        where = f"{loc.file}:{loc.line}" if loc.line else loc.file
        for key in PRICE_FIELDS:
            if getattr(offer, key) == 0:
                raise BadInputError(f"import refused: {where}: {key} is zero (a placeholder, "
                                    "not a price; leave it empty when unknown)")
        if offer.currency not in ISO_CURRENCIES:
            raise BadInputError(f"import refused: {where}: unknown currency "
                                f"{offer.currency!r} (expected an ISO 4217 code like USD)")
    if not incoming.offers:
        detail = f"; first problem: {incoming.problems[0]}" if incoming.problems else ""
        raise BadInputError(f"import refused: {src}: no GPU offer could be read{detail}")
    target = Path(dest) if dest is not None else user_catalog_path()
    existing = read_catalog_file(target) if target.is_file() else Catalog()
    merged: dict[str, Offer] = {o.key: o for o in existing.offers}
    added, replaced = [], []
    for o in incoming.offers:
        (replaced if o.key in merged else added).append(o.key)
        merged[o.key] = o
    try:
        write_catalog(merged.values(), target)
    except OSError as exc:
        raise BadInputError(f"cannot write the user catalog {target}: "
                            f"{exc.strerror or exc}") from None
    return ImportResult(dest=target, added=tuple(added), replaced=tuple(replaced),
                        skipped=incoming.problems, total=len(merged),
                        left_out=incoming.left_out)
