"""Runs kept in a database: a SQLite file by default, a PostgreSQL URL for teams."""

from __future__ import annotations

import os
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Engine, create_engine, event, func, insert, inspect, select, text, update
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import (
    ArgumentError,
    IntegrityError,
    NoSuchModuleError,
    SQLAlchemyError,
)
from sqlalchemy.pool import NullPool

from gpuaudit.errors import BadInputError, GpuauditError
from gpuaudit.model import Machine, Record, Run, RunStatus, Sample, Severity, load_run, utc_now
from gpuaudit.model.history import Compaction, HistoryPoint
from gpuaudit.model.schema import describe_validation_error

from . import fleet, schema, telemetry
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
    findings,
    fleet_runs,
    measurements,
    meta,
    run_gpus,
    run_nodes,
    runs,
)
from .telemetry import RAW_RETENTION, ROLLUP_RETENTION, HistoryResolution

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
_SUMMARY_COLUMNS = [c for c in runs.c if c.name != "document"]


class RunNotFoundError(BadInputError):
    """No stored run has that id (or id prefix)."""


class StoreNotFoundError(BadInputError):
    """Reading a store that is not there: a missing file, or a database without our tables."""


class RunSummary(Record):
    """One line of `list_runs`: the indexed columns of a stored run, without its document."""

    id: str
    schema_version: int
    kind: str
    status: RunStatus
    started_at: datetime
    finished_at: datetime | None
    hostname: str | None
    gpu_summary: str | None  # "2× NVIDIA H200", "no GPU"; None when the run has no machine
    verdict: Severity
    tool_version: str
    findings_fail: int
    findings_warn: int


def gpu_summary(machine: Machine | None) -> str | None:
    if machine is None:
        return None
    if not machine.gpus:
        return "no GPU"
    counts = Counter(gpu.name for gpu in machine.gpus)  # keeps first-seen order
    return ", ".join(f"{n}× {name}" for name, n in counts.items())


