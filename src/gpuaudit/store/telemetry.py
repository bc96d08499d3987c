"""Telemetry history: raw samples, their 1-minute rollups, retention, and queries over both.

Store's save_sample/compact/history hold the transactions; the functions here do the work on a
connection they are given. Rollups are computed by the database (GROUP BY over the raw rows'
minute), so a day of 8 GPUs at 1 Hz (~700k rows) never passes through Python row by row.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from sqlalchemy import (
    Double,
    cast,
    delete,
    func,
    insert,
    literal_column,
    select,
    type_coerce,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.dml import Insert

from gpuaudit.errors import BadInputError, GpuauditError
from gpuaudit.model import GpuSample, Sample
from gpuaudit.model.history import HistoryPoint, Resolution
from gpuaudit.parse import time_point

from .schema import MAX_READINGS, MEAN_READINGS, TELEMETRY_READINGS, UtcDateTime
from .schema import telemetry_1m as rollups
from .schema import telemetry_raw as raw

RAW_RETENTION = timedelta(days=1)
ROLLUP_RETENTION = timedelta(days=30)
HistoryResolution = Literal["auto", "raw", "1m"]
HISTORY_RESOLUTIONS: tuple[str, ...] = ("auto", "raw", "1m")
# Host-name prefix of replayed samples (see store.replay); kept here, below Store, for the
# history query that leaves them out.
REPLAY_HOST_PREFIX = "replay:"

# Compaction works through the backlog an hour of raw rows per transaction, so that a
# long-stopped compactor catching up never holds the write lock for long.
_CHUNK = timedelta(hours=1)
# Key prefix of the per-reading sample counts an aggregate carries (needed to merge means).
_N = "n:"
_POINT_FIELDS = frozenset(HistoryPoint.model_fields) - {"resolution", "clock_event_reasons"}
_RAW_POINT_COLUMNS = tuple(column.name for column in raw.c if column.name in _POINT_FIELDS)

Key = tuple[str, int, datetime]


# -- times ------------------------------------------------------------------------------------


def as_utc(t: datetime) -> datetime:
    """`t` in UTC; a naive time is taken as UTC, as the store's columns take it."""
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def floor_minute(t: datetime) -> datetime:
    return as_utc(t).replace(second=0, microsecond=0)


def parse_time(text: str, now: datetime | None = None) -> datetime:
    """A `--since`/`--until` value as a UTC time (the grammar: `gpuaudit.parse.time_point`)."""
    return time_point(text, "bad time", now=now)


# -- writing ----------------------------------------------------------------------------------


def raw_rows(sample: Sample) -> list[dict[str, Any]]:
    """One telemetry_raw row per GPU of `sample`."""
    return [_raw_row(sample, gpu) for gpu in sample.gpus]


def _raw_row(sample: Sample, gpu: GpuSample) -> dict[str, Any]:
    row: dict[str, Any] = {name: getattr(gpu, name) for name in TELEMETRY_READINGS}
    reasons = gpu.clock_event_reasons
    row.update(time=sample.time, hostname=sample.hostname, gpu=gpu.index, uuid=gpu.uuid,
               clock_event_reasons=None if reasons is None else ",".join(reasons),
               error=gpu.error)
    return row


def insert_ignoring_duplicates(conn: Connection) -> Insert:
    """An INSERT into telemetry_raw that skips a row already stored (same host, GPU, time), so
    that saving one tick twice stores it once."""
    dialect = conn.dialect.name
    if dialect == "postgresql":
        return postgresql.insert(raw).on_conflict_do_nothing()
    if dialect == "sqlite":
        return sqlite.insert(raw).on_conflict_do_nothing()
    return insert(raw)


# -- rolling up -------------------------------------------------------------------------------


