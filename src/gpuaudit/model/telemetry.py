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


class ProcessSample(Record):
    pid: int
    user: str | None = None
    command: str | None = None
    used_memory_bytes: int | None = None
    # its share of the GPU's SM time over the last interval (NVML's per-process samples)
    sm_util_pct: float | None = None


class XidEvent(Record):
    """One XID error NVML reported (a driver-detected GPU fault; the code says which)."""

    gpu: int
    code: int
    time: datetime


class GpuSample(Record):
    index: int
    uuid: str | None = None
    name: str | None = None
    # A GPU that could not be read at all this tick (fell off the bus, driver error): why.
    # The other fields are then None; the other GPUs are still sampled.
    error: str | None = None

    utilization_gpu_pct: float | None = None
    utilization_memory_pct: float | None = None  # NVML's "memory": time the DRAM was busy
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    energy_j: float | None = None
    temperature_gpu_c: float | None = None
    temperature_memory_c: float | None = None
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    # Why the clocks are below their maximum right now (nvmlClocksEventReason names).
    clock_event_reasons: tuple[str, ...] | None = None
    pcie_link_gen: int | None = None
    pcie_link_gen_max: int | None = None  # the most this GPU and its slot can do
    pcie_link_width: int | None = None
    pcie_link_width_max: int | None = None
    pcie_rx_bytes_per_s: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    nvlink_rx_bytes: int | None = None
    nvlink_tx_bytes: int | None = None
    ecc_corrected_volatile: int | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapping_pending: bool | None = None
    remapping_failed: bool | None = None

    # NVML GPM (Hopper and newer), averaged over the interval since the previous tick.
    sm_activity_pct: float | None = None
    sm_occupancy_pct: float | None = None
    tensor_activity_pct: float | None = None
    dram_bandwidth_util_pct: float | None = None
    fp64_activity_pct: float | None = None
    fp32_activity_pct: float | None = None
    fp16_activity_pct: float | None = None
    gpm_pcie_rx_bytes_per_s: float | None = None
    gpm_pcie_tx_bytes_per_s: float | None = None
    gpm_nvlink_rx_bytes_per_s: float | None = None
    gpm_nvlink_tx_bytes_per_s: float | None = None

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
    time: datetime
    hostname: str
    interval_s: float
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
