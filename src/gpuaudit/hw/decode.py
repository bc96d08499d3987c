"""NVML's enumerations and bit fields as names (values from nvml.h)."""

from __future__ import annotations

from gpuaudit.model import LinkKind

# nvmlClocksEventReason* bits.
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}

VIRTUALIZATION_MODES = {
    0: "none",
    1: "passthrough",
    2: "vgpu",
    3: "host_vgpu",
    4: "host_vsga",
}

COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}

ARCHITECTURES = {
    2: "kepler",
    3: "maxwell",
    4: "pascal",
    5: "volta",
    6: "turing",
    7: "ampere",
    8: "ada",
    9: "hopper",
    10: "blackwell",
}

# nvmlDeviceGetTopologyCommonAncestor levels.
TOPOLOGY_LEVELS = {
    0: LinkKind.SAME_BOARD,
    10: LinkKind.PCIE_SWITCH,
    20: LinkKind.PCIE_MULTI_SWITCH,
    30: LinkKind.PCIE_HOST_BRIDGE,
    40: LinkKind.NUMA_NODE,
    50: LinkKind.SYSTEM,
}

# nvmlGpuFabricState_t: the NVSwitch fabric's training state, as the fabric manager sets it.
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}

# NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (R550+): what the driver says the GPU needs now.
FI_GPU_RECOVERY_ACTION = 230
RECOVERY_ACTIONS = {0: "none", 1: "gpu_reset", 2: "node_reboot", 3: "drain_p2p",
                    4: "drain_and_reset", 5: "recover_imex_domain", 6: "bus_reset",
                    7: "system_reboot"}

# nvmlDeviceGetNvLinkRemoteDeviceType.
NVLINK_REMOTE_GPU = 0
NVLINK_REMOTE_SWITCH = 2
NVLINK_MAX_LINKS = 18

# Argument values.
CLOCK_GRAPHICS, CLOCK_SM, CLOCK_MEM = 0, 1, 2
TEMP_SENSOR_GPU = 0
TEMP_THRESHOLD_SHUTDOWN, TEMP_THRESHOLD_SLOWDOWN = 0, 1
TEMP_THRESHOLD_MEM_MAX, TEMP_THRESHOLD_GPU_MAX = 2, 3
ECC_CORRECTED, ECC_UNCORRECTED = 0, 1
ECC_VOLATILE, ECC_AGGREGATE = 0, 1
RETIRED_MULTIPLE_SBE, RETIRED_DBE = 0, 1
P2P_CAPS_READ, P2P_CAPS_NVLINK = 0, 3
P2P_STATUS_OK = 0
# 64-bit words asked of nvmlDeviceGetCpuAffinity: room for 1024 logical CPUs.
CPU_SET_WORDS = 16


def clock_event_names(mask: int) -> tuple[str, ...]:
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_REASONS)
    if unknown:
        names.append(f"unknown_{unknown:#x}")
    return tuple(names)


def cpu_list(words: list[int]) -> tuple[int, ...]:
    """CPU indices from NVML's affinity bitmask (64 CPUs per word, lowest word first)."""
    return tuple(w * 64 + bit for w, word in enumerate(words)
                 for bit in range(64) if word >> bit & 1)


def normalise_bus_id(bus_id: str) -> str:
    """NVML gives '00000000:18:00.0'; Linux sysfs and nvidia-smi use '0000:18:00.0'."""
    bus_id = bus_id.strip().lower()
    domain, _, rest = bus_id.partition(":")
    return f"{domain[-4:]}:{rest}" if rest else bus_id


def cuda_version(v: int) -> str:
    """nvmlSystemGetCudaDriverVersion's 13000 → '13.0'."""
    return f"{v // 1000}.{v % 1000 // 10}"
