"""Layer 5: runs kept in a database (SQLite file by default, PostgreSQL for teams)."""

from .store import RunNotFoundError, RunSummary, Store, default_db_url

__all__ = ["RunNotFoundError", "RunSummary", "Store", "default_db_url"]
