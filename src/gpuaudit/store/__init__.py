"""Layer 5: runs and telemetry history kept in a database (SQLite file by default, PostgreSQL
for teams)."""

from .store import RunNotFoundError, RunSummary, Store, default_db_url
from .telemetry import HISTORY_RESOLUTIONS, RAW_RETENTION, ROLLUP_RETENTION, parse_time

__all__ = [
    "HISTORY_RESOLUTIONS",
    "RAW_RETENTION",
    "ROLLUP_RETENTION",
    "RunNotFoundError",
    "RunSummary",
    "Store",
    "default_db_url",
    "parse_time",
]
