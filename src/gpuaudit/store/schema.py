"""The store's tables. The Run document is the source of truth; the other columns index it."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

# Bumped when these tables change shape; kept in gpuaudit_meta so an older gpuaudit
# refuses a database written by a newer one instead of misreading it. An older database is
# upgraded in place when opened (Store._init_schema).
#   1: runs, findings, measurements
#   2: + telemetry_raw, telemetry_1m
#   3: + run_nodes, run_gpus, fleet_runs (the fleet report's index; runs saved before have none)
STORE_SCHEMA_VERSION = 3


class UtcDateTime(TypeDecorator[datetime]):
    """Timestamps stored as UTC and read back timezone-aware.

    SQLite has no timezone type, so everything is normalised to UTC on the way in (which also
    keeps its text timestamps sortable) and tagged UTC on the way out. A naive time is taken as
    UTC: gpuaudit never produces one, and guessing the local zone would differ between hosts.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


metadata = MetaData()

meta = Table(
    "gpuaudit_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", String(255), nullable=False),
)

runs = Table(
    "runs",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("schema_version", Integer, nullable=False),
    Column("kind", String(64), nullable=False, index=True),
    Column("status", String(32), nullable=False),
    Column("started_at", UtcDateTime, nullable=False, index=True),
    Column("finished_at", UtcDateTime),
    Column("hostname", String(255)),
    Column("gpu_summary", Text),
    Column("verdict", String(8), nullable=False),
    Column("tool_version", String(64), nullable=False),
    Column("document", Text, nullable=False),
)

findings = Table(
    "findings",
    metadata,
    Column("pk", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(64), ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("code", String(128), nullable=False),
    Column("severity", String(8), nullable=False),
    Column("gpu_index", Integer),
    Column("message", Text, nullable=False),
    Index("ix_findings_run_id", "run_id"),
    Index("ix_findings_code", "code"),
)

measurements = Table(
    "measurements",
    metadata,
    Column("pk", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(64), ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("suite", String(128), nullable=False),
    Column("name", String(255), nullable=False),
    Column("unit", String(64), nullable=False),
    Column("value", Double),  # None: the benchmark was skipped (the reason is in the document)
    Column("gpu_index", Integer),
    Index("ix_measurements_run_id", "run_id"),
    Index("ix_measurements_suite_name", "suite", "name"),
)

# -- telemetry history (schema 2) -----------------------------------------------------------

# The GpuSample readings kept as columns, with their column types. Rollups keep the mean of
# each (as a Double: a mean of integers is not one), except energy_j, a counter, whose last
# reading in the minute is kept instead.
TELEMETRY_READINGS: dict[str, Any] = {
    "utilization_gpu_pct": Double,
    "utilization_memory_pct": Double,
    "memory_used_bytes": BigInteger,
    "memory_total_bytes": BigInteger,
    "power_w": Double,
    "energy_j": Double,
    "temperature_gpu_c": Double,
    "temperature_memory_c": Double,
    "sm_clock_mhz": Integer,
    "memory_clock_mhz": Integer,
    "pcie_rx_bytes_per_s": Double,
    "pcie_tx_bytes_per_s": Double,
    "sm_activity_pct": Double,
    "sm_occupancy_pct": Double,
    "tensor_activity_pct": Double,
    "dram_bandwidth_util_pct": Double,
}
MEAN_READINGS = tuple(name for name in TELEMETRY_READINGS if name != "energy_j")
# Rollup column -> the raw reading whose maximum over the minute it keeps.
MAX_READINGS = {
    "power_max_w": "power_w",
    "temperature_gpu_max_c": "temperature_gpu_c",
    "temperature_memory_max_c": "temperature_memory_c",
}

# One row per GPU per tick. The primary key is also the index every history query and the
# compactor's range scans use; it makes saving the same tick twice a no-op. The extra index on
# time serves compaction and retention, which cut across hosts and GPUs.
telemetry_raw = Table(
    "telemetry_raw",
    metadata,
    Column("time", UtcDateTime, nullable=False),
    Column("hostname", String(255), nullable=False),
    Column("gpu", Integer, nullable=False),
    Column("uuid", String(96)),
    *(Column(name, kind) for name, kind in TELEMETRY_READINGS.items()),
    # Comma-joined nvmlClocksEventReason names; '' means none, NULL unknown.
    Column("clock_event_reasons", Text),
    Column("error", Text),  # set when the GPU could not be read this tick
    PrimaryKeyConstraint("hostname", "gpu", "time", name="pk_telemetry_raw"),
    Index("ix_telemetry_raw_time", "time"),
)

# One row per GPU per minute (`time` is the minute's start), rolled from raw rows.
telemetry_1m = Table(
    "telemetry_1m",
    metadata,
    Column("time", UtcDateTime, nullable=False),
    Column("hostname", String(255), nullable=False),
    Column("gpu", Integer, nullable=False),
    Column("uuid", String(96)),
    Column("samples", Integer, nullable=False),
    Column("error_samples", Integer, nullable=False),
    *(Column(name, Double) for name in MEAN_READINGS),
    Column("energy_j", Double),
    *(Column(name, Double) for name in MAX_READINGS),
    Column("clock_event_reasons", Text),  # every reason seen in the minute, sorted
    Column("error", Text),  # the minute's last error
    PrimaryKeyConstraint("hostname", "gpu", "time", name="pk_telemetry_1m"),
    Index("ix_telemetry_1m_time", "time"),
)

# -- the fleet's index (schema 3) -------------------------------------------------------------

# One row per run that has a machine: which node it was measured on. The fleet report picks
# each node's latest audits from here without reading the documents.
run_nodes = Table(
    "run_nodes",
    metadata,
    Column("run_id", String(64), ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("hostname", String(255), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("started_at", UtcDateTime, nullable=False),
    Column("ray_node_id", String(64)),
    Column("node_ip", String(64)),
    Column("fleet_id", String(64)),
    Column("driver_version", String(64)),
    Column("gpu_summary", Text),
    Index("ix_run_nodes_host_time", "hostname", "started_at"),
    Index("ix_run_nodes_fleet_id", "fleet_id"),
)

# One row per GPU of such a run: the model each per-GPU figure is compared within, and the
# identity that follows the hardware (UUID, serial).
run_gpus = Table(
    "run_gpus",
    metadata,
    Column("run_id", String(64), ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("gpu_index", Integer, nullable=False),
    Column("name", String(255), nullable=False),
    Column("uuid", String(96)),
    Column("serial", String(96)),
    Column("vbios_version", String(64)),
    PrimaryKeyConstraint("run_id", "gpu_index", name="pk_run_gpus"),
)

# One row per `gpuaudit fleet run`: which nodes were asked, which failed and why, and the
# figures measured across nodes. The document is the FleetRun record as JSON.
fleet_runs = Table(
    "fleet_runs",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("started_at", UtcDateTime, nullable=False, index=True),
    Column("finished_at", UtcDateTime),
    Column("document", Text, nullable=False),
)
