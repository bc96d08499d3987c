"""What a machine is: host facts, its GPUs and the links between them.

Every hardware reading is optional. A reading the hardware or driver could not give is None,
and the reason is kept in the owning record's `unavailable` map, keyed by the field's dotted
path (e.g. "pcie.gen_current"), so "unknown" never looks like zero.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from pydantic import Field

from gpuaudit.model.base import Facts
from gpuaudit.model.units import Bytes, Count, GpuIndex

Unavailable = dict[str, str]


class Host(Facts):
    hostname: str
    cpu_model: str | None = None
    # What the host is made of (read from the OS, not NVML's readings, which inspect's check
    # judges): counts are counts.
    cpu_cores_physical: Count | None = None
    cpu_threads: Count | None = None
    cpu_sockets: Count | None = None
    numa_nodes: Count | None = None
    memory_total_bytes: Bytes | None = None
    os_name: str | None = None
    kernel: str | None = None
    architecture: str | None = None
    container: str | None = None  # "docker", "podman", "kubernetes", ... None when bare
    hypervisor: str | None = None  # "kvm", "firecracker", ... None when bare metal or unknown
    python_version: str
    torch_version: str | None = None
    torch_cuda_version: str | None = None
    # Names of the set environment variables that change how CUDA runs (a debugger or profiler
    # hooked in, launches made synchronous); None when not read.
    cuda_env_set: tuple[str, ...] | None = None
    unavailable: Unavailable = Field(default_factory=dict)


class PcieLink(Facts):
    gen_current: int | None = None
    gen_max: int | None = None  # the most the GPU and the slot together allow
    gen_gpu_max: int | None = None  # the most the GPU itself supports
    width_current: int | None = None
    width_max: int | None = None


class Clocks(Facts):
    sm_mhz: int | None = None
    memory_mhz: int | None = None
    graphics_mhz: int | None = None
    sm_max_mhz: int | None = None
    memory_max_mhz: int | None = None
    graphics_max_mhz: int | None = None
    # Application clocks: the target an admin can lower (nvidia-smi -ac) and its default.
    applications_graphics_mhz: int | None = None
    applications_memory_mhz: int | None = None
    default_applications_graphics_mhz: int | None = None
    default_applications_memory_mhz: int | None = None
    # Decoded names of the active clock-event (throttle) reasons, e.g. ["gpu_idle"].
    event_reasons: tuple[str, ...] | None = None
    event_reasons_mask: int | None = None


class Power(Facts):
    draw_w: float | None = None
    limit_w: float | None = None  # enforced limit
    default_limit_w: float | None = None
    min_limit_w: float | None = None
    max_limit_w: float | None = None


class Thermal(Facts):
    gpu_c: int | None = None
    slowdown_c: int | None = None
    shutdown_c: int | None = None
    gpu_max_operating_c: int | None = None
    memory_max_operating_c: int | None = None


class Ecc(Facts):
    enabled: bool | None = None
    pending_enabled: bool | None = None
    volatile_corrected: int | None = None
    volatile_uncorrected: int | None = None
    aggregate_corrected: int | None = None
    aggregate_uncorrected: int | None = None


class RemappedRows(Facts):
    correctable: int | None = None
    uncorrectable: int | None = None
    pending: bool | None = None
    failed: bool | None = None


class RetiredPages(Facts):
    single_bit: int | None = None
    double_bit: int | None = None
    pending: bool | None = None


class NvLink(Facts):
    link: int
    active: bool
    version: int | None = None
    remote_pci_bus_id: str | None = None
    remote_is_switch: bool | None = None  # the far end is an NVSwitch, not a GPU


class GpuProcess(Facts):
    pid: int
    name: str | None = None
    kind: str = "compute"  # "compute" or "graphics"
    used_memory_bytes: int | None = None


class MigInstance(Facts):
    uuid: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    memory_total_bytes: int | None = None
    multiprocessor_count: int | None = None


class Gpu(Facts):
    index: GpuIndex
    name: str
    uuid: str | None = None
    serial: str | None = None
    board_part_number: str | None = None
    pci_bus_id: str | None = None
    pci_device_id: int | None = None  # 16-bit device id (vendor stripped), e.g. 0x2335
    pci_subsystem_id: int | None = None
    architecture: str | None = None
    compute_capability: str | None = None
    multiprocessor_count: int | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    vbios_version: str | None = None
    virtualization_mode: str | None = None  # "none", "passthrough", "vgpu", ...
    mig_enabled: bool | None = None
    mig_pending: bool | None = None
    mig_instances: tuple[MigInstance, ...] = ()
    compute_mode: str | None = None
    persistence_mode: bool | None = None
    utilization_gpu_pct: int | None = None
    utilization_memory_pct: int | None = None
    pcie: PcieLink = PcieLink()
    clocks: Clocks = Clocks()
    power: Power = Power()
    thermal: Thermal = Thermal()
    ecc: Ecc = Ecc()
    remapped_rows: RemappedRows = RemappedRows()
    retired_pages: RetiredPages = RetiredPages()
    nvlinks: tuple[NvLink, ...] = ()
    numa_node: int | None = None
    cpu_affinity: tuple[Count, ...] | None = None  # logical CPUs closest to this GPU
    processes: tuple[GpuProcess, ...] | None = None
    gpm_supported: bool | None = None
    # The NVSwitch fabric as the fabric manager left it ("completed" when ready); None where
    # there is no fabric to report.
    fabric_state: str | None = None
    fabric_ok: bool | None = None  # the fabric manager's status for this GPU is success
    inforom_valid: bool | None = None  # False: NVML found the InfoROM corrupted
    # What the driver says the GPU needs before it can be trusted again ("none", "gpu_reset",
    # "node_reboot", "drain_p2p", "drain_and_reset", ...); None where the driver cannot say.
    recovery_action: str | None = None
    # Why the GPU could not be read at all (lost, fallen off the bus, every query failing);
    # its other readings are then None. None when it answered.
    error: str | None = None
    unavailable: Unavailable = Field(default_factory=dict)

    @property
    def nvlinks_active(self) -> int:
        return sum(1 for link in self.nvlinks if link.active)


class LinkKind(str, Enum):
    """How two GPUs reach each other, best first (nvidia-smi topo -m's legend)."""

    NVLINK = "NV"  # NVLink (count in Link.nvlink_count)
    SAME_BOARD = "BOARD"  # two GPUs on one board
    PCIE_SWITCH = "PIX"  # through at most one PCIe switch
    PCIE_MULTI_SWITCH = "PXB"  # through several PCIe switches, no host bridge
    PCIE_HOST_BRIDGE = "PHB"  # through a PCIe host bridge (the CPU)
    NUMA_NODE = "NODE"  # across host bridges within one NUMA node
    SYSTEM = "SYS"  # across NUMA nodes (the SMP interconnect)


class Link(Facts):
    """A topology edge between two GPUs (a < b)."""

    gpu_a: int
    gpu_b: int
    kind: LinkKind | None
    nvlink_count: int = 0
    p2p_read: bool | None = None  # peer access as NVML reports it
    unavailable: Unavailable = Field(default_factory=dict)

    @property
    def label(self) -> str:
        """The nvidia-smi topo -m style label: NV18, PIX, SYS..."""
        if self.kind is LinkKind.NVLINK:
            return f"NV{self.nvlink_count}"
        return self.kind.value if self.kind else "?"


class Machine(Facts):
    """A snapshot of one machine: what `gpuaudit inspect --json` prints and `--from` reads."""

    captured_at: datetime
    host: Host
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # the newest CUDA the driver supports, e.g. "13.0"
    nvml_version: str | None = None
    gpus: tuple[Gpu, ...] = ()
    links: tuple[Link, ...] = ()
    # Why no GPU could be read (no driver, no NVIDIA GPU); None when NVML answered.
    nvml_error: str | None = None
    # Kernel-log XID events (code → count) when the kernel log was readable.
    xid_counts: dict[int, int] | None = None
    # The same per PCI bus id as the kernel log names the GPU ("0000:18:00"): bus → code → count.
    xid_counts_by_bus: dict[str, dict[int, int]] | None = None
    unavailable: Unavailable = Field(default_factory=dict)

    def link(self, a: int, b: int) -> Link | None:
        lo, hi = min(a, b), max(a, b)
        return next((x for x in self.links if x.gpu_a == lo and x.gpu_b == hi), None)
