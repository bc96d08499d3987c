"""Which node of a fleet a run was measured on."""

from __future__ import annotations

from gpuaudit.model.base import Record


class NodeIdentity(Record):
    """A run's node, as the fleet knows it: the host name, its Ray node id and address, and
    the GPUs' UUIDs and serial numbers (which stay with the hardware when a host is renamed or
    Ray restarts). `fleet_id` groups the runs of one `gpuaudit fleet run`."""

    hostname: str
    ray_node_id: str | None = None
    node_ip: str | None = None
    fleet_id: str | None = None
    gpu_uuids: tuple[str | None, ...] = ()
    gpu_serials: tuple[str | None, ...] = ()
