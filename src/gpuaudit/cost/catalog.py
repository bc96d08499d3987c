"""The price catalog: load (ours, a user's, SkyPilot's CSV), validate, import.

A catalog file is a CSV with one row per rentable instance (and region). Loading never stops at
a bad row: the row is reported with its file and line (a `Problem`) and the rest loads, because
one typo in a 10,000-row file must not hide the other 9,999 offers. `validate` then judges the
offers that did load (spot above on-demand, placeholder prices, GPU counts that contradict the
instance type, per-GPU outliers, stale dates, unknown currencies and GPUs).

Two formats are read, told apart by the header:

* ours (``docs/cost-catalog.md``): the `Offer` fields as columns, plus optional GCP-style parts
  (host price + per-GPU price) that the loader sums into the instance price;
* SkyPilot's ``vms.csv`` (``InstanceType, AcceleratorName, AcceleratorCount, ..., Price,
  SpotPrice, Region``): one row per availability zone, GCP hosts and accelerators in separate
  rows. Zones are folded into one offer per region (spot = the cheapest zone) and GCP parts are
  summed with SkyPilot's fixed machine-type → GPU table.
"""

from __future__ import annotations

import ast
import csv
import io
import math
import os
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import ValidationError

from gpuaudit.errors import BadInputError
from gpuaudit.model.cost import Billing, Offer
from gpuaudit.model.finding import Finding, Severity

__all__ = [
    "COLUMNS",
    "ISO_CURRENCIES",
    "Catalog",
    "ImportResult",
    "Location",
    "Problem",
    "compose_price",
    "expected_gpu_count",
    "import_catalog",
    "load_catalog",
    "parse_key",
    "read_catalog_file",
    "shipped_catalog_path",
    "user_catalog_path",
    "validate",
    "write_catalog",
]

USER_CATALOG_ENV = "GPUAUDIT_USER_CATALOG"

# Our format, in the order `write_catalog` writes it. The four *_part columns are optional.
COLUMNS: tuple[str, ...] = (
    "provider", "instance_type", "region", "gpu_model", "gpu_count", "gpu_memory_gib", "vcpus",
    "ram_gib", "currency", "on_demand_price_per_hour", "spot_price_per_hour",
    "reserved_1y_price_per_hour", "reserved_3y_price_per_hour",
    "host_on_demand_price_per_hour", "host_spot_price_per_hour",
    "gpu_on_demand_price_per_hour", "gpu_spot_price_per_hour",
    "billing", "billing_minimum_s", "source", "price_date", "notes",
)
_REQUIRED = ("provider", "instance_type", "gpu_model", "gpu_count", "source", "price_date")
_PRICE_FIELDS = ("on_demand_price_per_hour", "spot_price_per_hour",
                 "reserved_1y_price_per_hour", "reserved_3y_price_per_hour")
_PART_FIELDS = ("host_on_demand_price_per_hour", "host_spot_price_per_hour",
                "gpu_on_demand_price_per_hour", "gpu_spot_price_per_hour")

# ISO 4217 codes a GPU price list is plausibly quoted in. A code outside this set is far more
# often a typo ("UDS") or a symbol ("$") than a real currency, so validation calls it an error.
ISO_CURRENCIES: frozenset[str] = frozenset({
    "USD", "EUR", "GBP", "CNY", "JPY", "KRW", "INR", "SGD", "HKD", "TWD", "AUD", "CAD", "CHF",
    "SEK", "NOK", "DKK", "PLN", "CZK", "BRL", "MXN", "ZAR", "AED", "SAR", "ILS", "NZD", "RUB",
    "TRY", "IDR", "THB", "MYR", "VND", "PHP",
})

# Values catalogs use when a price is unknown: SkyPilot writes 0.0 (GCP a4 hosts) and 700.0
# (unavailable TPU regions), a Mithril fetcher produced 0.01, hand-made sheets use 9999.
PLACEHOLDER_PRICES: frozenset[float] = frozenset({0.0, 0.01, 700.0, 999.0, 9999.0, 99999.0})

# Relative tolerance for "the stated total equals host + N × GPU": prices carry 5-6 decimals.
_COMPOSE_TOLERANCE = 1e-4


@dataclass(frozen=True)
class Problem:
    """A row (or file) that could not be used as written. `line` is 1-based; None = file."""

    file: str
    line: int | None
    message: str
    code: str = "malformed"  # malformed | bad-price | duplicate | composition | unreadable

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class Location:
    file: str
    line: int | None


