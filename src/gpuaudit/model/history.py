"""Telemetry history as the store gives it back: raw samples and 1-minute rollups alike.

A raw point is one GpuSample as the monitor read it (`samples` = 1). A 1-minute point is the
minute starting at `time`: readings are means over the samples that had them, `energy_j` is the
counter's last reading in the minute, the `*_max_*` fields the highest reading. Integer readings
(bytes, MHz) are floats here because a mean of them is.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from .base import Record
from .units import Celsius, Count, Figure, GpuIndex, Joules, Pct, Watts


class Resolution(str, Enum):
    RAW = "raw"
    MINUTE = "1m"


class HistoryPoint(Record):
    time: datetime  # raw: when sampled; 1m: the start of the minute
    hostname: str
    gpu: GpuIndex
    resolution: Resolution
    samples: Count  # raw rows behind this point, error rows included
    error_samples: Count  # of those, rows where the GPU could not be read
    uuid: str | None = None
    # raw: why the GPU could not be read; 1m: the last such reason in the minute.
    error: str | None = None
    # raw: nvmlClocksEventReason names at that tick (() none, None unknown); 1m: every reason
    # seen during the minute, sorted.
    clock_event_reasons: tuple[str, ...] | None = None

    utilization_gpu_pct: Pct | None = None
    utilization_memory_pct: Pct | None = None
    memory_used_bytes: Figure | None = None
    memory_total_bytes: Figure | None = None
    power_w: Watts | None = None
    power_max_w: Watts | None = None
    energy_j: Joules | None = None  # a counter since the driver loaded, never averaged
    temperature_gpu_c: Celsius | None = None
    temperature_gpu_max_c: Celsius | None = None
    temperature_memory_c: Celsius | None = None
    temperature_memory_max_c: Celsius | None = None
    sm_clock_mhz: Figure | None = None
    memory_clock_mhz: Figure | None = None
    pcie_rx_bytes_per_s: Figure | None = None
    pcie_tx_bytes_per_s: Figure | None = None
    sm_activity_pct: Pct | None = None
    sm_occupancy_pct: Pct | None = None
    tensor_activity_pct: Pct | None = None
    dram_bandwidth_util_pct: Pct | None = None


class Compaction(Record):
    """What one `Store.compact` did. Raw rows of every minute before `raw_cutoff` were rolled
    into 1-minute rollups (or, before `rollup_cutoff`, dropped); rollups before `rollup_cutoff`
    were deleted."""

    raw_cutoff: datetime
    rollup_cutoff: datetime
    raw_rows_rolled_up: int
    rollup_rows_written: int  # new minutes, plus existing minutes that late rows were merged into
    raw_rows_expired: int  # past both retentions: deleted without a rollup
    rollup_rows_expired: int