class Store:
    """A database of runs. Open with a SQLAlchemy URL or a SQLite file path; use as a context
    manager or call `close()`. Every problem opening it is a one-line BadInputError.

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
        why = read_only_why(path)
        if why:
            raise self._fail(f"cannot write database {self.url}: {why}")
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

    def save(self, run: Run) -> str:
        """Store `run` with its findings and measurements, all or nothing; returns its id."""
        row = {
            "id": run.id,
            "schema_version": run.schema_version,
            "kind": run.kind,
            "status": run.status.value,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "hostname": run.machine.host.hostname if run.machine else None,
            "gpu_summary": gpu_summary(run.machine),
            "verdict": run.verdict.value,
            "tool_version": run.tool_version,
            "document": run.model_dump_json(),
        }
        finding_rows = [
            {"run_id": run.id, "code": f.code, "severity": f.severity.value,
             "gpu_index": f.gpu_index, "message": f.message}
            for f in run.findings
        ]
        measurement_rows = [
            {"run_id": run.id, "suite": m.suite, "name": m.name, "unit": m.unit,
             "value": m.value, "gpu_index": m.gpu_index}
            for m in run.measurements
        ]
        with self._errors(f"saving run {run.id}"), self._writing().begin() as conn:
            try:
                conn.execute(insert(runs).values(row))
            except IntegrityError:
                # Checked by the insert itself, not a prior SELECT: two processes saving the
                # same id at once must not both succeed.
                raise GpuauditError(f"run {run.id} already stored in {self.url}") from None
            if finding_rows:
                conn.execute(insert(findings), finding_rows)
            if measurement_rows:
                conn.execute(insert(measurements), measurement_rows)
            # An upgraded store has these tables; a store opened by an older schema's code
            # path (tests of upgrading) may not.
            node_row, gpu_rows = (fleet.index_rows(run) if run_nodes.name in self._tables
                                  else (None, []))
            if node_row is not None:
                conn.execute(insert(run_nodes).values({**node_row,
                                                       "gpu_summary": row["gpu_summary"]}))
            if gpu_rows:
                conn.execute(insert(run_gpus), gpu_rows)
        return run.id

    # -- fleet ---------------------------------------------------------------------------

    def save_fleet_run(self, fleet_id: str, started_at: datetime, finished_at: datetime | None,
                       document: str) -> None:
        """Keep one `fleet run`'s outcome (the FleetRun document); saving it again replaces
        it, so the driver can save as it goes and once more at the end."""
        with self._errors(f"saving fleet run {fleet_id}"), self._writing().begin() as conn:
            conn.execute(fleet_runs.delete().where(fleet_runs.c.id == fleet_id))
            conn.execute(insert(fleet_runs).values(id=fleet_id, started_at=started_at,
                                                   finished_at=finished_at, document=document))

    def fleet_rows(self, since: datetime | None = None) -> fleet.FleetRows:
        """What `fleet report` judges: each host's latest audit since `since` and the one
        before it, with figures, GPUs and findings (see store.fleet.fleet_rows)."""
        if self._engine is None or run_nodes.name not in self._tables:
            return fleet.FleetRows([], [], [], [], [], [])  # nothing saved, or an older store
        with self._errors("reading the fleet"), self._engine.connect() as conn:
            return fleet.fleet_rows(conn, since=since,
                                    has_fleet_runs=fleet_runs.name in self._tables)

    def fleet_run_document(self, fleet_id: str) -> str | None:
        """The stored document of the `fleet run` with this id (a FleetRun's JSON), or None."""
        if self._engine is None or fleet_runs.name not in self._tables:
            return None
        key = fleet_id.strip()
        with self._errors(f"reading fleet run {key}"), self._engine.connect() as conn:
            return conn.scalar(select(fleet_runs.c.document).where(fleet_runs.c.id == key))

    def get(self, run_id: str) -> Run:
        """The run with this id, or the only one whose id starts with it (≥4 characters)."""
        key = run_id.strip()
        if self._engine is None:
            raise RunNotFoundError(f"no run {key!r}: nothing is stored yet in {self.url}")
        with self._errors(f"reading run {key}"), self._engine.connect() as conn:
            document = conn.scalar(select(runs.c.document).where(runs.c.id == key))
            if document is None:
                found = self._by_prefix(conn, key)
                document = conn.scalar(select(runs.c.document).where(runs.c.id == found))
        if document is None:  # deleted between the two reads
            raise RunNotFoundError(f"no run {key!r} in {self.url}")
        return load_run(document, origin=f"stored run {key}")

    def _by_prefix(self, conn: Connection, key: str) -> str:
        if len(key) < MIN_PREFIX:
            raise RunNotFoundError(f"no run {key!r} in {self.url}"
                                   f" (an id prefix needs at least {MIN_PREFIX} characters)")
        ids = conn.scalars(
            select(runs.c.id).where(runs.c.id.startswith(key, autoescape=True))
            .order_by(runs.c.started_at.desc(), runs.c.id).limit(6)
        ).all()
        if not ids:
            raise RunNotFoundError(f"no run {key!r} in {self.url}")
        if len(ids) > 1:
            shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
            raise BadInputError(f"run id prefix {key!r} is ambiguous: {shown}")
        return ids[0]

    def list_runs(self, limit: int | None = 50, kind: str | None = None, *,
                  host: str | None = None, gpu: str | None = None,
                  verdict: Severity | None = None, since: datetime | None = None
                  ) -> list[RunSummary]:
        """Stored runs, newest first (`limit` None: all of them). Each filter given narrows
        them in the query, before the limit, so an old run that matches is found: `host` and
        `gpu` a part of the hostname or GPU summary (any case), `verdict` exactly, `since`
        started at or after."""

        def count(severity: Severity) -> Any:
            return (select(func.count()).select_from(findings)
                    .where(findings.c.run_id == runs.c.id, findings.c.severity == severity.value)
                    .scalar_subquery())

        query = (select(*_SUMMARY_COLUMNS, count(Severity.FAIL).label("findings_fail"),
                        count(Severity.WARN).label("findings_warn"))
                 .order_by(runs.c.started_at.desc(), runs.c.id.desc()))
        if kind is not None:
            query = query.where(runs.c.kind == kind)
        for column, part in ((runs.c.hostname, host), (runs.c.gpu_summary, gpu)):
            if part:
                query = query.where(func.lower(column).contains(part.lower(), autoescape=True))
        if verdict is not None:
            query = query.where(runs.c.verdict == verdict.value)
        if since is not None:
            query = query.where(runs.c.started_at >= since)
        if limit is not None:
            query = query.limit(max(limit, 0))
        if self._engine is None:
            return []
        with self._errors("listing runs"), self._engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [RunSummary.model_validate(dict(r)) for r in rows]

    def run_kinds(self) -> dict[str, int]:
        """How many runs of each kind are stored ("run", "bench", "inspect", ...)."""
        if self._engine is None:
            return {}
        query = select(runs.c.kind, func.count()).group_by(runs.c.kind).order_by(runs.c.kind)
        with self._errors("listing runs"), self._engine.connect() as conn:
            return {kind: n for kind, n in conn.execute(query).all()}

    # -- telemetry history ---------------------------------------------------------------

    def save_sample(self, sample: Sample) -> None:
        """Store one monitor tick: a row per GPU, in one transaction. A tick already stored
        (same host, GPU and time) is left as it is, so saving it again is harmless."""
        rows = telemetry.raw_rows(sample)
        if not rows:
            return
        with self._errors("saving telemetry"), self._writing().begin() as conn:
            conn.execute(telemetry.insert_ignoring_duplicates(conn), rows)

    def compact(
        self,
        now: datetime | None = None,
        raw_retention: timedelta = RAW_RETENTION,
        rollup_retention: timedelta = ROLLUP_RETENTION,
    ) -> Compaction:
        """Roll raw samples older than `raw_retention` into 1-minute means and delete what is
        past retention.

        Works in whole minutes: a minute's raw rows are rolled up once the whole minute is
        older than `raw_retention` (a raw row may so outlive it by up to a minute), and a
        rollup is deleted once its whole minute is older than `rollup_retention`. Idempotent,
        and safe beside writers and other compactors: each step is one transaction that rolls
        up and deletes the same rows; a row arriving late for a minute already rolled up is
        merged into that minute's rollup next time.
        """
        if raw_retention < timedelta(0) or rollup_retention < timedelta(0):
            raise BadInputError("a retention cannot be negative")
        now = telemetry.as_utc(now) if now is not None else utc_now()
        raw_cutoff = telemetry.floor_minute(now - raw_retention)
        rollup_cutoff = telemetry.floor_minute(now - rollup_retention)
        rolled = written = late = 0
        writer = self._writing()
        with self._errors("compacting telemetry"):
            with writer.begin() as conn:
                raw_expired, rollups_expired = telemetry.expire(conn, raw_cutoff, rollup_cutoff)
            while True:
                with writer.begin() as conn:
                    telemetry.lock_for_rollup(conn)
                    step = telemetry.roll_up_next(conn, raw_cutoff, rollup_cutoff)
                if step is None:
                    break
                rolled, written, late = rolled + step[0], written + step[1], late + step[2]
        return Compaction(raw_cutoff=raw_cutoff, rollup_cutoff=rollup_cutoff,
                          raw_rows_rolled_up=rolled, rollup_rows_written=written,
                          raw_rows_expired=raw_expired + late,
                          rollup_rows_expired=rollups_expired)

    def history(
        self,
        gpu: int | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        hostname: str | None = None,
        resolution: HistoryResolution = "auto",
        replays: bool = False,
    ) -> list[HistoryPoint]:
        """Telemetry between `since` and `until` (inclusive; None: unbounded), of one GPU index
        and/or host (None: all), ordered by hostname, GPU, time.

        resolution "raw": the raw samples only. "1m": 1-minute points, from the rollups and,
        where raw samples are still kept, computed from them (a minute overlapping `since` is
        included whole). "auto": the rollups where there are rollups (the older part of the
        range), every raw sample elsewhere. Raw samples that came late, for a minute already rolled
        up, are merged into that minute under "auto" and "1m", as compaction will do.

        Replayed samples (host `replay:NAME`, see store.replay) are left out unless `replays`
        is True or `hostname` names one.
        """
        if self._engine is None or telemetry.raw.name not in self._tables:
            return []  # nothing saved yet, or a schema-1 store read without upgrading it
        with self._errors("reading telemetry"), self._engine.connect() as conn:
            return telemetry.history(conn, gpu=gpu, hostname=hostname, since=since,
                                     until=until, resolution=resolution, replays=replays)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.url!r})"


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