def _minute(conn: Connection) -> ColumnElement[datetime]:
    """The start of the minute a raw row's time falls in, computed by the database.

    The constants are literal SQL, not bound parameters: PostgreSQL only accepts the same
    expression in SELECT and GROUP BY when it is textually the same, and two binds are not.
    """
    dialect = conn.dialect.name
    if dialect == "postgresql":
        # In UTC explicitly: date_trunc on a timestamptz truncates in the session's time zone,
        # and a zone whose offset has seconds (historic LMT) would shift the minutes.
        expr: ColumnElement[Any] = func.date_trunc(
            literal_column("'minute'"), func.timezone(literal_column("'UTC'"), raw.c.time))
    elif dialect == "sqlite":
        # SQLAlchemy stores SQLite times as 'YYYY-MM-DD HH:MM:SS.ffffff' text, in UTC here.
        expr = func.substr(raw.c.time, literal_column("1"), literal_column("16")).op("||")(
            literal_column("':00'"))
    else:
        raise GpuauditError(f"telemetry history needs SQLite or PostgreSQL, not {dialect}")
    return type_coerce(expr, UtcDateTime)


def aggregate(conn: Connection, where: Sequence[ColumnElement[bool]]) -> dict[Key, dict[str, Any]]:
    """1-minute aggregates of the raw rows matching `where`, keyed (hostname, gpu, minute):
    a telemetry_1m row each, plus the per-reading sample counts (keys `n:<reading>`)."""
    minute = _minute(conn)
    columns: list[ColumnElement[Any]] = [
        raw.c.hostname, raw.c.gpu, minute.label("time"),
        func.count().label("samples"), func.count(raw.c.error).label("error_samples"),
        func.max(raw.c.uuid).label("uuid"),
    ]
    columns += [cast(func.avg(raw.c[name]), Double).label(name) for name in MEAN_READINGS]
    columns += [func.count(raw.c[name]).label(_N + name) for name in MEAN_READINGS]
    columns += [cast(func.max(raw.c[source]), Double).label(name)
                for name, source in MAX_READINGS.items()]
    query = select(*columns).where(*where).group_by(raw.c.hostname, raw.c.gpu, minute)
    out: dict[Key, dict[str, Any]] = {}
    for row in conn.execute(query).mappings():
        out[(row["hostname"], row["gpu"], row["time"])] = {
            **row, "energy_j": None, "error": None, "clock_event_reasons": None}
    if not out:
        return out
    for column in ("energy_j", "error"):
        for hostname, gpu, time, value in _last_in_minute(conn, minute, column, where):
            out[(hostname, gpu, time)][column] = value
    reasons: dict[Key, set[str]] = defaultdict(set)
    seen = (select(raw.c.hostname, raw.c.gpu, minute, raw.c.clock_event_reasons)
            .where(*where, raw.c.clock_event_reasons.is_not(None)).distinct())
    for hostname, gpu, time, text in conn.execute(seen):
        reasons[(hostname, gpu, time)].update(_split(text) or ())
    for key, names in reasons.items():
        out[key]["clock_event_reasons"] = ",".join(sorted(names))
    return out


def _last_in_minute(conn: Connection, minute: ColumnElement[datetime], column: str,
                    where: Sequence[ColumnElement[bool]]) -> Iterable[Any]:
    """(hostname, gpu, minute, value): the minute's latest non-null `column`."""
    rank = func.row_number().over(partition_by=(raw.c.hostname, raw.c.gpu, minute),
                                  order_by=raw.c.time.desc()).label("rank")
    ranked = (select(raw.c.hostname, raw.c.gpu, minute.label("time"),
                     raw.c[column].label("value"), rank)
              .where(*where, raw.c[column].is_not(None)).subquery())
    return conn.execute(select(ranked.c.hostname, ranked.c.gpu, ranked.c.time, ranked.c.value)
                        .where(ranked.c.rank == 1))


