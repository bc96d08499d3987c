"""SkyPilot's ``vms.csv`` (``InstanceType, AcceleratorName, AcceleratorCount, ..., Price,
SpotPrice, Region, AvailabilityZone``) as a catalog format.

SkyPilot has one row per availability zone, and for GCP the host and its accelerators in
separate rows. Zones of one instance and region become one offer (spot = the cheapest zone);
GCP hosts and accelerator rows of the same count are summed zone by zone (`gcp`). A zero
price on a GPU row is SkyPilot's placeholder for "unknown": the row is skipped as a problem.

AWS Local Zones and Wavelength Zones are left out unless asked for: they are separate
locations (a city's edge site, a carrier's 5G network) with their own spot market, not zones
of the region, and their prices are not the region's (p5.48xlarge spot in us-east-1: 10.24
in the Atlanta Local Zone, 17.63 in the region's cheapest zone). When asked for, each becomes
an offer of its own location (``aws/p5.48xlarge@us-east-1-atl-2``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from datetime import date
from pathlib import Path

from gpuaudit.model.cost import Billing, Offer

from .families import expected_gpu_count, gcp_gpu
from .gcp import Zones, compose, n1_gpus, n1_host
from .gpu_names import identify
from .records import Catalog, LeftOut, Location, Problem
from .table import (
    ReadOptions,
    RowError,
    Table,
    lenient_float,
    lenient_int,
    make_offer,
    number,
)

KNOWN_PROVIDERS = ("aws", "gcp", "azure", "lambda", "runpod", "nebius", "vast", "oci",
                   "paperspace", "fluidstack", "cudo", "hyperbolic", "verda", "lium",
                   "mithril", "shadeform", "seeweb", "primeintellect", "jarvislabs",
                   "hyperstack", "yotta", "spheron", "do", "ibm", "scp", "vsphere",
                   "daytona", "ovhcloud", "scaleway")

# The currency of a cloud's prices where it is not US dollars: Scaleway's catalog copies its
# euro list prices (H100-1-80G 2.52 EUR/h; https://www.scaleway.com/en/pricing/).
CURRENCY: dict[str, tuple[str, str]] = {
    "scaleway": ("EUR", "currency: EUR, Scaleway's list prices"),
}

# Instance families whose GPU SkyPilot names wrongly (family with digits as N → specs id):
# Azure's NC H100 v5 sizes carry the H100 NVL (94 GB), which SkyPilot calls "H100".
FAMILY_GPU: dict[tuple[str, str], str] = {
    ("azure", "standard_ncNads_hN_vN"): "h100-nvl",
    ("azure", "standard_ncNadis_hN_vN"): "h100-nvl",
}

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


class SkyPilotFormat:
    name = "skypilot"

    def matches(self, fields: set[str]) -> bool:
        return {"InstanceType", "AcceleratorName", "Price"} <= fields

    def read(self, table: Table, options: ReadOptions) -> Catalog:
        name, fields = table.name, table.fields
        provider = options.provider or provider_from_path(table.path)
        problems: list[Problem] = []
        hosts: dict[tuple[str, str], Zones] = {}  # (instance, location)
        accelerators: dict[tuple[str, int, str], Zones] = {}  # GCP: (GPU, count, location)
        edges: dict[tuple[str, str], str] = {}  # location → the Local/Wavelength Zone it is
        left: dict[str, list[str]] = defaultdict(list)  # kind → zone of each row left out
        zero_spot = 0  # rows whose SpotPrice 0 was read as no spot price
        for line, cells in table.rows:
            if len(cells) != len(fields):
                problems.append(Problem(name, line, f"{len(cells)} cells but the header has "
                                        f"{len(fields)} columns (an unquoted comma?)"))
                continue
            row = {k: v.strip() for k, v in zip(fields, cells, strict=True)}
            instance, acc = row.get("InstanceType", ""), row.get("AcceleratorName", "")
            if acc.lower().startswith("tpu-"):
                continue  # TPUs are not GPUs: out of scope, not an error
            try:
                od = number(row, "Price")
                spot = number(row, "SpotPrice")
                count = number(row, "AcceleratorCount")
            except RowError as exc:
                problems.append(Problem(name, line, str(exc), exc.code))
                continue
            zone = row.get("AvailabilityZone", "")
            region = row.get("Region", "") or region_of_zone(zone)
            if not region:
                problems.append(Problem(name, line, "Region is empty"))
                continue
            if not instance and not acc:
                problems.append(Problem(name, line, "both InstanceType and AcceleratorName "
                                        "are empty"))
                continue
            gpu_row = bool(acc) or (provider == "gcp" and gcp_gpu(instance) is not None)
            if gpu_row and (od == 0 or spot == 0):
                # SkyPilot writes 0.0 where it has no price (GCP a4 hosts; Vast's SpotPrice
                # throughout): a placeholder, which would rank as free. The cell is read as
                # "not published"; a row with no other price is skipped.
                zero_spot += spot == 0 and bool(od)
                od, spot = od or None, spot or None
                if od is None and spot is None:
                    problems.append(Problem(name, line, "Price is zero (a placeholder, not a "
                                            "price)", "zero-price"))
                    continue
            location = region
            if provider == "aws" and (kind := zone_kind(zone)) != "az":
                if not options.include_local_zones:
                    if acc:  # CPU-only rows are skipped anyway: not worth a count
                        left[kind].append(zone)
                    continue
                location = zone_location(region, zone)
                edges[(instance, location)] = zone
            if instance:
                key: tuple = (instance, location)
                groups: dict = hosts
            else:
                if count is None or count != int(count) or count < 1:
                    problems.append(Problem(name, line, "an accelerator row without a whole "
                                            "AcceleratorCount"))
                    continue
                key, groups = (acc, int(count), location), accelerators
            g = groups.get(key)
            if g is None:
                g = groups[key] = Zones(line=line, row=row, on_demand={}, spot={})
            g.add(zone or region, od, spot)
        built = _build(name, provider, hosts, accelerators, edges, date.today(),
                       merge_spot_types(hosts))
        problems.extend(built.problems)
        left_out = tuple(LeftOut(name, kind, len(zones), tuple(sorted(set(zones))))
                         for kind, zones in sorted(left.items()))
        if zero_spot:
            left_out += (LeftOut(name, "zero-spot", zero_spot, ()),)
        return Catalog(offers=built.offers, problems=tuple(problems),
                       locations=built.locations, files=(name,), left_out=left_out,
                       formats=(self.name,))


def _build(name: str, provider: str, hosts: dict[tuple[str, str], Zones],
           accelerators: dict[tuple[str, int, str], Zones], edges: dict[tuple[str, str], str],
           today: date, spot_types: int = 0) -> Catalog:
    """The offers: whole instances, GCP machine types with their GPUs, GCP N1 hosts with
    attachable GPUs."""
    offers: list[Offer] = []
    locations: list[Location] = []
    problems: list[Problem] = []

    def add(g: Zones, build: Callable[[], Offer | None]) -> None:
        try:
            offer = build()
        except RowError as exc:
            problems.append(Problem(name, g.line, str(exc), exc.code))
            return
        if offer is not None:
            offers.append(offer)
            locations.append(Location(name, g.line))

    for (instance, location), g in hosts.items():
        part = gcp_gpu(instance) if provider == "gcp" and not g.row.get("AcceleratorName") \
            else None
        if part is None:
            add(g, lambda g=g, i=instance, loc=location: _whole(
                name, provider, i, loc, g, edges.get((i, loc)), today))
            continue
        acc, count = part
        parts = accelerators.get((acc, count, location))
        if parts is None:
            problems.append(Problem(name, g.line, f"{instance}@{location}: the host is priced "
                                    f"alone and no {acc} × {count} accelerator row exists "
                                    "for that region (SkyPilot lists GCP accelerators "
                                    "separately)", "composition"))
            continue
        add(g, lambda g=g, i=instance, loc=location, a=acc, n=count, p=parts: _composed(
            name, i, loc, g, a, n, p, today))
    if provider == "gcp":
        by_location: dict[str, dict[str, tuple[Zones, float, float]]] = defaultdict(dict)
        for (instance, location), g in hosts.items():
            cpus, mem = lenient_float(g.row.get("vCPUs")), lenient_float(g.row.get("MemoryGiB"))
            if cpus is not None and mem is not None:
                by_location[location][instance] = (g, cpus, mem)
        for (acc, count, location), parts in accelerators.items():
            if acc not in n1_gpus():
                continue
            host = n1_host(acc, count, by_location.get(location, {}))
            if host is None:
                continue  # no N1 host in this file can take that many of them there
            g = by_location[location][host][0]
            add(parts, lambda g=g, h=host, loc=location, a=acc, n=count, p=parts: _composed(
                name, h, loc, g, a, n, p, today, attached=True))
    return Catalog(offers=tuple(offers), locations=tuple(locations), problems=tuple(problems))


def _whole(name: str, provider: str, instance: str, region: str, g: Zones, edge: str | None,
           today: date) -> Offer | None:
    """An instance priced as a whole (every cloud but GCP's GPU machine types)."""
    row = g.row
    acc = row.get("AcceleratorName", "")
    count_raw = number(row, "AcceleratorCount")
    if not acc or not count_raw:
        return None  # a CPU-only instance: nothing for a GPU catalog, and not an error
    if count_raw != int(count_raw) or count_raw < 1:
        raise RowError(f"AcceleratorCount {count_raw:g} is not a whole number of GPUs")
    ods, spots = list(g.on_demand.values()), list(g.spot.values())
    if not ods and not spots:
        raise RowError(f"{instance}@{region}: neither Price nor SpotPrice is given",
                       "no-price")
    notes = []
    if edge is not None:
        notes.append(f"AWS {zone_kind(edge).replace('-', ' ').title()} {edge} of "
                     f"{row.get('Region', '')}, priced on its own")
    if len(set(ods)) > 1:
        notes.append(f"on-demand differs across zones ({min(ods):g}-{max(ods):g}); the "
                     "highest is kept")
    if len(spots) > 1 and min(spots) != max(spots):
        notes.append(f"spot: cheapest of {len(spots)} zones ({min(spots):g}-{max(spots):g})")
    return _make(name, provider, instance, region, acc, int(count_raw), row,
                 max(ods) if ods else None, min(spots) if spots else None, None, None, notes,
                 today)


def _composed(name: str, instance: str, region: str, host: Zones, acc: str, count: int,
              parts: Zones, today: date, *, attached: bool = False) -> Offer:
    """A GCP host plus its (or its attached) accelerator row of the same count."""
    got = compose(host, parts)
    if got is None:
        raise RowError(f"{instance}@{region}: no zone sells both the host and {count} × "
                       f"{acc}", "composition")
    if got.on_demand is None and got.spot is None:
        raise RowError(f"{instance}@{region}: no zone prices both the host and {count} × "
                       f"{acc}", "no-price")
    notes = [f"{instance} + the {acc} × {count} accelerator row ({got.note})"]
    label = f"{instance}+{count}x{acc}" if attached else instance
    if attached:
        notes.append("N1 host as SkyPilot picks it for --gpus "
                     f"{acc}:{count} (cheapest with its default vCPUs and 4 GiB each, within "
                     "GCP's limits)")
    row = {**host.row, "GpuInfo": parts.row.get("GpuInfo", "")}
    each = None if got.gpus_on_demand is None else got.gpus_on_demand / count
    return _make(name, "gcp", label, region, acc, count, row, got.on_demand, got.spot,
                 got.host_on_demand, each, notes, today, type_name=instance)


def _make(name: str, provider: str, instance: str, region: str, acc: str, count: int,
          row: dict[str, str], od: float | None, spot: float | None, host: float | None,
          each: float | None, notes: list[str], today: date, type_name: str | None = None
          ) -> Offer:
    known = expected_gpu_count(provider, type_name or instance)
    if known is not None and known != count and host is None:
        # SkyPilot's Azure file counts 12 H100 in Standard_ND96isr_H100_v5, which has 8: the
        # price is the instance's, so the per-GPU price follows the instance's real count.
        notes.append(f"{known} GPUs as the instance type has them (SkyPilot's row says "
                     f"{count})")
        count = known
    gpu_model, memory = identify(acc, type_name or instance, row.get("GpuInfo", ""), count,
                                 provider, notes)
    gpu_model = FAMILY_GPU.get((provider, _family(instance)), gpu_model)
    billing, minimum, billing_note = BILLING.get(provider, (Billing.SECOND, 0.0, ""))
    currency, currency_note = CURRENCY.get(provider, ("USD", ""))
    return make_offer(
        provider=provider, instance_type=instance, region=region, gpu_model=gpu_model,
        gpu_count=count, gpu_memory_gib=memory,
        vcpus=lenient_int(row.get("vCPUs")), ram_gib=lenient_float(row.get("MemoryGiB")),
        currency=currency, on_demand_price_per_hour=od, spot_price_per_hour=spot,
        host_price_per_hour=host, gpu_price_per_hour=None if each is None else round(each, 6),
        billing=billing, billing_minimum_s=minimum,
        source=f"skypilot catalog {name}", price_date=today,
        notes="; ".join(["imported from SkyPilot's vms.csv (price_date = import day)",
                         *notes, *filter(None, [billing_note, currency_note])]))


def _family(instance: str) -> str:
    return re.sub(r"\d+", "N", instance.casefold())


def region_of_zone(zone: str) -> str:
    """The region a zone belongs to when a row leaves Region empty (IBM's jp-tok-2 of
    jp-tok), or ''."""
    m = re.fullmatch(r"([a-z]+(?:-[a-z]+)+)-\d+", zone.strip())
    return m.group(1) if m else ""


# Spot capacity sold as an instance type of its own (PrimeIntellect NAME__SPOT, Spheron
# NAME-spot__REGION, Verda-style NAME_SPOT): the name without the marker.
_SPOT_MARK = re.compile(r"(?:__|_|-)spot(?=$|__)", re.IGNORECASE)


def merge_spot_types(hosts: dict[tuple[str, str], Zones]) -> int:
    """Fold each spot-only instance type into the instance type it is the spot capacity of
    (same location, same zone), as that type's spot price; returns how many were folded. A
    spot type whose base type is not in the file stays an offer of its own."""
    folded = 0
    for (instance, location) in list(hosts):
        base = _SPOT_MARK.sub("", instance)
        g = hosts[(instance, location)]
        target = hosts.get((base, location))
        if base == instance or target is None or g.on_demand:
            continue
        for zone, price in g.spot.items():
            target.add(zone, None, price)
        del hosts[(instance, location)]
        folded += 1
    return folded

