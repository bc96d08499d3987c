"""Every SkyPilot cloud we import, checked on real rows of its catalog (tests/fixtures/catalogs/
skypilot/<cloud>/vms.csv, each file naming the commit it was read at): every offer the
importer makes is compared with an offer computed here, from the rows, by the rules written
out below (not by the code under test). 0 mismatches, every cloud.

The rules, as each cloud writes its file:
- one row per zone (or per region where there is no zone column); the offer of an instance
  type in a region is its highest on-demand price and its cheapest spot price over the zones;
- a zero price is a placeholder: the cell counts as not published; a row left with no price
  is skipped; CPU-only rows and TPUs are skipped;
- a row without Region takes the region of its zone (IBM: jp-tok-2 → jp-tok);
- a spot-only instance type NAME__SPOT / NAME-spot__REGION / NAME_SPOT is the spot price of
  NAME in the same region when NAME is in the file;
- the GPU count is AcceleratorCount, except Azure's ND96isr_H100_v5, which has 8 GPUs;
- memory per GPU: GpuInfo SizeInMiB / 1024, except that Vast and PrimeIntellect give the
  machine's total (÷ count), and a value under 1024 is GiB already (RunPod, Shadeform);
- AWS Local and Wavelength Zones are left out.
"""

from __future__ import annotations

import ast
import csv
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from gpuaudit.cost.catalog import load_catalog, read_catalog_file, validate

SKY = Path(__file__).parents[1] / "fixtures" / "catalogs" / "skypilot"
CLOUDS = sorted(p.name for p in SKY.iterdir() if (p / "vms.csv").is_file()
                and p.name not in ("gcp", "zones"))  # GCP: test_cost_catalog, its own rules
TOTAL_MEMORY = {"vast", "primeintellect"}
COUNT_FIXES = {("azure", "Standard_ND96isr_H100_v5"): 8}


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as fh:
        return list(csv.DictReader(line for line in fh if not line.startswith("#")))


def _price(cell: str | None) -> float | None:
    value = float(cell) if cell and cell.strip() else None
    return None if value == 0 else value


