"""What feeds the GPUs: the storage under a path and the network interfaces, as read from the
host (sysfs, /proc/self/mountinfo, ibv_devinfo). Not part of `Machine`: a storage target is a
property of a path the user names, and the bench records these facts beside its figures."""

from __future__ import annotations

from pydantic import Field

from gpuaudit.model.base import Record

Unavailable = dict[str, str]


class StorageTarget(Record):
    """The file system a path lives on and the block device under it (when there is one).

    A network file system or a FUSE mount has no block device: `device` is None and
    `unavailable["device"]` says why."""

    path: str
    mount_point: str
    fs_type: str  # "ext4", "xfs", "nfs4", "fuse.s3fs", "tmpfs", ...
    mount_source: str  # "/dev/nvme0n1p1", "server:/export", "s3fs", ...
    network_fs: bool  # nfs, cifs, ceph, lustre, gpfs, a FUSE bucket mount, ...
    read_only: bool
    free_bytes: int
    # The whole disk under the partition or the device-mapper volume (e.g. "nvme0n1").
    device: str | None = None
    device_model: str | None = None
    transport: str | None = None  # "nvme", "virtio", "scsi", "md", "dm", ...
    rotational: bool | None = None
    logical_block_bytes: int | None = None
    device_size_bytes: int | None = None
    unavailable: Unavailable = Field(default_factory=dict)


class RdmaPort(Record):
    """One port of an RDMA device (/sys/class/infiniband/DEV/ports/N)."""

    device: str  # "mlx5_0"
    port: int
    state: str | None = None  # "ACTIVE", "DOWN", ...
    rate_gbps: float | None = None  # Gbit/s, from "400 Gb/sec (4X NDR)"
    link_layer: str | None = None  # "InfiniBand", "Ethernet"
    netdevs: tuple[str, ...] = ()  # the network interfaces on this device
    firmware: str | None = None


class Nic(Record):
    """A network interface (/sys/class/net/IF)."""

    name: str
    kind: str  # "physical", "virtual", "loopback"
    operstate: str | None = None  # "up", "down", "unknown"
    speed_mbps: int | None = None  # as the driver reports it; None: it does not say
    mtu: int | None = None
    driver: str | None = None
    pci_address: str | None = None
    numa_node: int | None = None
    rdma_devices: tuple[str, ...] = ()
    unavailable: Unavailable = Field(default_factory=dict)
