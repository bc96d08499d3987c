"""Telemetry: what the monitor reads off every GPU at each tick.

Every reading may be missing (None): the GPU or driver does not support it, or this is the first
tick of a rate that needs two. The reason is kept in `unavailable`, keyed by the field name.
Counters (`energy_j`, `nvlink_*_bytes`, ECC counts) are totals since the driver loaded; rates
are per second over the last interval.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from .base import SCHEMA_VERSION, Record
from .machine import Unavailable
from .units import (
    Bytes,
    BytesPerS,
    Celsius,
    Count,
    GpuIndex,
    Interval,
    Joules,
    Mhz,
    Moment,
    PcieGen,
    PcieWidth,
    Pct,
    Pid,
    Watts,
)


class ProcessSample(Record):
    pid: Pid
    user: str | None = None
    command: str | None = None
    used_memory_bytes: Bytes | None = None
    # its share of the GPU's SM time over the last interval (NVML's per-process samples)
    sm_util_pct: Pct | None = None


class XidEvent(Record):
    """One XID error NVML reported (a driver-detected GPU fault; the code says which)."""

    gpu: GpuIndex
    code: Count
    time: Moment


class GpuSample(Record):
    index: GpuIndex
    uuid: str | None = None
    name: str | None = None
    # A GPU that could not be read at all this tick (fell off the bus, driver error): why.
    # The other fields are then None; the other GPUs are still sampled.
    error: str | None = None

    utilization_gpu_pct: Pct | None = None
    utilization_memory_pct: Pct | None = None  # NVML's "memory": time the DRAM was busy
    memory_used_bytes: Bytes | None = None
    memory_total_bytes: Bytes | None = None
    power_w: Watts | None = None
    power_limit_w: Watts | None = None
    energy_j: Joules | None = None
    temperature_gpu_c: Celsius | None = None
    temperature_memory_c: Celsius | None = None
    sm_clock_mhz: Mhz | None = None
    memory_clock_mhz: Mhz | None = None
    # Why the clocks are below their maximum right now (nvmlClocksEventReason names).
    clock_event_reasons: tuple[str, ...] | None = None
    pcie_link_gen: PcieGen | None = None
    pcie_link_gen_max: PcieGen | None = None  # the most this GPU and its slot can do
    pcie_link_width: PcieWidth | None = None
    pcie_link_width_max: PcieWidth | None = None
    pcie_rx_bytes_per_s: BytesPerS | None = None
    pcie_tx_bytes_per_s: BytesPerS | None = None
    nvlink_rx_bytes: Bytes | None = None
    nvlink_tx_bytes: Bytes | None = None
    ecc_corrected_volatile: Count | None = None
    ecc_uncorrected_volatile: Count | None = None
    ecc_uncorrected_aggregate: Count | None = None
    remapped_rows_correctable: Count | None = None
    remapped_rows_uncorrectable: Count | None = None
    remapping_pending: bool | None = None
    remapping_failed: bool | None = None

    # NVML GPM (Hopper and newer), averaged over the interval since the previous tick.
    sm_activity_pct: Pct | None = None
    sm_occupancy_pct: Pct | None = None
    tensor_activity_pct: Pct | None = None
    dram_bandwidth_util_pct: Pct | None = None
    fp64_activity_pct: Pct | None = None
    fp32_activity_pct: Pct | None = None
    fp16_activity_pct: Pct | None = None
    gpm_pcie_rx_bytes_per_s: BytesPerS | None = None
    gpm_pcie_tx_bytes_per_s: BytesPerS | None = None
    gpm_nvlink_rx_bytes_per_s: BytesPerS | None = None
    gpm_nvlink_tx_bytes_per_s: BytesPerS | None = None

    processes: tuple[ProcessSample, ...] = ()
    xid_events: tuple[XidEvent, ...] = ()
    unavailable: Unavailable = Field(default_factory=dict)

    @property
    def memory_used_fraction(self) -> float | None:
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return self.memory_used_bytes / self.memory_total_bytes

    @property
    def activity_pct(self) -> float | None:
        """How busy the SMs were: GPM's SM activity where there is one, else NVML's coarser
        utilization (the share of time any kernel ran, however few SMs it used)."""
        return self.sm_activity_pct if self.sm_activity_pct is not None \
            else self.utilization_gpu_pct


class Sample(Record):
    """One tick of the monitor: every GPU of one host at one moment."""

    schema_version: int = SCHEMA_VERSION
    time: Moment
    hostname: str
    interval_s: Interval
    gpus: tuple[GpuSample, ...] = ()


class Alert(Record):
    """One alert of a rule, for one label set (Prometheus's model: pending until its
    condition has held for the rule's `for:` duration, then firing until it stops holding)."""

    name: str
    state: str  # "pending" or "firing"
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    value: float = Field(allow_inf_nan=True)  # PromQL's answer: NaN and ±inf are values there
    active_since: datetime
    fired_at: datetime | None = None