@dataclass(frozen=True)
class Catalog:
    """Offers with where each came from, and the problems met while reading them."""

    offers: tuple[Offer, ...] = ()
    problems: tuple[Problem, ...] = ()
    locations: tuple[Location, ...] = ()  # parallel to `offers`
    files: tuple[str, ...] = ()  # what was read, in order (later files override earlier)
    _index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for i, offer in enumerate(self.offers):
            self._index.setdefault(offer.key, i)

    def __len__(self) -> int:
        return len(self.offers)

    def get(self, key: str) -> Offer | None:
        i = self._index.get(key)
        return None if i is None else self.offers[i]

    def location(self, offer: Offer) -> Location | None:
        i = self._index.get(offer.key)
        return self.locations[i] if i is not None and i < len(self.locations) else None

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


# -- paths ---------------------------------------------------------------------------------


def shipped_catalog_path() -> Path:
    return Path(str(resources.files("gpuaudit") / "data" / "catalog.csv"))


def user_catalog_path() -> Path:
    """GPUAUDIT_USER_CATALOG when set, else catalog.csv in the user data directory (the
    directory the store uses for its SQLite file)."""
    env = os.environ.get(USER_CATALOG_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir("gpuaudit")) / "catalog.csv"


# -- loading -------------------------------------------------------------------------------


def load_catalog(path: str | os.PathLike[str] | None = None, *, include_user: bool = True,
                 provider: str | None = None) -> Catalog:
    """The shipped catalog plus the user's imported rows (a user row replaces a shipped row
    with the same provider/instance/region) when `path` is None; else just that file, in our
    format or SkyPilot's. `provider` names the cloud of a SkyPilot file whose path does not.

    An unreadable file raises BadInputError; bad rows become `Catalog.problems`."""
    if path is not None:
        return _merge([read_catalog_file(path, provider=provider)])
    parts = [read_catalog_file(shipped_catalog_path())]
    user = user_catalog_path()
    if include_user and user.is_file():
        parts.append(read_catalog_file(user))
    return _merge(parts)


def _merge(parts: Sequence[Catalog]) -> Catalog:
    by_key: dict[str, tuple[Offer, Location]] = {}
    for part in parts:
        for offer, loc in zip(part.offers, part.locations, strict=True):
            by_key[offer.key] = (offer, loc)  # later files win: the user's rows override
    return Catalog(offers=tuple(o for o, _ in by_key.values()),
                   locations=tuple(loc for _, loc in by_key.values()),
                   problems=tuple(p for part in parts for p in part.problems),
                   files=tuple(f for part in parts for f in part.files))


def read_catalog_file(path: str | os.PathLike[str], *, provider: str | None = None
                      ) -> Catalog:
    """One catalog file, its format told from the header."""
    p = Path(path)
    name = str(p)
    try:
        text = p.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise BadInputError(f"catalog {name}: no such file") from None
    except IsADirectoryError:
        raise BadInputError(f"catalog {name}: is a directory, not a CSV file") from None
    except UnicodeDecodeError:
        raise BadInputError(f"catalog {name}: not a text (UTF-8) CSV file") from None
    except OSError as exc:
        raise BadInputError(f"catalog {name}: cannot read: {exc.strerror or exc}") from None
    rows = _csv_rows(text)
    header_line, header = next(rows, (0, []))
    if not header:
        raise BadInputError(f"catalog {name}: empty (no header row)")
    fields = [h.strip() for h in header]
    if {"InstanceType", "AcceleratorName", "Price"} <= set(fields):
        return _read_skypilot(name, fields, rows, provider or _provider_from_path(p))
    if {"provider", "instance_type"} <= set(fields):
        return _read_ours(name, header_line, fields, rows)
    raise BadInputError(
        f"catalog {name}:{header_line}: unknown format: the header has neither our columns "
        "(provider, instance_type, ...) nor SkyPilot's (InstanceType, AcceleratorName, Price)")


def _csv_rows(text: str) -> Iterator[tuple[int, list[str]]]:
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


class _RowError(ValueError):
    def __init__(self, message: str, code: str = "malformed") -> None:
        super().__init__(message)
        self.code = code


