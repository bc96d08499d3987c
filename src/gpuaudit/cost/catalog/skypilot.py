"""SkyPilot's ``vms.csv`` (``InstanceType, AcceleratorName, AcceleratorCount, ..., Price,
SpotPrice, Region, AvailabilityZone``) as a catalog format.

SkyPilot has one row per availability zone, and for GCP the host and its accelerators in
separate rows. Zones of one instance and region become one offer (spot = the cheapest zone);
GCP parts are summed with SkyPilot's fixed machine-type → GPU table. AWS Local Zones and
Wavelength Zones are left out unless asked for: they are separate locations (a city's edge
site, a carrier's 5G network) with their own spot market, not zones of the region, and their
prices are not the region's (p5.48xlarge spot in us-east-1: 10.24 in the Atlanta Local Zone,
17.63 in the region's cheapest zone). When asked for, each becomes an offer of its own
location (``aws/p5.48xlarge@us-east-1-atl-2``).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from gpuaudit.model.cost import Billing, Offer

from .families import FORM_FACTOR_LABEL, gcp_gpu, stated_form_factor, with_form_factor
from .ours import compose_price
from .records import Catalog, LeftOut, Location, Problem
from .table import (
    ReadOptions,
    RowError,
    Table,
    lenient_float,
    lenient_int,
    make_offer,
    number,
    price_text,
)

# SkyPilot accelerator names → specs ids. PCIe/SXM is not in the name; the instance name or
# GpuInfo's 'Name' tells (Lambda gpu_1x_h100_pcie, RunPod 'A100 PCIe'), see `_gpu`. Names not
# here keep their lower-cased form and validation reports them as unknown GPUs.
SKYPILOT_GPUS: dict[str, str] = {
    "V100": "v100-sxm2-16gb", "V100-32GB": "v100-sxm2-32gb", "T4": "t4", "A10": "a10",
    "A10G": "a10g", "A40": "a40", "A100": "a100-sxm4-40gb", "A100-80GB": "a100-sxm4-80gb",
    "L4": "l4", "L40": "l40", "L40S": "l40s", "H100": "h100-sxm", "H100-MEGA": "h100-sxm",
    "H100-NVL": "h100-nvl", "H200": "h200-sxm", "B200": "b200", "RTX4090": "rtx-4090",
    "RTX3090": "rtx-3090",
}
KNOWN_PROVIDERS = ("aws", "gcp", "azure", "lambda", "runpod", "nebius", "vast", "oci",
                   "paperspace", "fluidstack", "cudo", "hyperbolic", "verda", "lium",
                   "mithril", "shadeform", "seeweb", "primeintellect", "jarvislabs",
                   "hyperstack", "yotta", "spheron", "do", "ibm", "scp", "vsphere")

# Billing of imported rows where the provider publishes it (SkyPilot's file does not say):
# AWS bills Linux On-Demand and Spot per second with a 60-second minimum
# (https://aws.amazon.com/ec2/pricing/on-demand/), GCP per second after a 1-minute minimum
# (https://cloud.google.com/compute/vm-instance-pricing). Other providers keep the format's
# default (per second, no minimum), as before.
BILLING: dict[str, tuple[Billing, float, str]] = {
    "aws": (Billing.SECOND, 60.0, "billing: per second, 60 s minimum (AWS EC2 pricing)"),
    "gcp": (Billing.SECOND, 60.0, "billing: per second, 1 min minimum (GCP VM pricing)"),
}

# AWS zone ids and names: use1-az1 / us-east-1a are Availability Zones; use1-wl1-bos-wlz1 /
# us-east-1-wl1-bos-wlz-1 Wavelength Zones; anything else (use1-atl2-az1, us-east-1-atl-2a,
# usw2-lax1-az1) a Local Zone (AWS docs: "Available Local Zones", "Available Wavelength Zones").
_AZ = re.compile(r"[a-z]+\d+-az\d+|[a-z]{2}(?:-[a-z]+)+-\d+[a-z]")
_WAVELENGTH_ID = re.compile(r"[a-z]+\d+-(wl\d+)-([a-z]+)-wlz(\d+)")
_LOCAL_ID = re.compile(r"[a-z]+\d+-([a-z]+)(\d+)-az\d+")


def zone_kind(zone: str) -> str:
    """"az", "local-zone" or "wavelength-zone" for an AWS zone id or name ("az" when empty)."""
    z = zone.strip().casefold()
    if not z or _AZ.fullmatch(z):
        return "az"
    return "wavelength-zone" if re.search(r"-wl\d+-", z) else "local-zone"


def zone_location(region: str, zone: str) -> str:
    """The location (AWS's network border group) a Local or Wavelength Zone prices: use1-atl2-az1
    in us-east-1 → us-east-1-atl-2; use1-wl1-bos-wlz1 → us-east-1-wl1-bos-wlz-1."""
    z = zone.strip().casefold()
    if m := _WAVELENGTH_ID.fullmatch(z):
        return f"{region}-{m.group(1)}-{m.group(2)}-wlz-{m.group(3)}"
    if m := _LOCAL_ID.fullmatch(z):
        return f"{region}-{m.group(1)}-{m.group(2)}"
    if z.startswith(region.casefold() + "-"):  # a zone name: us-east-1-atl-2a
        return z[:-1] if re.fullmatch(r".*-\d+[a-z]", z) else z
    return f"{region}-{z}"


def provider_from_path(p: Path) -> str:
    """SkyPilot keeps one vms.csv per cloud folder (catalogs/v8/aws/vms.csv)."""
    for part in (p.parent.name, p.stem):
        if part.lower() in KNOWN_PROVIDERS:
            return part.lower()
    return "skypilot"


@dataclass
class _Zones:
    """All zone rows of one (instance, location): folded into one offer."""

    line: int
    row: dict[str, str]
    on_demand: list[float] = field(default_factory=list)
    spot: list[float] = field(default_factory=list)
    zones: int = 0
    edge_zone: str | None = None  # the Local/Wavelength Zone this location is, if it is one


class SkyPilotFormat:
    name = "skypilot"

    def matches(self, fields: set[str]) -> bool:
        return {"InstanceType", "AcceleratorName", "Price"} <= fields

    def read(self, table: Table, options: ReadOptions) -> Catalog:
        name, fields = table.name, table.fields
        provider = options.provider or provider_from_path(table.path)
        problems: list[Problem] = []
        groups: dict[tuple[str, str], _Zones] = {}
        accelerators: dict[tuple[str, str], _Zones] = {}
        left: dict[str, list[str]] = defaultdict(list)  # kind → zone of each row left out
        for line, cells in table.rows:
            if len(cells) != len(fields):
                problems.append(Problem(name, line, f"{len(cells)} cells but the header has "
                                        f"{len(fields)} columns"))
                continue
            row = {k: v.strip() for k, v in zip(fields, cells, strict=True)}
            try:
                od = number(row, "Price")
                spot = number(row, "SpotPrice")
                number(row, "AcceleratorCount")
            except RowError as exc:
                problems.append(Problem(name, line, str(exc), exc.code))
                continue
            instance, acc = row.get("InstanceType", ""), row.get("AcceleratorName", "")
            region = row.get("Region", "")
            if not region:
                problems.append(Problem(name, line, "Region is empty"))
                continue
            if acc.lower().startswith("tpu-"):
                continue  # TPUs are not GPUs: out of scope, not an error
            if not instance and not acc:
                problems.append(Problem(name, line, "both InstanceType and AcceleratorName "
                                        "are empty"))
                continue
            location, edge = region, None
            zone = row.get("AvailabilityZone", "")
            if provider == "aws" and (kind := zone_kind(zone)) != "az":
                if not options.include_local_zones:
                    if acc:  # CPU-only rows are skipped anyway: not worth a count
                        left[kind].append(zone)
                    continue
                location, edge = zone_location(region, zone), zone
            table_, key = ((accelerators, (acc, location)) if not instance
                           else (groups, (instance, location)))
            g = table_.get(key)
            if g is None:
                g = table_[key] = _Zones(line=line, row=row, edge_zone=edge)
            g.zones += 1
            if od is not None:
                g.on_demand.append(od)
            if spot is not None:
                g.spot.append(spot)
        offers: list[Offer] = []
        locations: list[Location] = []
        today = date.today()
        for (instance, location), g in groups.items():
            try:
                offer = _offer(name, provider, instance, location, g, accelerators, today)
            except RowError as exc:
                problems.append(Problem(name, g.line, str(exc), exc.code))
                continue
            if offer is not None:
                offers.append(offer)
                locations.append(Location(name, g.line))
        left_out = tuple(LeftOut(name, kind, len(zones), tuple(sorted(set(zones))))
                         for kind, zones in sorted(left.items()))
        return Catalog(offers=tuple(offers), problems=tuple(problems),
                       locations=tuple(locations), files=(name,), left_out=left_out)


def _offer(name: str, provider: str, instance: str, region: str, g: _Zones,
           accelerators: dict[tuple[str, str], _Zones], today: date) -> Offer | None:
    row = g.row
    acc = row.get("AcceleratorName", "")
    count_raw = number(row, "AcceleratorCount")
    host_od = max(g.on_demand) if g.on_demand else None
    host_spot = min(g.spot) if g.spot else None
    notes = []
    if g.edge_zone is not None:
        notes.append(f"AWS {zone_kind(g.edge_zone).replace('-', ' ').title()} "
                     f"{g.edge_zone} of {row.get('Region', '')}, priced on its own")
    if len(set(g.on_demand)) > 1:
        notes.append(f"on-demand differs across zones ({min(g.on_demand):g}-"
                     f"{max(g.on_demand):g}); the highest is kept")
    if len(g.spot) > 1 and min(g.spot) != max(g.spot):
        notes.append(f"spot: cheapest of {len(g.spot)} zones ({min(g.spot):g}-{max(g.spot):g})")
    od, spot = host_od, host_spot
    host_part = gpu_part = None
    part = gcp_gpu(instance) if not acc else None
    if part is not None:
        acc, count = part
        parts = accelerators.get((acc, region))
        if parts is None:
            raise RowError(f"{instance}@{region}: the host is priced alone and no {acc} "
                           "accelerator row exists for that region (SkyPilot lists GCP "
                           "accelerators separately)", "composition")
        gpu_od = max(parts.on_demand) if parts.on_demand else None
        gpu_spot = min(parts.spot) if parts.spot else None
        od = compose_price(host_od, gpu_od, count)
        spot = compose_price(host_spot, gpu_spot, count)
        host_part, gpu_part = host_od, gpu_od
        notes.append(f"composed: host {price_text(host_od)} + {count} × {acc} "
                     f"{price_text(gpu_od)} = {price_text(od)} (spot: host "
                     f"{price_text(host_spot)} + {count} × {price_text(gpu_spot)} = "
                     f"{price_text(spot)})")
    else:
        if not acc or not count_raw:
            return None  # a CPU-only instance: nothing for a GPU catalog, and not an error
        if count_raw != int(count_raw) or count_raw < 1:
            raise RowError(f"AcceleratorCount {count_raw:g} is not a whole number of GPUs")
        count = int(count_raw)
    gpu_model, memory = _gpu(acc, instance, row.get("GpuInfo", ""), notes)
    billing, minimum, billing_note = BILLING.get(provider, (Billing.SECOND, 0.0, ""))
    return make_offer(
        provider=provider, instance_type=instance, region=region, gpu_model=gpu_model,
        gpu_count=count, gpu_memory_gib=memory,
        vcpus=lenient_int(row.get("vCPUs")), ram_gib=lenient_float(row.get("MemoryGiB")),
        currency="USD",  # SkyPilot's catalogs are all in US dollars
        on_demand_price_per_hour=od, spot_price_per_hour=spot,
        host_price_per_hour=host_part, gpu_price_per_hour=gpu_part,
        billing=billing, billing_minimum_s=minimum,
        source=f"skypilot catalog {name}", price_date=today,
        notes="; ".join(["imported from SkyPilot's vms.csv (price_date = import day)",
                         *notes, *filter(None, [billing_note])]))


def _gpu(acc: str, instance: str, gpu_info: str, notes: list[str]) -> tuple[str, float | None]:
    """The specs id and the memory per GPU (GiB). The form factor comes from the instance name
    first (Lambda's gpu_1x_h100_pcie has AcceleratorName 'H100' and GpuInfo name 'H100'),
    then from GpuInfo's name (RunPod's 'A100 PCIe')."""
    base = SKYPILOT_GPUS.get(acc, acc.lower())
    memory: float | None = None
    gpu_name = ""
    if gpu_info:
        try:
            info = ast.literal_eval(gpu_info)  # a Python dict literal, never code
            gpu = info["Gpus"][0]
            mib = float(gpu["MemoryInfo"]["SizeInMiB"])
            gpu_name = str(gpu.get("Name", ""))
        except (ValueError, SyntaxError, KeyError, IndexError, TypeError):
            notes.append("GpuInfo unreadable")
        else:
            if mib >= 1024:
                memory = round(mib / 1024, 1)
            else:
                # RunPod rows say SizeInMiB: 80 for an 80 GB A100: GiB written as MiB.
                notes.append(f"GpuInfo memory {mib:g} MiB is implausible; left empty")
    by_name = stated_form_factor(instance)
    model = with_form_factor(base, by_name or stated_form_factor(gpu_name))
    if by_name and model != base:
        notes.append(f"GPU {model}: the instance name says {FORM_FACTOR_LABEL[by_name]}, "
                     f"SkyPilot's accelerator name {acc!r} does not")
    return model, memory
