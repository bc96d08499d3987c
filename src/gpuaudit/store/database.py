"""Opening the database runs are kept in (a SQLite file by default, a PostgreSQL URL for teams):
where it is, its engine, SQLite's locking, creating or checking gpuaudit's tables, and the
errors of using it as one line each. `store.Store` builds on it."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from pydantic import ValidationError
from sqlalchemy import Engine, create_engine, event, insert, inspect, select, text, update
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import (
    ArgumentError,
    NoSuchModuleError,
    SQLAlchemyError,
)
from sqlalchemy.pool import NullPool

from gpuaudit.errors import BadInputError, GpuauditError
from gpuaudit.model.schema import describe_validation_error

from . import schema
from .opening import (
    configured_db_url,
    default_db_path,
    default_db_url,
    holders,
    is_locked,
    mask_url,
    read_only_why,
    reason,
    sqlite_uri,
)
from .schema import (
    STORE_SCHEMA_VERSION,
    meta,
    runs,
)

# How long SQLite waits for another process's lock before giving up with an error that names
# the file. A writer waits its turn behind other saves (milliseconds) and the monitor's
# compaction steps (well under a second); a reader of a WAL database waits for nobody, so it
# only meets a lock taken outside gpuaudit (a `sqlite3` shell in a transaction, say).
SQLITE_WRITE_TIMEOUT_S = 10.0
SQLITE_READ_TIMEOUT_S = 3.0
PG_CONNECT_TIMEOUT_S = 10
MIN_PREFIX = 4
# Any constant works; it only has to be the same in every gpuaudit process.
_PG_INIT_LOCK = 0x67707561
# Execution option marking a connection that will write (SQLite then takes the lock up front).
_WRITE = "gpuaudit_write"
_D = TypeVar("_D", bound="Database")
_SUMMARY_COLUMNS = [c for c in runs.c if c.name != "document"]

class StoreNotFoundError(BadInputError):
    """Reading a store that is not there: a missing file, or a database without our tables."""


class Database:
    """A gpuaudit database, opened: `Store` adds what it keeps. Open with a SQLAlchemy URL or a
    SQLite file path; use as a context manager or call `close()`. Every problem opening it is
    a one-line BadInputError.

    Opened for writing (the default), it creates a missing SQLite file and the tables, and
    proves it can write before anything is measured. `read_only=True` changes nothing on disk
    or on the server: a missing file or a database without gpuaudit's tables is a
    StoreNotFoundError (except the default location before anything was saved there, which
    reads as empty), and a file on a read-only file system can still be read. Either way, a
    database holding someone else's tables is refused, never added to.
    """

    def __init__(self, url: str | os.PathLike[str] | None = None, *,
                 read_only: bool = False) -> None:
        self.read_only = read_only
        self._path: Path | None = None  # the SQLite file, when it is one
        self._tables: set[str] = set()
        raw = self._locate(url)
        self.url = mask_url(raw)  # what messages show: never the password
        if self._path is not None and read_only and not self._path.exists():
            self._engine: Engine | None = None  # the default location, nothing saved yet
            return
        self._engine = self._connect(self._parse(raw))
        self._writer = self._engine.execution_options(**{_WRITE: True})

    # -- opening -------------------------------------------------------------------------

    def _locate(self, url: str | os.PathLike[str] | None) -> str:
        if url is not None:
            return os.fspath(url)
        if self.read_only and configured_db_url() is None:
            self._path = default_db_path()  # read where it would be, creating nothing
            return f"sqlite:///{self._path}"
        return default_db_url()

    def _parse(self, raw: str) -> URL:
        if not raw.strip():
            raise BadInputError("the database URL is empty")
        if "://" not in raw:  # a bare path names a SQLite file
            return URL.create("sqlite", database=str(Path(raw).expanduser().absolute()))
        try:
            url = make_url(raw)
        except ArgumentError:
            raise self._fail(f"cannot parse database URL {self.url} (expected"
                             " dialect://user:password@host:port/database or a file path)"
                             ) from None
        except ValueError as exc:  # e.g. a port that is not a number
            raise self._fail(f"cannot parse database URL {self.url}", exc) from None
        backend, _, driver = url.drivername.partition("+")
        if backend in ("postgresql", "postgres"):
            # SQLAlchemy's default PostgreSQL driver is psycopg2; gpuaudit ships psycopg 3.
            url = url.set(drivername=f"postgresql+{driver or 'psycopg'}")
        return url

    def _fail(self, what: str, exc: BaseException | None = None) -> BadInputError:
        return BadInputError(f"{what}: {self._reason(exc)}" if exc else what)

    def _reason(self, exc: BaseException) -> str:
        """The driver's one-line account of `exc`; for a locked SQLite file, who holds it and
        how long we waited."""
        if self._path is not None and is_locked(exc):
            held = holders(self._path)
            waited = SQLITE_READ_TIMEOUT_S if self.read_only else SQLITE_WRITE_TIMEOUT_S
            return (f"{self._path} is locked by another process"
                    + (f" ({', '.join(held)})" if held else "")
                    + f"; gave up after {waited:g} s")
        return reason(exc)

    def _connect(self, url: URL) -> Engine:
        backend = url.get_backend_name()
        connect_args: dict[str, Any] = {}
        if backend == "sqlite":
            database = url.database
            if database and database != ":memory:" and not database.startswith("file:"):
                self._path = Path(database)
                if self.read_only:
                    return self._sqlite_reader(self._path)
                self._prepare_sqlite_file(self._path)
        elif backend == "postgresql":
            if "connect_timeout" not in url.query:
                # An unreachable host would otherwise hang for the OS's TCP timeout (minutes).
                connect_args["connect_timeout"] = PG_CONNECT_TIMEOUT_S
            if self.read_only and "options" not in url.query:
                # The server then refuses any write, whatever this code does.
                connect_args["options"] = "-c default_transaction_read_only=on"
        try:
            engine = create_engine(url, pool_pre_ping=backend != "sqlite",
                                   connect_args=connect_args)
        except NoSuchModuleError:
            raise self._fail(f"unknown database type {url.drivername!r} in {self.url}"
                             " (use sqlite:///PATH, a file path or postgresql://...)") from None
        except ImportError as exc:
            hint = " (pip install 'gpuaudit[postgres]')" if exc.name == "psycopg" else ""
            raise self._fail(f"the {url.drivername} driver for {self.url} is not installed"
                             f" (no module {exc.name!r}){hint}") from None
        except (SQLAlchemyError, TypeError, ValueError) as exc:
            raise self._fail(f"bad database URL {self.url}", exc) from None
        if engine.dialect.is_async:
            raise self._fail(f"{url.drivername} in {self.url} is an async driver; use a plain one")
        if backend == "sqlite":
            event.listen(engine, "connect", partial(_sqlite_on_connect, wal=not self.read_only))
            event.listen(engine, "begin", _sqlite_on_begin)
        return self._ready(engine)

    def _ready(self, engine: Engine) -> Engine:
        try:
            if self.read_only:
                self._check_schema(engine)
            else:
                self._init_schema(engine)
        except GpuauditError:
            engine.dispose()
            raise
        except (SQLAlchemyError, OSError, TypeError, ValueError) as exc:
            engine.dispose()
            raise self._fail(f"cannot open database {self.url}", exc) from None
        return engine

    def _prepare_sqlite_file(self, path: Path) -> None:
        """Create the file's directory, so that a fresh path just works; refuse one that
        cannot be written now rather than after the work whose results it is to keep."""
        if path.exists() and not path.is_file():
            raise self._fail(f"cannot open database {self.url}: {path} is not a file")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            # mkdir says "File exists" or "Not a directory"; name the file in the way instead.
            blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
            why = f"{blocker} is not a directory" if blocker else exc.strerror or str(exc)
            raise self._fail(f"cannot create the directory {path.parent} for database"
                             f" {self.url}: {why}") from None
        unwritable = read_only_why(path)
        if unwritable:
            raise self._fail(f"cannot write database {self.url}: {unwritable}")
        if path.exists() and path.stat().st_size:
            # Before the first connection, which switches the file to WAL: that is a write.
            try:
                theirs = _sqlite_tables(sqlite_uri(path))
            except sqlite3.Error:
                return  # not a database, locked...: the connection says so in its words
            self._refuse_foreign_tables(theirs)

    def _sqlite_reader(self, path: Path) -> Engine:
        """A read-only engine on an existing SQLite file: nothing created, nothing written."""
        if not path.exists():
            raise StoreNotFoundError(f"no store at {path}: nothing was ever saved there"
                                     " (a mistyped path?)")
        if not path.is_file():
            raise self._fail(f"cannot open database {self.url}: {path} is not a file")
        uri = sqlite_uri(path)
        try:
            _sqlite_tables(uri)
        except sqlite3.Error as exc:
            # A WAL file whose directory cannot take the -shm index (a read-only file
            # system) only opens as immutable; nobody can be writing it there.
            if "unable to open" not in str(exc) or not read_only_why(path) \
                    or not os.access(path, os.R_OK):
                raise self._fail(f"cannot open database {self.url}", exc) from None
            uri = sqlite_uri(path, immutable=True)
        engine = create_engine(
            "sqlite://", poolclass=NullPool,
            creator=lambda: sqlite3.connect(uri, uri=True, timeout=SQLITE_READ_TIMEOUT_S,
                                            check_same_thread=False))
        event.listen(engine, "connect", partial(_sqlite_on_connect, wal=False))
        event.listen(engine, "begin", _sqlite_on_begin)
        return self._ready(engine)

    def _init_schema(self, engine: Engine) -> None:
        # One locked transaction, so that several processes opening a fresh database at once
        # do not race to create the same tables.
        with engine.execution_options(**{_WRITE: True}).begin() as conn:
            if engine.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_INIT_LOCK})
            stored = self._stored_version(conn)
            self._refuse_foreign(conn)
            self._refuse_newer(stored)
            # Creates only missing tables: every table of a fresh database, and the tables
            # added since an older database's version, which is all upgrading from 1 takes.
            # A version that changes an existing table will need its own step here.
            schema.metadata.create_all(conn)
            if stored is None:
                conn.execute(insert(meta).values(key="store_schema_version",
                                                 value=str(STORE_SCHEMA_VERSION)))
            else:
                # Also for a current store: a write that changes nothing proves this user
                # may write (a read-only role, a standby server) before any work is done.
                conn.execute(update(meta).where(meta.c.key == "store_schema_version")
                             .values(value=str(STORE_SCHEMA_VERSION)))
            self._tables = set(inspect(conn).get_table_names())

    def _check_schema(self, engine: Engine) -> None:
        with engine.connect() as conn:
            stored = self._stored_version(conn)
            self._refuse_foreign(conn)
            if stored is None:
                raise StoreNotFoundError(f"database {self.url} holds no gpuaudit store:"
                                         " nothing was ever saved there")
            self._refuse_newer(stored)
            # An older store, which reading cannot upgrade, may lack the newer tables.
            self._tables = set(inspect(conn).get_table_names())

    def _refuse_foreign(self, conn: Connection) -> None:
        """A database with tables but no gpuaudit_meta belongs to something else: adding ours
        (named runs, findings...) could mix into its tables, or clutter it."""
        self._refuse_foreign_tables(inspect(conn).get_table_names())

    def _refuse_foreign_tables(self, tables: list[str]) -> None:
        theirs = sorted(tables)
        if theirs and meta.name not in theirs:
            shown = ", ".join(theirs[:4]) + (", ..." if len(theirs) > 4 else "")
            raise BadInputError(f"database {self.url} is not a gpuaudit store (it holds other"
                                f" tables: {shown}); give gpuaudit a file or database of its"
                                " own")

    def _refuse_newer(self, stored: int | None) -> None:
        if stored is not None and stored > STORE_SCHEMA_VERSION:
            raise BadInputError(
                f"database {self.url} has store schema {stored}; this gpuaudit reads up to"
                f" {STORE_SCHEMA_VERSION} (upgrade gpuaudit)")

    def _stored_version(self, conn: Connection) -> int | None:
        if not inspect(conn).has_table(meta.name):
            return None
        stored = conn.scalar(select(meta.c.value).where(meta.c.key == "store_schema_version"))
        if stored is None:
            return None
        try:
            return int(stored)
        except ValueError:
            raise BadInputError(f"database {self.url} has an unreadable store schema version"
                                f" {stored!r}") from None

    # -- use -----------------------------------------------------------------------------

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """A database failure after opening (server gone, disk full) as a one-line error; a
        row that is not what gpuaudit wrote (text in a number's column, a reading no GPU
        has: the records' checks, or the driver's conversion, refuse it) as bad input."""
        try:
            yield
        except SQLAlchemyError as exc:
            raise GpuauditError(
                f"database error {action} in {self.url}: {self._reason(exc)}"
            ) from None
        except ValidationError as exc:
            raise BadInputError(f"{action} in {self.url}: a damaged row: "
                                f"{describe_validation_error(exc)}") from None
        except (ValueError, TypeError) as exc:
            raise BadInputError(f"{action} in {self.url}: a damaged row: "
                                f"{' '.join(str(exc).split())[:200]}") from None

    def _writing(self) -> Engine:
        if self.read_only:
            raise GpuauditError(f"store {self.url} was opened read-only")
        return self._writer

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()

    def __enter__(self: _D) -> _D:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


def _sqlite_tables(uri: str) -> list[str]:
    """The tables of the database at a read-only URI; fails as SQLite cannot read it so."""
    db = sqlite3.connect(uri, uri=True, timeout=SQLITE_READ_TIMEOUT_S)
    try:
        return [name for (name,) in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'"
            " AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")]
    finally:
        db.close()


def _sqlite_on_connect(dbapi_connection: Any, _record: Any, *, wal: bool) -> None:
    # sqlite3 would emit its own deferred BEGIN; _sqlite_on_begin takes over.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    timeout_s = SQLITE_WRITE_TIMEOUT_S if wal else SQLITE_READ_TIMEOUT_S
    try:
        # busy_timeout first: switching to WAL itself needs a lock other processes may hold.
        cursor.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
        if wal:
            # WAL: readers do not block the writer, and writers from several processes queue.
            _switch_to_wal(cursor)
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _switch_to_wal(cursor: Any) -> None:
    """Switching a fresh file to WAL while other processes open it can answer "database is
    locked" without waiting on busy_timeout; retry for as long as busy_timeout would wait."""
    deadline = time.monotonic() + SQLITE_WRITE_TIMEOUT_S
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _sqlite_on_begin(conn: Connection) -> None:
    # A writer takes the write lock at BEGIN, where busy_timeout makes it wait its turn. A
    # deferred transaction that upgrades to writing later fails at once with "database is
    # locked" when another process wrote in between.
    write = conn.get_execution_options().get(_WRITE, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
