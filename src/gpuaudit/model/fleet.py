"""Which node of a fleet a run was measured on."""

from __future__ import annotations

from gpuaudit.model.base import Record


class NodeIdentity(Record):
    """A run's node, as the fleet knows it: the host name, its Ray node id and address, and
    the GPUs' UUIDs and serial numbers (which stay with the hardware when a host is renamed or
    Ray restarts). `fleet_id` groups the runs of one `gpuaudit fleet run`.

    `node_name` is the name the fleet knows the node by, which the store and `fleet report`
    group a node's audits under: the Kubernetes node name (GPUAUDIT_NODE_NAME, from the
    downward API) where there is one, else the host name, suffixed with the Ray node id when
    another node of the same fleet run has the same host name (two raylets on one host)."""

    hostname: str
    node_name: str | None = None
    ray_node_id: str | None = None
    node_ip: str | None = None
    fleet_id: str | None = None
    gpu_uuids: tuple[str | None, ...] = ()
    gpu_serials: tuple[str | None, ...] = ()
