"""The price catalog: load (ours, a user's, SkyPilot's CSV), validate, import.

A catalog file is a CSV with one row per rentable instance (and region). The package, by job:

* `records`: `Catalog`, `Problem`, `LeftOut`, `Location`; currencies, placeholder prices;
* `load`: the shipped and user catalogs, one file in any known format (`FORMATS`);
* `cache`: the parsed catalog kept between runs (invalidated when a source changes);
* `table`: a file as a table, cell parsing, the `CatalogFormat` interface every format meets;
* `ours`: our format (docs/cost-catalog.md), read and written;
* `skypilot`: SkyPilot's ``vms.csv`` as a format adapter (zones folded, AWS Local/Wavelength
  Zones left out unless asked);
* `gcp`: GCP hosts + accelerator rows of the same count, zone by zone; N1 attachable GPUs;
* `families`: what instance names say (GPU counts, GCP machine types, PCIe or SXM);
* `checks`: `validate`, the rules (spot above on-demand, placeholders, wrong counts or form
  factors, repeated prices, per-GPU outliers, stale dates, unknown currencies and GPUs);
* `importer`: `import_catalog` into the user catalog;
* `load.merge`: several sources, the newer price date winning (`Superseded` keeps the loser).

Everything public is importable from here, each name from its module when first used: a
command that reads the catalog from the cache imports neither the CSV formats nor the
validation rules (datasheet specs, findings).
"""

from __future__ import annotations

import importlib
from typing import Any

# name → the module (in this package) that defines it
_WHERE: dict[str, str] = {
    "BILLING_UNKNOWN": "ours", "COLUMNS": "ours", "compose_price": "ours",
    "write_catalog": "ours",
    "FORMATS": "load", "USER_CATALOG_ENV": "load", "load_catalog": "load",
    "read_catalog_file": "load", "shipped_catalog_path": "load", "user_catalog_path": "load",
    "ISO_CURRENCIES": "records", "PLACEHOLDER_PRICES": "records", "Catalog": "records",
    "LeftOut": "records", "Location": "records", "Problem": "records",
    "Superseded": "records", "parse_key": "records", "problem_summary": "records",
    "ImportResult": "importer", "import_catalog": "importer",
    "SKYPILOT_GPUS": "gpu_names",
    "CatalogFormat": "table", "ReadOptions": "table",
    "expected_gpu_count": "families",
    "validate": "checks",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
