"""Runs kept in a database: a SQLite file by default, a PostgreSQL URL for teams. Saving and
reading runs, the fleet's tables and the telemetry history (`database.Database` opens it)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from gpuaudit.errors import BadInputError, GpuauditError
from gpuaudit.model import Machine, Record, Run, RunStatus, Sample, Severity, load_run, utc_now
from gpuaudit.model.history import Compaction, HistoryPoint

from . import fleet, telemetry
from .database import Database
from .schema import findings, fleet_runs, measurements, run_gpus, run_nodes, runs
from .telemetry import RAW_RETENTION, ROLLUP_RETENTION, HistoryResolution

MIN_PREFIX = 4
_SUMMARY_COLUMNS = [c for c in runs.c if c.name != "document"]


class RunNotFoundError(BadInputError):
    """No stored run has that id (or id prefix)."""


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


class Store(Database):
    """A database of runs (see `Database` for opening it: read-only or for writing, a missing
    file, someone else's tables)."""

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
