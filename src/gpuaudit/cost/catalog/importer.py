"""`catalog import`: merge a catalog file (ours or SkyPilot's) into the user catalog."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gpuaudit.errors import BadInputError

from .load import merge, read_catalog_file, user_catalog_path
from .ours import write_catalog
from .records import ISO_CURRENCIES, Catalog, LeftOut, Problem, Superseded


@dataclass(frozen=True)
class ImportResult:
    dest: Path
    added: tuple[str, ...]  # keys new to the user catalog
    replaced: tuple[str, ...]  # keys whose rows were replaced
    skipped: tuple[Problem, ...]  # rows of the source that did not load
    total: int  # rows in the user catalog afterwards
    left_out: tuple[LeftOut, ...] = ()  # rows of the source left out on purpose
    # incoming rows that lost to newer rows already in the user catalog
    kept_older: tuple[Superseded, ...] = ()


def import_catalog(src: str | os.PathLike[str], dest: str | os.PathLike[str] | None = None,
                   *, provider: str | None = None, include_local_zones: bool = False
                   ) -> ImportResult:
    """Merge a catalog file (ours or SkyPilot's) into the user catalog (`dest`, default
    `user_catalog_path()`): for the same provider/instance/region the newer price date wins
    (`merge`); an incoming row older than the one there is reported in `kept_older`.
    AWS Local and Wavelength Zone rows of a SkyPilot file are left out (and counted in
    `left_out`) unless `include_local_zones`.

    Refused with BadInputError (nothing written) when the source is unreadable, has no usable
    row, or has a negative price or an unknown currency: those are wrong numbers, and would
    silently skew every cost computed from them. Other bad rows (zero prices, SkyPilot's
    placeholder, among them) are skipped and returned in `skipped`."""
    incoming = read_catalog_file(src, provider=provider,
                                 include_local_zones=include_local_zones)
    for prob in incoming.problems:
        if prob.code == "bad-price":
            raise BadInputError(f"import refused: {prob}")
    for offer, loc in zip(incoming.offers, incoming.locations, strict=True):
        if offer.currency not in ISO_CURRENCIES:
            where = f"{loc.file}:{loc.line}" if loc.line else loc.file
            raise BadInputError(f"import refused: {where}: unknown currency "
                                f"{offer.currency!r} (expected an ISO 4217 code like USD)")
    if not incoming.offers:
        detail = f"; first problem: {incoming.problems[0]}" if incoming.problems else ""
        raise BadInputError(f"import refused: {src}: no GPU offer could be read{detail}")
    target = Path(dest) if dest is not None else user_catalog_path()
    existing = read_catalog_file(target) if target.is_file() else Catalog()
    merged = merge([existing, incoming])
    keys = {o.key for o in existing.offers}
    added = [o.key for o in incoming.offers if o.key not in keys]
    replaced = [o.key for o in incoming.offers if o.key in keys]
    mine = {id(o) for o in incoming.offers}
    try:
        write_catalog(merged.offers, target)
    except OSError as exc:
        raise BadInputError(f"cannot write the user catalog {target}: "
                            f"{exc.strerror or exc}") from None
    return ImportResult(dest=target, added=tuple(added), replaced=tuple(replaced),
                        skipped=incoming.problems, total=len(merged),
                        left_out=incoming.left_out, kept_older=tuple(
                            s for s in merged.superseded if id(s.offer) in mine))
