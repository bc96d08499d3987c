"""The price catalog: load (ours, a user's, SkyPilot's CSV), validate, import.

A catalog file is a CSV with one row per rentable instance (and region). The package, by job:

* `records`: `Catalog`, `Problem`, `LeftOut`, `Location`; currencies, placeholder prices;
* `load`: the shipped and user catalogs, one file in any known format (`FORMATS`);
* `table`: a file as a table, cell parsing, the `CatalogFormat` interface every format meets;
* `ours`: our format (docs/cost-catalog.md), read and written;
* `skypilot`: SkyPilot's ``vms.csv`` as a format adapter (zones folded, AWS Local/Wavelength
  Zones left out unless asked);
* `gcp`: GCP hosts + accelerator rows of the same count, zone by zone; N1 attachable GPUs;
* `families`: what instance names say (GPU counts, GCP machine types, PCIe or SXM);
* `validate`: the rules (spot above on-demand, placeholders, wrong counts or form factors,
  repeated prices, per-GPU outliers, stale dates, unknown currencies and GPUs);
* `importer`: `import_catalog` into the user catalog;
* `load.merge`: several sources, the newer price date winning (`Superseded` keeps the loser).

Everything public is importable from here, as it was from the single module.
"""

from .families import expected_gpu_count
from .importer import ImportResult, import_catalog
from .load import (
    FORMATS,
    USER_CATALOG_ENV,
    load_catalog,
    read_catalog_file,
    shipped_catalog_path,
    user_catalog_path,
)
from .ours import BILLING_UNKNOWN, COLUMNS, compose_price, write_catalog
from .records import (
    ISO_CURRENCIES,
    PLACEHOLDER_PRICES,
    Catalog,
    LeftOut,
    Location,
    Problem,
    Superseded,
    parse_key,
    problem_summary,
)
from .skypilot import SKYPILOT_GPUS
from .table import CatalogFormat, ReadOptions
from .validate import validate

__all__ = [
    "BILLING_UNKNOWN",
    "COLUMNS",
    "FORMATS",
    "ISO_CURRENCIES",
    "PLACEHOLDER_PRICES",
    "SKYPILOT_GPUS",
    "USER_CATALOG_ENV",
    "Catalog",
    "CatalogFormat",
    "ImportResult",
    "LeftOut",
    "Location",
    "Problem",
    "ReadOptions",
    "Superseded",
    "compose_price",
    "expected_gpu_count",
    "import_catalog",
    "load_catalog",
    "parse_key",
    "problem_summary",
    "read_catalog_file",
    "shipped_catalog_path",
    "user_catalog_path",
    "validate",
    "write_catalog",
]
