"""How well an offer's nodes pool for one training job: the network between instances, per
node, as the providers publish it, and the data-parallel step it has to carry.

An instance type not listed here has no known fabric between instances (consumer hosts,
marketplace boxes, single-GPU VMs): it is not pooled for one job unless the user allows it
(`Assumptions.allow_pooling`), and then over `Assumptions.pooled_network_gbps`.
"""

from __future__ import annotations

import functools
import re

from gpuaudit.model.lite import Lite, frozen


@frozen
class Network(Lite):
    gbps: float  # between instances, per node (all its NICs), 10^9 bit/s
    fabric: str  # "EFA", "InfiniBand NDR", ...
    source: str


_AWS = "https://aws.amazon.com/ec2/instance-types/"
_GCP = "https://cloud.google.com/compute/docs/gpus/gpu-network-bandwidth"
_AZURE = "https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/"
_NEBIUS = "https://docs.nebius.com/compute/clusters/gpu"

# (provider, instance-type pattern, matched whole and ignoring case) → the network between
# instances, per node.
NETWORKS: tuple[tuple[str, str, Network], ...] = tuple(
    (p, pattern, Network(gbps, fabric, source))
    for p, pattern, gbps, fabric, source in (
        ("aws", r"p5(e|en)?\.48xlarge", 3200, "EFA", _AWS + "p5/"),
        ("aws", r"p6-b200\.48xlarge", 3200, "EFA", _AWS + "p6/"),
        ("aws", r"p4de?\.24xlarge", 400, "EFA", _AWS + "p4/"),
        ("aws", r"p3dn\.24xlarge", 100, "EFA", _AWS + "p3/"),
        ("aws", r"g6e\.48xlarge", 400, "EFA", _AWS + "g6e/"),
        ("aws", r"g[56]\.48xlarge", 100, "EFA", _AWS + "g5/"),
        ("gcp", r"a3-ultragpu-8g(-nolssd)?", 3200, "RDMA (RoCE)", _GCP),
        ("gcp", r"a3-megagpu-8g", 1800, "GPUDirect-TCPXO", _GCP),
        ("gcp", r"a3-(high|edge)gpu-8g(-nolssd)?", 1000, "GPUDirect-TCPX", _GCP),
        ("gcp", r"a4-highgpu-8g", 3600, "RDMA (RoCE)", _GCP),
        ("gcp", r"a2-(highgpu-8g|ultragpu-8g|megagpu-16g)", 100, "Ethernet", _GCP),
        ("azure", r"Standard_ND96isr_H(100|200)_v5", 3200, "InfiniBand NDR", _AZURE),
        ("azure", r"Standard_ND96am?sr(_A100)?_v4", 1600, "InfiniBand HDR", _AZURE),
        ("azure", r"Standard_ND40rs_v2", 100, "InfiniBand EDR", _AZURE),
        ("nebius", r"gpu-h[12]00-sxm_8gpu-.*", 3200, "InfiniBand NDR", _NEBIUS),
    ))


# The providers with a published network between some instance types (lower case, as the
# catalog keeps them): any other offer has none, without a lookup.
PROVIDERS_WITH_NETWORKS = frozenset(p for p, _, _ in NETWORKS)


@functools.cache
def _rules(provider: str) -> tuple[re.Pattern[str], dict[str, Network]] | None:
    """The provider's patterns as one alternation of named groups: one match per lookup, the
    group that matched naming the network (10,000 offers may have thousands of instance
    types). Compiled when the provider is first asked about: a plan that never pools
    instances compiles none."""
    rules = [(pattern, net) for p, pattern, net in NETWORKS if p == provider]
    if not rules:
        return None
    return (re.compile("|".join(f"(?P<n{i}>{pattern})" for i, (pattern, _) in
                                enumerate(rules)), re.IGNORECASE),
            {f"n{i}": net for i, (_, net) in enumerate(rules)})


@functools.lru_cache(maxsize=4096)  # a catalog has each instance type in many regions
def network_of(provider: str, instance_type: str) -> Network | None:
    """The published network between instances of this type, or None when none is known."""
    rules = _rules(provider.casefold())
    if rules is None:
        return None
    m = rules[0].fullmatch(instance_type)
    return None if m is None or m.lastgroup is None else rules[1][m.lastgroup]


def cross_node_efficiency(*, nodes: int, gpus_per_node: int, flops_per_token: float,
                          gpu_flops: float, grad_bytes: float, volume_factor: float,
                          network_gbps: float, batch_tokens: float, overlap: float,
                          comm_s: float | None = None) -> float:
    """Data-parallel efficiency across `nodes` (1.0 on one node). Each step of `batch_tokens`
    tokens computes flops_per_token × batch_tokens over all GPUs; its gradients
    (`grad_bytes`) cross the network once per step as a hierarchical ring all-reduce, each
    node sending and receiving 2(n−1)/n of them (× `volume_factor`: 1.5 for ZeRO-3's
    all-gathers and reduce-scatter) over its `network_gbps`; a share `overlap` of the compute
    (the backward pass) hides communication. Efficiency = compute ÷ (compute + exposed
    communication). `comm_s`, when given, is the step's all-reduce time from a measurement
    (`measured.MeasuredAllReduce`) instead of the network's bandwidth."""
    if nodes <= 1:
        return 1.0
    compute_s = flops_per_token * batch_tokens / (nodes * gpus_per_node * gpu_flops)
    if comm_s is None:
        comm_s = (2 * (nodes - 1) / nodes * grad_bytes * volume_factor
                  / (network_gbps * 1e9 / 8))
    exposed = max(0.0, comm_s - overlap * compute_s)
    return compute_s / (compute_s + exposed)
