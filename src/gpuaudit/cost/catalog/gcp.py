"""GCP as SkyPilot lists it: a machine type's row prices the host alone, and each accelerator
has rows of its own, one per (GPU, count, zone), whose price is the total for that count. An
instance's price is the host's plus the accelerator row with the same GPU, count and zone:

* A2/A3/A4/G2 machine types come with their GPUs (the machine type says which and how many:
  `families.gcp_gpu`);
* N1 machine types take attachable GPUs (T4, V100, P4, P100, K80). SkyPilot's `--gpus T4:1`
  gets the cheapest N1 host with at least its default vCPUs for that count and 4 GiB per
  vCPU; GCP refuses a host above its per-count vCPU and memory limits
  (https://cloud.google.com/compute/docs/gpus). Such an offer is named `HOST+NxGPU`
  (`n1-highmem-4+1xT4`).

Both parts must be sold in the same zone: a zone composes only where both have a row. The
region's on-demand price is the highest composed zone price (GCP's on-demand prices do not
differ between the zones of a region), its spot price the cheapest composed zone's.
"""

from __future__ import annotations

from dataclasses import dataclass

# SkyPilot's default host vCPUs for an N1 attachable GPU (sky/catalog/gcp_catalog.py,
# _NUM_ACC_TO_NUM_CPU), memory at least 4 GiB per vCPU; GPUs not listed take DEFAULT.
N1_DEFAULT_VCPUS: dict[str, dict[int, int]] = {
    "K80": {1: 4, 2: 8, 4: 16, 8: 32, 16: 64},
    "V100": {1: 8, 2: 16, 4: 32, 8: 64},
    "T4": {1: 4, 2: 8, 4: 48},
    "P100": {1: 8, 2: 16, 4: 32, 8: 64},
    "DEFAULT": {1: 8, 2: 16, 4: 32, 8: 64, 16: 128},
}
N1_MEMORY_PER_VCPU_GIB = 4.0
# GCP's limits for N1 with attachable GPUs: count → (max vCPUs, max memory GiB).
N1_LIMITS: dict[str, dict[int, tuple[int, int]]] = {
    "K80": {1: (8, 52), 2: (16, 104), 4: (32, 208), 8: (64, 208)},
    "V100": {1: (12, 78), 2: (24, 156), 4: (48, 312), 8: (96, 624)},
    "T4": {1: (48, 312), 2: (48, 312), 4: (96, 624)},
    "P4": {1: (24, 156), 2: (48, 312), 4: (96, 624)},
    "P100": {1: (16, 104), 2: (32, 208), 4: (96, 624)},
}
N1_FAMILIES = ("n1-standard-", "n1-highmem-", "n1-highcpu-")


@dataclass
class Zones:
    """All rows of one host type or one (accelerator, count) in one location, by zone."""

    line: int  # the first row's line
    row: dict[str, str]  # the first row's cells
    on_demand: dict[str, float]  # zone → price
    spot: dict[str, float]

    def add(self, zone: str, od: float | None, spot: float | None) -> None:
        if od is not None:
            self.on_demand[zone] = max(od, self.on_demand.get(zone, od))
        if spot is not None:
            self.spot[zone] = min(spot, self.spot.get(zone, spot))

    @property
    def zones(self) -> set[str]:
        return set(self.on_demand) | set(self.spot)


@dataclass(frozen=True)
class Composed:
    """Host + accelerator over the zones that sell both."""

    on_demand: float | None
    spot: float | None
    host_on_demand: float | None  # the parts of the on-demand total's zone
    gpus_on_demand: float | None  # all the instance's GPUs together
    zones: int
    note: str


def compose(host: Zones, acc: Zones) -> Composed | None:
    """Per zone host + accelerator; None when no zone sells both."""
    zones = host.zones & acc.zones
    if not zones:
        return None
    od_zone = {z: host.on_demand[z] + acc.on_demand[z] for z in zones
               if z in host.on_demand and z in acc.on_demand}
    spot_zone = {z: host.spot[z] + acc.spot[z] for z in zones
                 if z in host.spot and z in acc.spot}
    od = spot = host_part = gpu_part = None
    if od_zone:
        top = max(od_zone, key=lambda z: (od_zone[z], z))
        od, host_part, gpu_part = od_zone[top], host.on_demand[top], acc.on_demand[top]
    if spot_zone:
        spot = min(spot_zone.values())
    note = (f"composed per zone over {len(zones)} zone{'s' * (len(zones) != 1)} selling both: "
            f"host {_p(host_part)} + GPUs {_p(gpu_part)} = {_p(od)} on demand"
            f"; spot {_p(spot)} (cheapest zone)")
    return Composed(_r(od), _r(spot), host_part, gpu_part, len(zones), note)


def n1_host(acc: str, count: int, hosts: dict[str, tuple[Zones, float, float]]
            ) -> str | None:
    """The N1 machine type SkyPilot's `--gpus ACC:COUNT` gets among `hosts` (name → (zones,
    vCPUs, memory GiB) of one location): the cheapest on demand with the default vCPUs and 4
    GiB each, within GCP's limits for that GPU and count. None when no host qualifies."""
    vcpus = N1_DEFAULT_VCPUS.get(acc, N1_DEFAULT_VCPUS["DEFAULT"]).get(count)
    limits = N1_LIMITS.get(acc, {}).get(count)
    if vcpus is None or limits is None:
        return None
    best: tuple[float, str] | None = None
    for name, (zones, cpus, mem) in hosts.items():
        if not name.startswith(N1_FAMILIES) or not zones.on_demand:
            continue
        if cpus < vcpus or mem < vcpus * N1_MEMORY_PER_VCPU_GIB:
            continue
        if cpus > limits[0] or mem > limits[1]:
            continue
        price = min(zones.on_demand.values())
        if best is None or (price, name) < best:
            best = (price, name)
    return None if best is None else best[1]


def n1_gpus() -> frozenset[str]:
    """The accelerators GCP attaches to N1 hosts."""
    return frozenset(N1_LIMITS)


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _p(value: float | None) -> str:
    return "none" if value is None else f"{value:.6f}".rstrip("0").rstrip(".")