def _number(row: dict[str, str], key: str, *, integer: bool = False,
            allow_zero: bool = True) -> float | None:
    raw = (row.get(key) or "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise _RowError(f"{key} {raw!r} is not a number") from None
    if not math.isfinite(value):
        raise _RowError(f"{key} {raw!r} is not a finite number")
    if value < 0:
        raise _RowError(f"{key} {raw} is negative",
                        "bad-price" if "price" in key.lower() else "malformed")
    if not allow_zero and value == 0:
        raise _RowError(f"{key} is zero")
    if integer and value != int(value):
        raise _RowError(f"{key} {raw} is not a whole number")
    return value


def _g(value: float | None) -> str:
    """A price as written in catalogs: up to 6 decimals, no trailing zeros."""
    if value is None:
        return "none"
    return f"{value:.6f}".rstrip("0").rstrip(".")


def compose_price(host: float | None, gpu_each: float | None, gpu_count: int) -> float | None:
    """An instance priced in parts (GCP): host machine + N × per-GPU price; None when a part is
    missing, because half a price is worse than none."""
    if host is None or gpu_each is None:
        return None
    return round(host + gpu_count * gpu_each, 6)


def _read_ours(name: str, header_line: int, fields: list[str],
               rows: Iterator[tuple[int, list[str]]]) -> Catalog:
    missing = [c for c in _REQUIRED if c not in fields]
    if missing:
        raise BadInputError(f"catalog {name}:{header_line}: header lacks column(s) "
                            + ", ".join(missing))
    offers: list[Offer] = []
    locations: list[Location] = []
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for line, cells in rows:
        if len(cells) > len(fields):
            problems.append(Problem(name, line, f"{len(cells)} cells but the header has "
                                    f"{len(fields)} columns (an unquoted comma?)"))
            continue
        row = dict(zip(fields, (c.strip() for c in cells), strict=False))
        try:
            offer = _offer_from_ours(row)
        except _RowError as exc:
            problems.append(Problem(name, line, str(exc), exc.code))
            continue
        if offer.key in seen:
            problems.append(Problem(name, line, f"{offer.key} repeats line {seen[offer.key]};"
                                    " this row is ignored", "duplicate"))
            continue
        seen[offer.key] = line
        offers.append(offer)
        locations.append(Location(name, line))
    return Catalog(offers=tuple(offers), problems=tuple(problems),
                   locations=tuple(locations), files=(name,))


def _offer_from_ours(row: dict[str, str]) -> Offer:
    for key in _REQUIRED:
        if not row.get(key):
            raise _RowError(f"{key} is empty")
    count_f = _number(row, "gpu_count", integer=True, allow_zero=False)
    assert count_f is not None  # required above
    count = int(count_f)
    prices = {k: _number(row, k) for k in _PRICE_FIELDS}
    parts = {k: _number(row, k) for k in _PART_FIELDS}
    notes = row.get("notes") or None
    composed = []
    for total_key, host_key, gpu_key, label in (
            ("on_demand_price_per_hour", "host_on_demand_price_per_hour",
             "gpu_on_demand_price_per_hour", "on-demand"),
            ("spot_price_per_hour", "host_spot_price_per_hour", "gpu_spot_price_per_hour",
             "spot")):
        host, each = parts[host_key], parts[gpu_key]
        total = compose_price(host, each, count)
        if total is None:
            if (host is None) != (each is None) and prices[total_key] is None:
                # One part alone cannot price the instance; say so rather than guess.
                composed.append(f"{label}: only the {'host' if each is None else 'GPU'} part"
                                " is known, no total")
            continue
        stated = prices[total_key]
        if stated is not None and not math.isclose(stated, total, rel_tol=_COMPOSE_TOLERANCE,
                                                   abs_tol=1e-6):
            raise _RowError(f"{total_key} {_g(stated)} is not host {_g(host)} + {count} × "
                            f"GPU {_g(each)} = {_g(total)}", "composition")
        prices[total_key] = total
        composed.append(f"{label} = host {_g(host)} + {count} × GPU {_g(each)} = {_g(total)}")
    # Idempotent: a file written by `write_catalog` already carries the arithmetic in its
    # notes, and reading it back must not repeat it.
    composed = [c for c in composed if not (notes and c in notes)]
    if composed:
        notes = "; ".join(filter(None, [notes, "composed: " + "; ".join(composed)]))
    billing = _billing(row.get("billing"))
    try:
        price_date = date.fromisoformat(row["price_date"])
    except ValueError:
        raise _RowError(f"price_date {row['price_date']!r} is not a date (YYYY-MM-DD)"
                        ) from None
    vcpus = _number(row, "vcpus", integer=True)
    try:
        return Offer(
            provider=row["provider"].lower(), instance_type=row["instance_type"],
            region=row.get("region") or None, gpu_model=row["gpu_model"], gpu_count=count,
            gpu_memory_gib=_number(row, "gpu_memory_gib"),
            vcpus=None if vcpus is None else int(vcpus), ram_gib=_number(row, "ram_gib"),
            currency=(row.get("currency") or "USD").upper(), billing=billing,
            billing_minimum_s=_number(row, "billing_minimum_s") or 0.0,
            host_price_per_hour=parts["host_on_demand_price_per_hour"],
            gpu_price_per_hour=parts["gpu_on_demand_price_per_hour"],
            source=row["source"], price_date=price_date, notes=notes, **prices)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise _RowError(f"{'.'.join(map(str, err['loc']))}: {err['msg']}") from None


# Words a billing cell may use for "not known" (None). An empty cell keeps its old meaning,
# per second, so that catalogs written before `billing` could be unknown load as they did.
BILLING_UNKNOWN = frozenset({"unknown", "none", "?"})


def _billing(raw: str | None) -> Billing | None:
    text = (raw or "second").strip().lower() or "second"
    if text in BILLING_UNKNOWN:
        return None
    try:
        return Billing(text)
    except ValueError:
        raise _RowError(f"billing {text!r} is not second, minute, hour or unknown") from None


# -- SkyPilot's format ---------------------------------------------------------------------

# SkyPilot accelerator names → specs ids. PCIe/SXM is not in the name; GpuInfo's 'Name' tells
# (RunPod writes 'A100 PCIe'), see _skypilot_gpu. Names not here keep their lower-cased form
# and validation reports them as unknown GPUs.
SKYPILOT_GPUS: dict[str, str] = {
    "V100": "v100-sxm2-16gb", "V100-32GB": "v100-sxm2-32gb", "T4": "t4", "A10": "a10",
    "A10G": "a10g", "A40": "a40", "A100": "a100-sxm4-40gb", "A100-80GB": "a100-sxm4-80gb",
    "L4": "l4", "L40": "l40", "L40S": "l40s", "H100": "h100-sxm", "H100-MEGA": "h100-sxm",
    "H100-NVL": "h100-nvl", "H200": "h200-sxm", "B200": "b200", "RTX4090": "rtx-4090",
    "RTX3090": "rtx-3090",
}
_PCIE_VARIANTS = {"a100-sxm4-40gb": "a100-pcie-40gb", "a100-sxm4-80gb": "a100-pcie-80gb",
                  "h100-sxm": "h100-pcie", "v100-sxm2-16gb": "v100-pcie-16gb",
                  "v100-sxm2-32gb": "v100-pcie-32gb"}

# GCP machine type → the accelerator its price must be added to (SkyPilot keeps the same
# fixed table in sky/catalog/gcp_catalog.py). The count comes from the "-Ng" suffix.
_GCP_FAMILY_GPU = {"a2-highgpu": "A100", "a2-megagpu": "A100", "a2-ultragpu": "A100-80GB",
                   "a3-highgpu": "H100", "a3-edgegpu": "H100", "a3-megagpu": "H100-MEGA",
                   "a3-ultragpu": "H200", "a4-highgpu": "B200"}
_G2_L4_COUNT = {"g2-standard-4": 1, "g2-standard-8": 1, "g2-standard-12": 1,
                "g2-standard-16": 1, "g2-standard-32": 1, "g2-standard-24": 2,
                "g2-standard-48": 4, "g2-standard-96": 8}
_KNOWN_PROVIDERS = ("aws", "gcp", "azure", "lambda", "runpod", "nebius", "vast", "oci",
                    "paperspace", "fluidstack", "cudo", "hyperbolic", "verda", "lium",
                    "mithril", "shadeform", "seeweb", "primeintellect", "jarvislabs",
                    "hyperstack", "yotta", "spheron", "do", "ibm", "scp", "vsphere")


def _provider_from_path(p: Path) -> str:
    """SkyPilot keeps one vms.csv per cloud folder (catalogs/v8/aws/vms.csv)."""
    for part in (p.parent.name, p.stem):
        if part.lower() in _KNOWN_PROVIDERS:
            return part.lower()
    return "skypilot"


@dataclass
class _Zones:
    """All zone rows of one (instance, region): folded into one offer."""

    line: int
    row: dict[str, str]
    on_demand: list[float] = field(default_factory=list)
    spot: list[float] = field(default_factory=list)
    zones: int = 0


def _read_skypilot(name: str, fields: list[str], rows: Iterable[tuple[int, list[str]]],
                   provider: str) -> Catalog:
    problems: list[Problem] = []
    groups: dict[tuple[str, str], _Zones] = {}
    accelerators: dict[tuple[str, str], _Zones] = {}
    for line, cells in rows:
        if len(cells) != len(fields):
            problems.append(Problem(name, line, f"{len(cells)} cells but the header has "
                                    f"{len(fields)} columns"))
            continue
        row = {k: v.strip() for k, v in zip(fields, cells, strict=True)}
        try:
            od = _number(row, "Price")
            spot = _number(row, "SpotPrice")
            _number(row, "AcceleratorCount")
        except _RowError as exc:
            problems.append(Problem(name, line, str(exc), exc.code))
            continue
        instance, acc = row.get("InstanceType", ""), row.get("AcceleratorName", "")
        region = row.get("Region", "")
        if not region:
            problems.append(Problem(name, line, "Region is empty"))
            continue
        if acc.lower().startswith("tpu-"):
            continue  # TPUs are not GPUs: out of scope, not an error
        table, key = ((accelerators, (acc, region)) if not instance
                      else (groups, (instance, region)))
        if not instance and not acc:
            problems.append(Problem(name, line, "both InstanceType and AcceleratorName are "
                                    "empty"))
            continue
        g = table.get(key)
        if g is None:
            g = table[key] = _Zones(line=line, row=row)
        g.zones += 1
        if od is not None:
            g.on_demand.append(od)
        if spot is not None:
            g.spot.append(spot)
    offers: list[Offer] = []
    locations: list[Location] = []
    today = date.today()
    for (instance, region), g in groups.items():
        try:
            offer = _skypilot_offer(name, provider, instance, region, g, accelerators, today)
        except _RowError as exc:
            problems.append(Problem(name, g.line, str(exc), exc.code))
            continue
        if offer is not None:
            offers.append(offer)
            locations.append(Location(name, g.line))
    return Catalog(offers=tuple(offers), problems=tuple(problems),
                   locations=tuple(locations), files=(name,))


def _gcp_gpu(instance: str) -> tuple[str, int] | None:
    if instance in _G2_L4_COUNT:
        return "L4", _G2_L4_COUNT[instance]
    m = re.fullmatch(r"(a\d-[a-z]+gpu)-(\d+)g(?:-nolssd)?", instance)
    if m and m.group(1) in _GCP_FAMILY_GPU:
        return _GCP_FAMILY_GPU[m.group(1)], int(m.group(2))
    return None


def _skypilot_offer(name: str, provider: str, instance: str, region: str, g: _Zones,
                    accelerators: dict[tuple[str, str], _Zones], today: date) -> Offer | None:
    row = g.row
    acc = row.get("AcceleratorName", "")
    count_raw = _number(row, "AcceleratorCount")
    host_od = max(g.on_demand) if g.on_demand else None
    host_spot = min(g.spot) if g.spot else None
    notes = []
    if len(set(g.on_demand)) > 1:
        notes.append(f"on-demand differs across zones ({min(g.on_demand):g}-"
                     f"{max(g.on_demand):g}); the highest is kept")
    if len(g.spot) > 1 and min(g.spot) != max(g.spot):
        notes.append(f"spot: cheapest of {len(g.spot)} zones ({min(g.spot):g}-{max(g.spot):g})")
    od, spot = host_od, host_spot
    host_part = gpu_part = None
    part = _gcp_gpu(instance) if not acc else None
    if part is not None:
        acc, count = part
        parts = accelerators.get((acc, region))
        if parts is None:
            raise _RowError(f"{instance}@{region}: the host is priced alone and no {acc} "
                            "accelerator row exists for that region (SkyPilot lists GCP "
                            "accelerators separately)", "composition")
        gpu_od = max(parts.on_demand) if parts.on_demand else None
        gpu_spot = min(parts.spot) if parts.spot else None
        od = compose_price(host_od, gpu_od, count)
        spot = compose_price(host_spot, gpu_spot, count)
        host_part, gpu_part = host_od, gpu_od
        notes.append(f"composed: host {_g(host_od)} + {count} × {acc} {_g(gpu_od)} = {_g(od)}"
                     f" (spot: host {_g(host_spot)} + {count} × {_g(gpu_spot)} = {_g(spot)})")
    else:
        if not acc or not count_raw:
            return None  # a CPU-only instance: nothing for a GPU catalog, and not an error
        if count_raw != int(count_raw) or count_raw < 1:
            raise _RowError(f"AcceleratorCount {count_raw:g} is not a whole number of GPUs")
        count = int(count_raw)
    gpu_model, memory = _skypilot_gpu(acc, row.get("GpuInfo", ""), count, notes)
    try:
        return Offer(
            provider=provider, instance_type=instance, region=region, gpu_model=gpu_model,
            gpu_count=count, gpu_memory_gib=memory,
            vcpus=_int_or_none(row.get("vCPUs")), ram_gib=_float_or_none(row.get("MemoryGiB")),
            currency="USD",  # SkyPilot's catalogs are all in US dollars
            on_demand_price_per_hour=od, spot_price_per_hour=spot,
            host_price_per_hour=host_part, gpu_price_per_hour=gpu_part,
            source=f"skypilot catalog {name}", price_date=today,
            notes="; ".join(["imported from SkyPilot's vms.csv (price_date = import day)",
                             *notes]))
    except ValidationError as exc:
        err = exc.errors()[0]
        raise _RowError(f"{'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def _skypilot_gpu(acc: str, gpu_info: str, count: int, notes: list[str]
                  ) -> tuple[str, float | None]:
    model = SKYPILOT_GPUS.get(acc, acc.lower())
    memory: float | None = None
    if gpu_info:
        try:
            info = ast.literal_eval(gpu_info)  # a Python dict literal, never code
            gpu = info["Gpus"][0]
            mib = float(gpu["MemoryInfo"]["SizeInMiB"])
            gpu_name = str(gpu.get("Name", ""))
        except (ValueError, SyntaxError, KeyError, IndexError, TypeError):
            notes.append("GpuInfo unreadable")
        else:
            if "pcie" in gpu_name.lower():
                model = _PCIE_VARIANTS.get(model, model)
            if mib >= 1024:
                memory = round(mib / 1024, 1)
            else:
                # RunPod rows say SizeInMiB: 80 for an 80 GB A100: GiB written as MiB.
                notes.append(f"GpuInfo memory {mib:g} MiB is implausible; left empty")
    return model, memory


def _int_or_none(raw: str | None) -> int | None:
    value = _float_or_none(raw)
    return None if value is None else int(value)


def _float_or_none(raw: str | None) -> float | None:
    try:
        value = float(raw) if raw else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value >= 0 else None


# -- writing and importing -----------------------------------------------------------------


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return _g(value)
    return str(value.value if hasattr(value, "value") else value)


# Offer fields written under another column name by `write_catalog`.
_WRITTEN_AS = {"host_on_demand_price_per_hour": "host_price_per_hour",
               "gpu_on_demand_price_per_hour": "gpu_price_per_hour"}


def write_catalog(offers: Iterable[Offer], path: str | os.PathLike[str]) -> None:
    """Offers in our format: totals, the on-demand host/GPU parts of composed offers (their
    arithmetic is also in notes), an unknown billing as `unknown`. Written to a temporary file
    first so a crash never leaves half a file."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        fh.write("# gpuaudit user price catalog (written by `gpuaudit catalog import`). "
                 "Format: docs/cost-catalog.md\n")
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(COLUMNS)
        for o in offers:
            data = o.model_dump()
            data.update({col: data[field] for col, field in _WRITTEN_AS.items()})
            if data["billing"] is None:
                data["billing"] = "unknown"
            w.writerow([_fmt(data.get(c)) if c in data else "" for c in COLUMNS])
    tmp.replace(p)


@dataclass(frozen=True)
class ImportResult:
    dest: Path
    added: tuple[str, ...]  # keys new to the user catalog
    replaced: tuple[str, ...]  # keys whose rows were replaced
    skipped: tuple[Problem, ...]  # rows of the source that did not load
    total: int  # rows in the user catalog afterwards


def import_catalog(src: str | os.PathLike[str], dest: str | os.PathLike[str] | None = None,
                   *, provider: str | None = None) -> ImportResult:
    """Merge a catalog file (ours or SkyPilot's) into the user catalog (`dest`, default
    `user_catalog_path()`): a row with the same provider/instance/region replaces the old one.

    Refused with BadInputError (nothing written) when the source is unreadable, has no usable
    row, or has a negative or zero price or an unknown currency: those are wrong numbers, not
    missing ones, and would silently skew every cost computed from them. Other bad rows are
    skipped and returned in `skipped`."""
    incoming = read_catalog_file(src, provider=provider)
    for prob in incoming.problems:
        if prob.code == "bad-price":
            raise BadInputError(f"import refused: {prob}")
    for offer, loc in zip(incoming.offers, incoming.locations, strict=True):
        where = f"{loc.file}:{loc.line}" if loc.line else loc.file
        for key in _PRICE_FIELDS:
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
                        skipped=incoming.problems, total=len(merged))


def parse_key(text: str) -> tuple[str, str, str | None]:
    """PROVIDER/INSTANCE[@REGION] → its parts (BadInputError when it has no '/')."""
    head, _, region = text.partition("@")
    provider, sep, instance = head.partition("/")
    if not sep or not provider or not instance:
        raise BadInputError(f"{text!r}: expected PROVIDER/INSTANCE[@REGION], e.g. "
                            "aws/p5.48xlarge@us-east-1")
    return provider.strip(), instance.strip(), region.strip() or None


# -- validation ----------------------------------------------------------------------------

# GPUs per instance for families whose names do not say it. Sources: AWS accelerated-computing
# instance pages, GCP GPU machine types, Azure ND/NC series pages (see docs/cost-catalog.md).
_FIXED_COUNTS: dict[tuple[str, str], int] = {
    **{("aws", it): n for it, n in {
        "p3.2xlarge": 1, "p3.8xlarge": 4, "p3.16xlarge": 8, "p3dn.24xlarge": 8,
        "p4d.24xlarge": 8, "p4de.24xlarge": 8, "p5.4xlarge": 1, "p5.48xlarge": 8,
        "p5e.48xlarge": 8, "p5en.48xlarge": 8, "p6-b200.48xlarge": 8,
    }.items()},
    **{("aws", f"{fam}.{size}"): n for fam in ("g5", "g6", "g6e") for size, n in {
        "xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 1,
        "12xlarge": 4, "24xlarge": 4, "48xlarge": 8}.items()},
    **{("gcp", it): n for it, n in _G2_L4_COUNT.items()},
    ("gcp", "a2-megagpu-16g"): 16,
    **{("azure", it.casefold()): n for it, n in {
        "Standard_NC6s_v3": 1, "Standard_NC12s_v3": 2, "Standard_NC24s_v3": 4,
        "Standard_NC24rs_v3": 4, "Standard_ND40rs_v2": 8, "Standard_ND96asr_v4": 8,
        "Standard_ND96amsr_A100_v4": 8, "Standard_NC24ads_A100_v4": 1,
        "Standard_NC48ads_A100_v4": 2, "Standard_NC96ads_A100_v4": 4,
        "Standard_NC40ads_H100_v5": 1, "Standard_NC80adis_H100_v5": 2,
        "Standard_ND96isr_H100_v5": 8, "Standard_ND96isr_H200_v5": 8,
    }.items()},
    # Alibaba Cloud: the counts of the price table cited in docs/cost-catalog.md.
    **{("alibaba", it): n for it, n in {
        "ecs.gn6i-c4g1.xlarge": 1, "ecs.gn6v-c8g1.2xlarge": 1, "ecs.gn6v-c8g1.8xlarge": 4,
        "ecs.gn6v-c8g1.16xlarge": 8, "ecs.gn6e-c12g1.3xlarge": 1, "ecs.gn6e-c12g1.12xlarge": 4,
        "ecs.gn6e-c12g1.24xlarge": 8, "ecs.gn7-c12g1.3xlarge": 1, "ecs.gn7-c13g1.13xlarge": 4,
        "ecs.gn7-c13g1.26xlarge": 8, "ecs.gn7e-c16g1.4xlarge": 1, "ecs.gn7e-c16g1.16xlarge": 4,
        "ecs.gn7e-c16g1.32xlarge": 8, "ecs.gn7i-c8g1.2xlarge": 1, "ecs.gn7i-c16g1.4xlarge": 1,
        "ecs.gn7i-c32g1.16xlarge": 2, "ecs.gn7i-c32g1.32xlarge": 4,
    }.items()},
}
# Names that state their GPU count: GCP a2/a3/a4 "-8g", Lambda "gpu_8x_", RunPod "8x_",
# Nebius "_8gpu-", Vast.ai (SkyPilot's names) "8x-".
_NAME_COUNT = (
    ("gcp", re.compile(r"a\d-[a-z]+gpu-(\d+)g(?:-nolssd)?")),
    ("lambda", re.compile(r"gpu_(\d+)x_.*")),
    ("runpod", re.compile(r"(\d+)x_.*")),
    ("nebius", re.compile(r".*_(\d+)gpu-.*")),
    ("vast", re.compile(r"(\d+)x-.*")),
)


def expected_gpu_count(provider: str, instance_type: str) -> int | None:
    """How many GPUs this instance type has, when known from its family; None otherwise."""
    p = provider.casefold()
    key = (p, instance_type.casefold() if p == "azure" else instance_type)
    if key in _FIXED_COUNTS:
        return _FIXED_COUNTS[key]
    for prov, pattern in _NAME_COUNT:
        m = pattern.fullmatch(instance_type)
        if p == prov and m:
            return int(m.group(1))
    return None


def _finding(code: str, severity: Severity, message: str, catalog: Catalog,
             offer: Offer | None = None, advice: str | None = None, **evidence: Any
             ) -> Finding:
    ev: dict[str, Any] = {}
    if offer is not None:
        ev["offer"] = offer.key
        loc = catalog.location(offer)
        if loc is not None:
            ev["file"], ev["line"] = loc.file, loc.line
    ev.update(evidence)
    return Finding(code=f"catalog.{code}", severity=severity, message=message, evidence=ev,
                   advice=advice)


def validate(catalog: Catalog, *, today: date | None = None, stale_days: int = 365,
             outlier_factor: float = 3.0, min_peers: int = 3) -> list[Finding]:
    """Findings on a loaded catalog, FAIL for errors (a wrong number) and WARN for doubts.

    Rules (codes `catalog.<rule>`): load (a row that did not load), spot-not-cheaper,
    placeholder-price, repeated-price, gpu-count, per-gpu-outlier, stale, future-date,
    unknown-currency, unknown-gpu. An outlier needs `min_peers` offers of the same GPU model
    and currency to compare with, because a median of two says nothing."""
    from gpuaudit.specs import load_catalog as load_specs

    today = today or date.today()
    specs = load_specs()
    out: list[Finding] = []
    for prob in catalog.problems:
        out.append(Finding(code="catalog.load", severity=Severity.FAIL, message=str(prob),
                           evidence={"file": prob.file, "line": prob.line, "kind": prob.code}))
    per_gpu: dict[tuple[str, str], list[float]] = defaultdict(list)
    same_price: dict[tuple[str, str, float], set[str]] = defaultdict(set)
    for o in catalog.offers:
        od, spot = o.on_demand_price_per_hour, o.spot_price_per_hour
        if od is not None and spot is not None:
            if spot > od:
                out.append(_finding("spot-not-cheaper", Severity.FAIL,
                                    f"{o.key}: spot {spot:g} is above on-demand {od:g} "
                                    f"{o.currency}/h", catalog, o,
                                    "a spot price is capped at on-demand; one of the two is "
                                    "wrong"))
            elif spot == od:
                out.append(_finding("spot-not-cheaper", Severity.WARN,
                                    f"{o.key}: spot equals on-demand ({od:g} {o.currency}/h):"
                                    " usually 'no spot data', not a real spot price", catalog,
                                    o, "leave spot empty when it is not published"))
        for key in _PRICE_FIELDS:
            value = getattr(o, key)
            if value is not None and value in PLACEHOLDER_PRICES:
                out.append(_finding("placeholder-price", Severity.FAIL,
                                    f"{o.key}: {key} {value:g} {o.currency}/h is a placeholder"
                                    " value, not a price", catalog, o,
                                    "leave the price empty when it is unknown"))
        if od is not None:
            same_price[(o.provider, o.currency, od)].add(o.gpu_model)
            if od > 0 and od not in PLACEHOLDER_PRICES:
                per_gpu[(o.gpu_model, o.currency)].append(od / o.gpu_count)
        expected = expected_gpu_count(o.provider, o.instance_type)
        if expected is not None and expected != o.gpu_count:
            out.append(_finding("gpu-count", Severity.FAIL,
                                f"{o.key}: {o.gpu_count} GPUs, but {o.instance_type} has "
                                f"{expected}", catalog, o, expected=expected))
        if o.price_date > today:
            out.append(_finding("future-date", Severity.FAIL,
                                f"{o.key}: price_date {o.price_date} is after {today}",
                                catalog, o))
        elif (today - o.price_date) > timedelta(days=stale_days):
            age = (today - o.price_date).days
            out.append(_finding("stale", Severity.WARN,
                                f"{o.key}: prices read {o.price_date}, {age} days before "
                                f"{today} (limit {stale_days})", catalog, o,
                                "re-read the source and update the row", age_days=age))
        if o.currency not in ISO_CURRENCIES:
            out.append(_finding("unknown-currency", Severity.FAIL,
                                f"{o.key}: currency {o.currency!r} is not a known ISO 4217 "
                                "code", catalog, o))
        if specs.get(o.gpu_model) is None:
            out.append(_finding("unknown-gpu", Severity.WARN,
                                f"{o.key}: GPU model {o.gpu_model!r} is not in the spec "
                                "catalog: no datasheet peaks for price-performance", catalog,
                                o, "use a specs id, e.g. h100-sxm (gpuaudit.specs)"))
    for (provider, currency, price), models in same_price.items():
        if len(models) > 1:
            for o in catalog.offers:
                if (o.provider, o.currency, o.on_demand_price_per_hour) == (provider, currency,
                                                                            price):
                    out.append(_finding(
                        "repeated-price", Severity.WARN,
                        f"{o.key}: on-demand {price:g} {currency}/h is also the price of "
                        f"{provider} offers with other GPUs ({', '.join(sorted(models))}): "
                        "likely a copied or default value", catalog, o))
    medians = {k: statistics.median(v) for k, v in per_gpu.items() if len(v) >= min_peers}
    for o in catalog.offers:
        od = o.on_demand_price_per_hour
        med = medians.get((o.gpu_model, o.currency))
        if od is None or med is None or od <= 0 or od in PLACEHOLDER_PRICES:
            continue
        each = od / o.gpu_count
        if each > outlier_factor * med or each < med / outlier_factor:
            side = "above" if each > med else "below"
            out.append(_finding("per-gpu-outlier", Severity.WARN,
                                f"{o.key}: {each:.4g} {o.currency} per GPU-hour is more than "
                                f"{outlier_factor:g}× {side} the median {med:.4g} of "
                                f"{len(per_gpu[(o.gpu_model, o.currency)])} {o.gpu_model} "
                                "offers", catalog, o, per_gpu=round(each, 6),
                                median=round(med, 6)))
    return out
