"""Layer 5: runs and telemetry history kept in a database (SQLite file by default, PostgreSQL
for teams)."""

from .database import StoreNotFoundError
from .keep import UnsavedRunError, check_store, keep_run, save_or_keep
from .opening import default_db_url, mask_secrets
from .replay import REPLAY_HOST_PREFIX, ReplayHistory, is_replay_host, replay_hostname
from .store import RunNotFoundError, RunSummary, Store
from .telemetry import HISTORY_RESOLUTIONS, RAW_RETENTION, ROLLUP_RETENTION, parse_time

__all__ = [
    "HISTORY_RESOLUTIONS",
    "RAW_RETENTION",
    "REPLAY_HOST_PREFIX",
    "ROLLUP_RETENTION",
    "ReplayHistory",
    "RunNotFoundError",
    "RunSummary",
    "Store",
    "StoreNotFoundError",
    "UnsavedRunError",
    "check_store",
    "default_db_url",
    "is_replay_host",
    "keep_run",
    "mask_secrets",
    "parse_time",
    "replay_hostname",
    "save_or_keep",
]