def _info(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        try:
            return json.loads(text.replace("'", '"'))
        except ValueError:
            return None


def _memory(cloud: str, text: str, count: int) -> float | None:
    info = _info(text) if text else None
    if not isinstance(info, dict):
        return None
    lower = {k.lower(): v for k, v in info.items()}
    gpu = {k.lower(): v for k, v in lower["gpus"][0].items()}
    size = float({k.lower(): v for k, v in gpu["memoryinfo"].items()}["sizeinmib"])
    if size <= 0:
        return None
    if cloud in TOTAL_MEMORY and count > 1:
        size /= count
    return round(size, 1) if size < 1024 else round(size / 1024, 1)


def _aws_regular_zone(zone: str) -> bool:
    return not zone or bool(re.fullmatch(r"[a-z]+\d+-az\d+|[a-z]{2}(-[a-z]+)+-\d+[a-z]", zone))


def expected(cloud: str) -> dict[str, tuple[float | None, float | None, int, float | None]]:
    """key → (on-demand, spot, GPUs, GiB per GPU), from the rows by the rules above."""
    groups: dict[tuple[str, str], dict] = {}
    for row in _rows(SKY / cloud / "vms.csv"):
        acc = row.get("AcceleratorName") or ""
        if not acc or acc.lower().startswith("tpu"):
            continue
        zone = row.get("AvailabilityZone") or ""
        region = row.get("Region") or (re.sub(r"-\d+$", "", zone) if re.search(r"-\d+$", zone)
                                       else "")
        od, spot = _price(row.get("Price")), _price(row.get("SpotPrice"))
        if not region or (od is None and spot is None):
            continue
        if cloud == "aws" and not _aws_regular_zone(zone):
            continue
        g = groups.setdefault((row["InstanceType"], region), {"od": [], "spot": [],
                                                              "row": row})
        if od is not None:
            g["od"].append(od)
        if spot is not None:
            g["spot"].append(spot)
    for (instance, region) in list(groups):
        base = re.sub(r"(__|_|-)spot(?=$|__)", "", instance, flags=re.IGNORECASE)
        g = groups[(instance, region)]
        if base != instance and (base, region) in groups and not g["od"]:
            groups[(base, region)]["spot"] += g["spot"]
            del groups[(instance, region)]
    out = {}
    for (instance, region), g in groups.items():
        count = COUNT_FIXES.get((cloud, instance), int(float(g["row"]["AcceleratorCount"])))
        out[f"{cloud}/{instance}@{region}"] = (
            max(g["od"]) if g["od"] else None, min(g["spot"]) if g["spot"] else None, count,
            _memory(cloud, g["row"].get("GpuInfo") or "", count))
    return out


@pytest.mark.parametrize("cloud", CLOUDS)
def test_every_offer_of_every_cloud_matches_its_rows(cloud):
    cat = read_catalog_file(SKY / cloud / "vms.csv")
    got = {o.key: (o.on_demand_price_per_hour, o.spot_price_per_hour, o.gpu_count,
                   o.gpu_memory_gib) for o in cat.offers}
    want = expected(cloud)
    assert want, f"{cloud}: the fixture has no GPU offer"
    mismatches = {k: (got.get(k), want.get(k)) for k in got.keys() | want.keys()
                  if got.get(k) != want.get(k)}
    assert not mismatches, f"{cloud}: {len(mismatches)} of {len(want)} offers differ"
    assert {o.provider for o in cat.offers} == {cloud}
    # Every price is a real price: nothing ranks as free.
    assert all((o.on_demand_price_per_hour or 1) > 0 and (o.spot_price_per_hour or 1) > 0
               for o in cat.offers)


def test_the_clouds_cover_skypilots_catalogs():
    assert {*CLOUDS, "gcp"} >= {
        "aws", "gcp", "azure", "lambda", "oci", "runpod", "vast", "nebius", "fluidstack",
        "cudo", "paperspace", "do", "ibm", "scp", "hyperbolic", "hyperstack", "jarvislabs",
        "lium", "mithril", "primeintellect", "seeweb", "shadeform", "spheron", "verda",
        "yotta", "daytona", "ovhcloud", "scaleway"}


def _by_key(cloud):
    return {o.key: o for o in read_catalog_file(SKY / cloud / "vms.csv").offers}


# The GPU each cloud's way of naming it comes to (the row's words in the comment).
GPUS = [
    ("azure", "Standard_NC40ads_H100_v5@eastus", "h100-nvl"),  # SkyPilot: "H100"
    ("azure", "Standard_ND96isr_H100_v5@eastus", "h100-sxm"),
    ("azure", "Standard_ND40rs_v2@eastus", "v100-sxm2-32gb"),  # V100-32GB
    ("hyperstack", "n3-A100x1@CANADA-1", "a100-pcie-80gb"),  # A100-80G-PCIe
    ("hyperstack", "n3-H100-SXM5x8@US-1", "h100-sxm"),  # H100-80G-SXM5
    ("hyperstack", "n3-H100x1@CANADA-1", "h100-pcie"),  # H100-80G-PCIe
    ("cudo", "epyc-genoa-a100-pcie_1x2v4gb@no-kristiansand-1", "a100-pcie-80gb"),  # A100 80 GiB
    ("cudo", "intel-ice-lake-a100-pci_1x2v4gb@us-carlsbad-1", "a100-pcie-80gb"),  # "pci"
    ("cudo", "sapphire-rapids-h100_1x2v4gb@ca-montreal-3", "h100-sxm"),  # H100-SXM
    ("vast", "1x-H100_NVL-32-65536@Bulgaria, BG, EU", "h100-nvl"),
    ("vast", "1x-A100_SXM4-32-65536@Georgia, US, NA", "a100-sxm4-40gb"),  # 40960 MiB
    ("vast", "1x-A100_PCIE-32-65536@Oklahoma, US, NA", "a100-pcie-80gb"),  # 81920 MiB
    ("fluidstack", "H100_PCIE_80GB::1@CANADA", "h100-pcie"),
    ("fluidstack", "A100_PCIE_80GB::8@CANADA", "a100-pcie-80gb"),
    ("fluidstack", "H100_NVLINK_80GB::8@FINLAND", "h100-sxm"),
    ("spheron", "A100_sxm4x8_66b9a4e034c5c91a4d6a625d_calgary-canada-1@calgary-canada-1",
     "a100-sxm4-80gb"),  # A100_80G_SXM4
    ("spheron", "H100_668d6762247d03149a4c9468_dallas-usa-1@dallas-usa-1", "h100-pcie"),
    ("spheron", "n3-H100x8-NVLink__CANADA-1@CANADA-1", "h100-nvl"),  # H100_NVL
    ("lambda", "gpu_1x_h100_pcie@us-east-1", "h100-pcie"),
    ("runpod", "1x_A100-80GB_SECURE@CA", "a100-pcie-80gb"),  # GpuInfo "A100 PCIe"
    ("scaleway", "H100-1-80G@fr-par", "h100-pcie"),  # GpuInfo "NVIDIA H100 PCIe"
    ("shadeform", "denvr_A100-sxm4x8@calgary-canada-1", "a100-sxm4-40gb"),  # 40 (GiB)
    ("oci", "BM.GPU.H200.8@af-casablanca-1", "h200-sxm"),
    ("scp", "g1v8v1@KOREA-WEST-1-SCP-B001", "v100-sxm2-32gb"),
]


@pytest.mark.parametrize("cloud,key,gpu", GPUS)
def test_each_clouds_gpu_names_come_to_the_part_sold(cloud, key, gpu):
    assert _by_key(cloud)[f"{cloud}/{key}"].gpu_model == gpu


def test_cloud_specific_compositions():
    azure = _by_key("azure")["azure/Standard_ND96isr_H100_v5@eastus"]
    assert (azure.gpu_count, azure.per_gpu(azure.on_demand_price_per_hour)) == (8, 12.29)
    assert "SkyPilot's row says 12" in azure.notes
    # Scaleway's prices are its euro list prices.
    assert {o.currency for o in _by_key("scaleway").values()} == {"EUR"}
    # PrimeIntellect and Spheron sell spot capacity as instance types of their own.
    pi = _by_key("primeintellect")["primeintellect/datacrunch__8xH100_80GB__176__1480@IS"]
    assert (pi.on_demand_price_per_hour, pi.spot_price_per_hour) == (15.77, 6.84)
    assert not [k for k in _by_key("primeintellect") if k.upper().endswith("__SPOT@FI")]
    sph = _by_key("spheron")["spheron/n3-A100x1__CANADA-1@CANADA-1"]
    assert (sph.on_demand_price_per_hour, sph.spot_price_per_hour) == (1.4327, 1.1476)
    # Vast writes SpotPrice 0.00 on every row: no spot price, said once.
    vast = read_catalog_file(SKY / "vast" / "vms.csv")
    assert {o.spot_price_per_hour for o in vast.offers} == {None}
    [zero] = vast.left_out
    assert (zero.kind, zero.rows) == ("zero-spot", 23)
    assert "SpotPrice 0" in zero.message()
    # Memory as each cloud writes it: per machine (Vast), GiB (Shadeform), lower-case (DO).
    assert _by_key("vast")["vast/8x-H200-32-65536@France, FR, EU"].gpu_memory_gib == 140.4
    assert _by_key("shadeform")["shadeform/paperspace_H100@newyork-usa-1"].gpu_memory_gib == 80
    assert _by_key("do")["do/gpu-h100x8-640gb@tor1"].gpu_memory_gib == 79.6
    # IBM rows without Region belong to their zone's region.
    ibm = _by_key("ibm")
    assert "ibm/gx2-8x64x1v100@jp-tok" in ibm and len(ibm) == 9
    # Seeweb's GPU rows without any location are skipped as bad rows, counted.
    seeweb = read_catalog_file(SKY / "seeweb" / "vms.csv")
    assert [p.message for p in seeweb.problems] == ["Region is empty"] * 6


def test_every_cloud_validates_without_a_wrong_number():
    from datetime import date

    # FAIL-level findings are wrong numbers (spot above on-demand, a placeholder, a wrong
    # count or form factor): none in any cloud's imported offers.
    for cloud in [*CLOUDS, "gcp"]:
        findings = validate(load_catalog(SKY / cloud / "vms.csv"), today=date.today())
        fails = [f.message for f in findings if f.severity.value == "FAIL"
                 and f.code != "catalog.load"]
        assert not fails, (cloud, fails)


def test_offers_of_all_clouds_together(tmp_path):
    """All clouds in one catalog: one offer per key, every provider present."""
    providers: dict[str, int] = defaultdict(int)
    for cloud in [*CLOUDS, "gcp"]:
        for o in read_catalog_file(SKY / cloud / "vms.csv").offers:
            providers[o.provider] += 1
    assert len(providers) == len(CLOUDS) + 1 and min(providers.values()) >= 2
