"""Cross-node communication from our own figures instead of a datasheet's network:

* measured: an all-reduce across nodes that a stored run holds (`gpuaudit fleet` measures
  one: suite `fleet`, `all_reduce_busbw` per message size, with the ranks and nodes it ran
  on). Its bus bandwidth at the gradient's size gives the time of the step's all-reduce on
  offers with the same GPU model and GPUs per node;
* predicted: a recorded step's gradient buckets (`--from-run`) all-reduced one by one against
  the backward pass, as `gpuaudit predict` models DDP (`predict.ddp.simulate`), over the
  offer's network.

An all-reduce measured inside one machine (the collectives suite, over NVLink or PCIe) says
nothing about the network between machines, and is refused for this use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuaudit.errors import BadInputError
from gpuaudit.model.lite import Lite, frozen

if TYPE_CHECKING:
    from collections.abc import Iterable

    from gpuaudit.model.measurement import Measurement


@frozen
class MeasuredAllReduce(Lite):
    """An all-reduce measured across `nodes` nodes of `gpus_per_node` × `gpu_model`."""

    source: str  # "fleet run ID" or "run ID"
    gpu_model: str
    gpus_per_node: int
    nodes: int
    curve: Any  # gpuaudit.predict.rates.AllReduce: busbw by message size

    def applies_to(self, gpu_model: str, gpus_per_node: int) -> bool:
        return gpu_model == self.gpu_model and gpus_per_node == self.gpus_per_node

    def seconds(self, size_bytes: float, ranks: int) -> float:
        """One all-reduce of `size_bytes` over `ranks` GPUs at the measured bus bandwidth for
        that size (a ring's busbw barely changes with the rank count: nccl-tests)."""
        return float(self.curve.seconds(size_bytes, ranks))

    def label(self, size_bytes: float) -> str:
        return (f"the all-reduce measured in {self.source} ({self.nodes} nodes × "
                f"{self.gpus_per_node} {self.gpu_model}: {self.curve.busbw(size_bytes):,.3g} "
                f"GB/s busbw at {size_bytes / 1e9:,.3g} GB)")


def allreduce_across_nodes(source: str, measurements: Iterable[Measurement],
                           gpu_name: str | None, pci_device_id: int | None = None,
                           skipped: str | None = None) -> MeasuredAllReduce:
    """The all-reduce across nodes among `measurements` (a fleet run's, or a run's), on GPUs
    named `gpu_name`; BadInputError (one line) when there is none or the GPU is unknown.
    `skipped`: why the source measured none, when it says."""
    from gpuaudit.predict.rates import AllReduce
    from gpuaudit.specs.catalog import load_catalog

    rows: dict[int, float] = {}
    ranks = nodes = 0
    inside = False
    for m in measurements:
        if m.name != "all_reduce_busbw" or not m.value:
            continue
        inside |= m.suite == "collectives"
        size, n = m.params.get("size_bytes"), m.params.get("nodes")
        if m.suite == "fleet" and isinstance(size, int | float) and isinstance(n, int) and n >= 2:
            rows[int(size)] = float(m.value)
            ranks, nodes = int(m.params.get("ranks") or 0), n  # type: ignore[arg-type]
    if not rows or ranks < nodes or ranks % nodes:
        why = (f": {skipped}" if skipped else
               " (its collectives ran inside one machine: they say nothing of the network)"
               if inside else "")
        raise BadInputError(f"{source} has no all-reduce measured across nodes{why}; "
                            "`gpuaudit fleet run` measures one")
    spec = load_catalog().lookup(nvml_name=gpu_name, pci_device_id=pci_device_id
                                 ) if gpu_name else None
    if spec is None:
        raise BadInputError(f"{source}: its GPU ({gpu_name or 'not recorded'}) is not in the "
                            "spec catalog, so no offer can be matched to its all-reduce")
    sizes = tuple(sorted(rows))
    curve = AllReduce(sizes, tuple(rows[s] for s in sizes), ranks,
                      f"all-reduce across {nodes} nodes measured in {source}")
    return MeasuredAllReduce(source, spec.id, ranks // nodes, nodes, curve)


def predicted_exposed_s(buckets: tuple[tuple[int, float], ...], backward_s: float,
                        ranks: int, network_gbps: float,
                        measured: MeasuredAllReduce | None = None) -> float:
    """The communication a DDP step leaves past its backward pass, its gradient buckets
    all-reduced one by one (predict's model) at the `measured` all-reduce's bus bandwidth
    for each bucket's size, or else at the node's network: `network_gbps` / 8 GB/s of bus
    bandwidth (across nodes a ring's busbw is bounded by each node's network)."""
    from gpuaudit.predict.ddp import simulate
    from gpuaudit.predict.rates import AllReduce

    curve = measured.curve if measured is not None else AllReduce(
        (1,), (network_gbps / 8,), ranks, f"{network_gbps:g} Gb/s per node")
    return simulate(buckets, backward_s * 1e3, ranks, curve).exposed_ms / 1e3