def merge(rollup: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """A stored rollup with an aggregate of raw rows of the same minute (rows that came late,
    after their minute was rolled up). The rollup keeps no per-reading counts, so its means are
    weighted by its readable samples; exact unless a reading was missing from only some of
    them."""
    out = dict(rollup)
    out["samples"] = rollup["samples"] + fresh["samples"]
    out["error_samples"] = rollup["error_samples"] + fresh["error_samples"]
    readable = rollup["samples"] - rollup["error_samples"]
    for name in MEAN_READINGS:
        old, new = rollup[name], fresh[name]
        w_old = readable if old is not None else 0
        w_new = fresh[_N + name] if new is not None else 0
        out[name] = ((old or 0.0) * w_old + (new or 0.0) * w_new) / (w_old + w_new) \
            if w_old + w_new else None
    for name in (*MAX_READINGS, "energy_j"):  # the energy counter only grows while loaded
        values = [v for v in (rollup[name], fresh[name]) if v is not None]
        out[name] = max(values) if values else None
    out["uuid"] = fresh["uuid"] or rollup["uuid"]
    out["error"] = fresh["error"] or rollup["error"]
    if rollup["clock_event_reasons"] is not None or fresh["clock_event_reasons"] is not None:
        names = {*(_split(rollup["clock_event_reasons"]) or ()),
                 *(_split(fresh["clock_event_reasons"]) or ())}
        out["clock_event_reasons"] = ",".join(sorted(names))
    return out


def _rollup_row(values: dict[str, Any]) -> dict[str, Any]:
    return {column.name: values[column.name] for column in rollups.c}


def lock_for_rollup(conn: Connection) -> None:
    """Keep writers of raw rows and other compactors out until this transaction ends.

    SQLite's BEGIN IMMEDIATE already does. On PostgreSQL the roll-up's SELECTs and its DELETE
    each see the rows committed when they start, so a row a writer commits in between would be
    deleted without being rolled up; SHARE ROW EXCLUSIVE blocks INSERTs (and itself) but not
    readers."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"LOCK TABLE {raw.name} IN SHARE ROW EXCLUSIVE MODE")


def expire(conn: Connection, raw_cutoff: datetime, rollup_cutoff: datetime) -> tuple[int, int]:
    """Delete rollups before `rollup_cutoff` and raw rows that would only become such rollups;
    returns (raw rows, rollups) deleted."""
    gone_rollups = conn.execute(delete(rollups).where(rollups.c.time < rollup_cutoff)).rowcount
    gone_raw = conn.execute(
        delete(raw).where(raw.c.time < min(raw_cutoff, rollup_cutoff))).rowcount
    return gone_raw, gone_rollups


def roll_up_next(conn: Connection, raw_cutoff: datetime,
                 rollup_cutoff: datetime) -> tuple[int, int, int] | None:
    """Roll up the oldest hour of raw rows before `raw_cutoff` (a minute boundary, so only
    whole minutes) and delete them. Returns (raw rows rolled up, rollups written, raw rows
    deleted without a rollup: late arrivals past retention), or None when nothing is left."""
    oldest = conn.scalar(select(func.min(raw.c.time)).where(raw.c.time < raw_cutoff))
    if oldest is None:
        return None
    end = min(as_utc(oldest).replace(minute=0, second=0, microsecond=0) + _CHUNK, raw_cutoff)
    fresh = aggregate(conn, [raw.c.time >= rollup_cutoff, raw.c.time < end])
    written = 0
    if fresh:
        first = min(time for _, _, time in fresh)
        stored = {(r["hostname"], r["gpu"], r["time"]): r for r in conn.execute(
            select(rollups).where(rollups.c.time >= first, rollups.c.time < end)).mappings()}
        new = [_rollup_row(values) for key, values in fresh.items() if key not in stored]
        if new:
            conn.execute(insert(rollups), new)
        for (hostname, gpu, time), values in fresh.items():
            if (hostname, gpu, time) in stored:
                merged = merge(dict(stored[(hostname, gpu, time)]), values)
                conn.execute(update(rollups).where(
                    rollups.c.hostname == hostname, rollups.c.gpu == gpu, rollups.c.time == time,
                ).values(_rollup_row(merged)))
        written = len(fresh)
    deleted = conn.execute(delete(raw).where(raw.c.time < end)).rowcount
    rolled = sum(values["samples"] for values in fresh.values())
    return rolled, written, deleted - rolled


# -- reading ----------------------------------------------------------------------------------


def history(conn: Connection, *, gpu: int | None, hostname: str | None, since: datetime | None,
            until: datetime | None, resolution: str,
            replays: bool = False) -> list[HistoryPoint]:
    """See Store.history."""
    if resolution not in HISTORY_RESOLUTIONS:
        raise BadInputError(f"unknown resolution {resolution!r}: expected one of"
                            f" {', '.join(HISTORY_RESOLUTIONS)}")
    if since is not None and until is not None and as_utc(since) > as_utc(until):
        raise BadInputError(f"the start {as_utc(since).isoformat()} is after the end"
                            f" {as_utc(until).isoformat()}")
    # A minute is wanted when it overlaps [since, until]: its start may be before `since`.
    first_minute = floor_minute(since) if since is not None else None

    def where(table: Any, start: datetime | None) -> list[ColumnElement[bool]]:
        clauses = []
        if hostname is not None:
            clauses.append(table.c.hostname == hostname)
        elif not replays:
            clauses.append(~table.c.hostname.startswith(REPLAY_HOST_PREFIX, autoescape=True))
        if gpu is not None:
            clauses.append(table.c.gpu == gpu)
        if start is not None:
            clauses.append(table.c.time >= start)
        if until is not None:
            clauses.append(table.c.time <= until)
        return clauses

    points: list[HistoryPoint] = []
    if resolution == "raw":
        points = _raw_points(conn, where(raw, since))
    elif resolution == "1m":
        minutes = {(r["hostname"], r["gpu"], r["time"]): dict(r) for r in conn.execute(
            select(rollups).where(*where(rollups, first_minute))).mappings()}
        for key, fresh in aggregate(conn, where(raw, first_minute)).items():
            minutes[key] = merge(minutes[key], fresh) if key in minutes else fresh
        points = [_minute_point(values) for values in minutes.values()]
    else:
        stored = {(r["hostname"], r["gpu"], r["time"]): dict(r) for r in conn.execute(
            select(rollups).where(*where(rollups, first_minute))).mappings()}
        samples = _raw_points(conn, where(raw, since))
        points = [p for p in samples if (p.hostname, p.gpu, floor_minute(p.time)) not in stored]
        if len(points) < len(samples):
            # Raw rows that came late for a minute already rolled up: shown in their minute,
            # as the next compaction will merge them, so that compacting changes no answer.
            for key, fresh in aggregate(conn, where(raw, first_minute)).items():
                if key in stored:
                    stored[key] = merge(stored[key], fresh)
        points += [_minute_point(values) for values in stored.values()]
    points.sort(key=lambda p: (p.hostname, p.gpu, p.time))
    return points


def _raw_points(conn: Connection, where: Sequence[ColumnElement[bool]]) -> list[HistoryPoint]:
    # Plain tuples zipped with names: a day of one GPU is 86,400 rows, and looking names up in
    # each SQLAlchemy row took longer than building the records.
    columns = [raw.c[name] for name in _RAW_POINT_COLUMNS]
    points = []
    for *readings, reasons in conn.execute(
            select(*columns, raw.c.clock_event_reasons).where(*where)):
        values = dict(zip(_RAW_POINT_COLUMNS, readings, strict=True))
        values.update(
            resolution=Resolution.RAW, samples=1, error_samples=int(values["error"] is not None),
            clock_event_reasons=_split(reasons),
            **{name: values[source] for name, source in MAX_READINGS.items()})
        points.append(HistoryPoint(**values))
    return points


def _minute_point(values: Any) -> HistoryPoint:
    return HistoryPoint(resolution=Resolution.MINUTE,
                        clock_event_reasons=_split(values["clock_event_reasons"]),
                        **{name: values[name] for name in _POINT_FIELDS})


def _split(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    return tuple(name for name in text.split(",") if name)
