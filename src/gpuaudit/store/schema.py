"""The store's tables. The Run document is the source of truth; the other columns index it."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    Column,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

# Bumped when these tables change shape; kept in gpuaudit_meta so an older gpuaudit
# refuses a database written by a newer one instead of misreading it.
STORE_SCHEMA_VERSION = 1


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
