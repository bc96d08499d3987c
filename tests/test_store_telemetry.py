"""Telemetry history in the store: raw samples, 1-minute rollups, retention, queries, and the
upgrade of a schema-1 database, against a real SQLite file and (marked `postgres`) a real
PostgreSQL server, parametrised as tests/test_store.py is.
"""

from __future__ import annotations

import multiprocessing
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import gpuaudit.store.database as store_module
from gpuaudit.errors import BadInputError, GpuauditError
from gpuaudit.model import GpuSample, Sample
from gpuaudit.model.history import HistoryPoint, Resolution
from gpuaudit.store import Store, parse_time
from gpuaudit.store import schema as store_schema
from tests.support.stores import (
    V1_TABLES,
    create_v1_database,
    raw_engine,
    stored_version_and_tables,
)

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
CEST = timezone(timedelta(hours=2))
SPAWN = multiprocessing.get_context("spawn")
DAY = timedelta(days=1)


def tick(at: datetime, *gpus: GpuSample, host: str = "node-a") -> Sample:
    return Sample(time=at, hostname=host, interval_s=1.0, gpus=gpus)


def gpu(index: int = 0, **readings: Any) -> GpuSample:
    return GpuSample(index=index, uuid=f"GPU-{index:04d}", name="NVIDIA H200", **readings)


def full_gpu(index: int, n: int) -> GpuSample:
    """Every stored reading set, all derived from `n`, as exact binary fractions."""
    return gpu(
        index,
        utilization_gpu_pct=float(n % 101), utilization_memory_pct=n / 4,
        memory_used_bytes=80_000_000_000 + n, memory_total_bytes=150_754_820_096,
        power_w=300.0 + n, power_limit_w=700.0, energy_j=1_000_000.0 + 500 * n,
        temperature_gpu_c=40.0 + n / 2, temperature_memory_c=50.0 + n / 8,
        sm_clock_mhz=1980 - n, memory_clock_mhz=2619,
        clock_event_reasons=("SwPowerCap",) if n % 2 else (),
        pcie_rx_bytes_per_s=1e9 + n, pcie_tx_bytes_per_s=2e9 + n,
        sm_activity_pct=n / 2, sm_occupancy_pct=n / 16, tensor_activity_pct=n / 32,
        dram_bandwidth_util_pct=n / 64,
    )


def table_rows(url: str, table: str) -> int:
    engine = raw_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())
    finally:
        engine.dispose()


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


# -- raw samples ----------------------------------------------------------------------------


def test_raw_round_trip_keeps_every_reading_and_the_error_row(store_url: str) -> None:
    at = datetime(2025, 3, 1, 14, 0, 5, 250_000, tzinfo=CEST)  # stored and returned in UTC
    broken = GpuSample(index=1, uuid="GPU-0001", error="GPU is lost (NVML_ERROR_GPU_IS_LOST)")
    sample = tick(at, full_gpu(0, 7), broken, gpu(2, power_w=90.0))
    with Store(store_url) as store:
        store.save_sample(sample)
        store.save_sample(sample)  # the same tick again: stored once
        store.save_sample(tick(at + timedelta(seconds=1)))  # no GPUs: nothing to store
        points = store.history(resolution="raw")
    assert table_rows(store_url, "telemetry_raw") == 3
    assert [(p.gpu, p.time) for p in points] == [(0, at), (1, at), (2, at)]
    assert points[0].time.utcoffset() == timedelta(0)
    p0, p1, p2 = points
    g0 = sample.gpus[0]
    assert p0.resolution is Resolution.RAW and (p0.samples, p0.error_samples) == (1, 0)
    assert p0.hostname == "node-a" and p0.uuid == "GPU-0000" and p0.error is None
    for name in store_schema.TELEMETRY_READINGS:
        assert getattr(p0, name) == getattr(g0, name), name
    assert p0.memory_total_bytes == 150_754_820_096  # BIGINT, not a 32-bit column
    assert p0.clock_event_reasons == ("SwPowerCap",)
    assert (p0.power_max_w, p0.temperature_gpu_max_c) == (g0.power_w, g0.temperature_gpu_c)
    # The GPU that could not be read is kept, as an error row with no readings.
    assert p1.error == "GPU is lost (NVML_ERROR_GPU_IS_LOST)"
    assert (p1.samples, p1.error_samples) == (1, 1)
    assert all(getattr(p1, name) is None for name in store_schema.TELEMETRY_READINGS)
    assert p1.clock_event_reasons is None
    assert p2.power_w == 90.0 and p2.sm_activity_pct is None and p2.clock_event_reasons is None


def test_empty_reasons_are_not_unknown_reasons(store_url: str) -> None:
    with Store(store_url) as store:
        store.save_sample(tick(T0, gpu(0, clock_event_reasons=()),
                               gpu(1, clock_event_reasons=("GpuIdle", "SwThermalSlowdown")),
                               gpu(2)))
        reasons = [p.clock_event_reasons for p in store.history(resolution="raw")]
    assert reasons == [(), ("GpuIdle", "SwThermalSlowdown"), None]


# -- compaction -----------------------------------------------------------------------------


def plant_two_minutes(store: Store) -> dict[str, list[GpuSample]]:
    """Samples of node-a GPU 0 in minutes 12:00 and 12:01 and 12:02, GPU 1 in 12:00 only, and
    node-b GPU 0 in 12:01, at irregular times hugging the minute boundaries."""
    minute_00 = [
        (T0, gpu(0, power_w=100.0, energy_j=5000.0, temperature_gpu_c=60.0, sm_clock_mhz=1000,
                 memory_used_bytes=1_000_000_000_001, clock_event_reasons=())),
        (T0 + timedelta(seconds=20), gpu(0, power_w=101.0, energy_j=5100.0,
                                         temperature_gpu_c=71.0, sm_clock_mhz=1001,
                                         sm_activity_pct=30.0, memory_used_bytes=2,
                                         clock_event_reasons=("SwPowerCap",))),
        (T0 + timedelta(seconds=40), GpuSample(index=0, uuid="GPU-0000", error="Unknown Error")),
        # The driver reloaded: the counter restarted. The minute keeps the last reading.
        (T0 + timedelta(seconds=59, microseconds=999_999),
         gpu(0, power_w=103.0, energy_j=7.0, temperature_gpu_c=62.0, sm_clock_mhz=1003,
             sm_activity_pct=31.0, memory_used_bytes=3,
             clock_event_reasons=("HwSlowdown", "SwPowerCap"))),
    ]
    minute_01 = [
        (T0 + timedelta(minutes=1), gpu(0, power_w=200.0, energy_j=8.0)),
        (T0 + timedelta(minutes=1, seconds=30), gpu(0, power_w=250.5, energy_j=9.0)),
    ]
    minute_02 = [(T0 + timedelta(minutes=2, seconds=1), gpu(0, power_w=400.0))]
    for at, g in [*minute_00, *minute_01, *minute_02]:
        store.save_sample(tick(at, g))
    store.save_sample(tick(T0 + timedelta(seconds=30), gpu(1, power_w=10.0)))
    store.save_sample(tick(T0 + timedelta(seconds=31), gpu(1, power_w=11.0)))
    store.save_sample(tick(T0 + timedelta(minutes=1, seconds=5), gpu(0, power_w=1.0),
                           host="node-b"))
    return {"00": [g for _, g in minute_00], "01": [g for _, g in minute_01],
            "02": [g for _, g in minute_02]}


def test_compaction_rolls_whole_minutes_into_exact_means(store_url: str) -> None:
    with Store(store_url) as store:
        planted = plant_two_minutes(store)
        minutes_before = store.history(resolution="1m")
        # 12:02:30 a day later: 12:00 and 12:01 are complete and older than a day, 12:02 is not.
        done = store.compact(now=T0 + DAY + timedelta(minutes=2, seconds=30))
        assert done.raw_cutoff == T0 + timedelta(minutes=2)
        assert done.rollup_cutoff == T0 + DAY + timedelta(minutes=2) - timedelta(days=30)
        assert (done.raw_rows_rolled_up, done.rollup_rows_written) == (9, 4)
        assert (done.raw_rows_expired, done.rollup_rows_expired) == (0, 0)
        assert table_rows(store_url, "telemetry_raw") == 1  # only 12:02:01 is left raw
        assert table_rows(store_url, "telemetry_1m") == 4

        minutes = store.history(resolution="1m")
        assert minutes == minutes_before  # the same answer from rollups as from raw rows

        again = store.compact(now=T0 + DAY + timedelta(minutes=2, seconds=59))
        assert (again.raw_rows_rolled_up, again.rollup_rows_written) == (0, 0)
        assert store.history(resolution="1m") == minutes  # idempotent

    by_key = {(p.hostname, p.gpu, p.time): p for p in minutes}
    assert list(by_key) == [("node-a", 0, T0), ("node-a", 0, T0 + timedelta(minutes=1)),
                            ("node-a", 0, T0 + timedelta(minutes=2)),
                            ("node-a", 1, T0), ("node-b", 0, T0 + timedelta(minutes=1))]
    first = by_key[("node-a", 0, T0)]
    read = [g for g in planted["00"] if g.error is None]
    assert first.resolution is Resolution.MINUTE
    assert (first.samples, first.error_samples) == (4, 1)
    assert first.error == "Unknown Error"
    assert first.power_w == mean([g.power_w for g in read])  # 304/3: the error row not a zero
    assert first.power_max_w == 103.0
    assert first.temperature_gpu_c == mean([60.0, 71.0, 62.0])
    assert first.temperature_gpu_max_c == 71.0
    assert first.sm_clock_mhz == mean([1000, 1001, 1003])
    assert first.memory_used_bytes == mean([1_000_000_000_001, 2, 3])
    assert first.sm_activity_pct == 30.5  # over the two samples that had it
    assert first.tensor_activity_pct is None  # no sample had it
    assert first.energy_j == 7.0  # the last reading, not the highest
    assert first.clock_event_reasons == ("HwSlowdown", "SwPowerCap")
    assert first.uuid == "GPU-0000"
    second = by_key[("node-a", 0, T0 + timedelta(minutes=1))]
    assert (second.samples, second.power_w, second.energy_j) == (2, 225.25, 9.0)
    assert second.clock_event_reasons is None and second.error is None
    assert by_key[("node-a", 1, T0)].power_w == 10.5
    assert by_key[("node-b", 0, T0 + timedelta(minutes=1))].power_w == 1.0
    assert by_key[("node-a", 0, T0 + timedelta(minutes=2))].samples == 1


def test_retention_deletes_exactly_what_is_older(store_url: str) -> None:
    jan31 = datetime(2025, 1, 31, 12, 0, tzinfo=timezone.utc)
    mar1 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
    with Store(store_url) as store:
        for at, watts in [(jan31 - timedelta(seconds=30), 1.0), (jan31, 100.0)]:
            store.save_sample(tick(at, gpu(0, power_w=watts)))
        store.save_sample(tick(jan31 + timedelta(seconds=10), GpuSample(index=0, error="lost")))
        first = store.compact(now=datetime(2025, 2, 1, 12, 5, tzinfo=timezone.utc))
        assert (first.raw_rows_rolled_up, first.rollup_rows_written) == (3, 2)
        assert table_rows(store_url, "telemetry_raw") == 0

        # Late rows for minutes already rolled up (a replayed trace), and this month's samples.
        store.save_sample(tick(jan31 - timedelta(minutes=2), gpu(0, power_w=5.0)))
        store.save_sample(tick(jan31 + timedelta(seconds=30), gpu(0, power_w=200.0)))
        store.save_sample(tick(jan31, gpu(1, power_w=42.0)))  # right on the rollup cutoff
        for at in (mar1 - timedelta(microseconds=1), mar1, mar1 + timedelta(seconds=20)):
            store.save_sample(tick(at, gpu(0, power_w=7.0)))
        # Before compaction, the late 12:00:30 is already shown merged into its minute: the
        # error row does not weigh in the mean (100 and 200, not 100, 200 and nothing).
        for resolution in ("auto", "1m"):
            assert [(p.time, p.resolution, p.samples, p.error_samples, p.power_w)
                    for p in store.history(gpu=0, resolution=resolution,  # type: ignore[arg-type]
                                           until=jan31 + timedelta(minutes=1))] == [
                (jan31 - timedelta(minutes=2), Resolution.MINUTE if resolution == "1m"
                 else Resolution.RAW, 1, 0, 5.0),
                (jan31 - timedelta(minutes=1), Resolution.MINUTE, 1, 0, 1.0),
                (jan31, Resolution.MINUTE, 3, 1, 150.0),
            ]

        # A day and 30 s after mar1: raw keeps the minute of mar1 (not yet whole minutes past a
        # day), rollups keep minutes from jan31 12:00 (30 days before mar2 12:00).
        now = mar1 + DAY + timedelta(seconds=30)
        done = store.compact(now=now)
        assert (done.raw_cutoff, done.rollup_cutoff) == (mar1, jan31)
        assert done.rollup_rows_expired == 1  # jan31 11:59
        assert done.raw_rows_expired == 1  # jan31 11:58, late and already past retention
        # jan31 12:00:30 (GPU 0) and 12:00:00 (GPU 1), mar1 11:59:59.999999
        assert done.raw_rows_rolled_up == 3
        assert done.rollup_rows_written == 3

        raw = store.history(resolution="raw")
        assert [p.time for p in raw] == [mar1, mar1 + timedelta(seconds=20)]
        minutes = store.history(resolution="1m", until=mar1 - timedelta(microseconds=1))
    assert [(p.gpu, p.time, p.samples, p.power_w) for p in minutes] == [
        (0, jan31, 3, 150.0),  # the late row merged into its minute's rollup
        (0, mar1 - timedelta(minutes=1), 1, 7.0),
        (1, jan31, 1, 42.0),
    ]


def test_compaction_takes_a_long_backlog_an_hour_at_a_time(store_url: str) -> None:
    with Store(store_url) as store:
        for minute in range(0, 150, 7):  # two and a half hours, a sample every 7 minutes
            store.save_sample(tick(T0 + timedelta(minutes=minute), gpu(0, power_w=minute)))
        done = store.compact(now=T0 + DAY + timedelta(hours=3))
        assert (done.raw_rows_rolled_up, done.rollup_rows_written) == (22, 22)
        points = store.history()
    assert [(p.time, p.power_w) for p in points] == [
        (T0 + timedelta(minutes=m), float(m)) for m in range(0, 150, 7)]
    assert all(p.resolution is Resolution.MINUTE for p in points)


def test_bad_retention_is_refused(store_url: str) -> None:
    with Store(store_url) as store, pytest.raises(BadInputError, match="negative"):
        store.compact(now=T0, raw_retention=timedelta(seconds=-1))


# -- queries --------------------------------------------------------------------------------


def test_history_picks_the_resolution(store_url: str) -> None:
    with Store(store_url) as store:
        plant_two_minutes(store)
        store.compact(now=T0 + DAY + timedelta(minutes=2, seconds=30))
        for g in range(2):  # a fresh raw sample for both GPUs at 12:03:10
            store.save_sample(tick(T0 + timedelta(minutes=3, seconds=10), gpu(g, power_w=9.0)))

        auto = store.history(gpu=0, hostname="node-a")
        assert [(p.time, p.resolution) for p in auto] == [
            (T0, Resolution.MINUTE),
            (T0 + timedelta(minutes=1), Resolution.MINUTE),
            (T0 + timedelta(minutes=2, seconds=1), Resolution.RAW),
            (T0 + timedelta(minutes=3, seconds=10), Resolution.RAW),
        ]
        raw = store.history(gpu=0, hostname="node-a", resolution="raw")
        assert raw == auto[2:]
        minutes = store.history(gpu=0, hostname="node-a", resolution="1m")
        assert [(p.time, p.samples) for p in minutes] == [
            (T0, 4), (T0 + timedelta(minutes=1), 2), (T0 + timedelta(minutes=2), 1),
            (T0 + timedelta(minutes=3), 1)]
        assert minutes[:2] == auto[:2]

        # A minute that overlaps `since` is included whole; raw samples only from `since`.
        since = T0 + timedelta(minutes=1, seconds=30)
        assert [p.time for p in store.history(gpu=0, hostname="node-a", since=since)] == [
            T0 + timedelta(minutes=1), T0 + timedelta(minutes=2, seconds=1),
            T0 + timedelta(minutes=3, seconds=10)]
        assert [p.time for p in store.history(gpu=0, hostname="node-a", resolution="raw",
                                              since=T0 + timedelta(minutes=2, seconds=1),
                                              until=T0 + timedelta(minutes=3))] == [
            T0 + timedelta(minutes=2, seconds=1)]

        everything = store.history()
        assert {(p.hostname, p.gpu) for p in everything} == {
            ("node-a", 0), ("node-a", 1), ("node-b", 0)}
        assert [(p.hostname, p.gpu) for p in everything] == sorted(
            (p.hostname, p.gpu) for p in everything)
        assert {p.hostname for p in store.history(gpu=0)} == {"node-a", "node-b"}
        assert store.history(gpu=7) == []
        assert store.history(hostname="node-c") == []
        assert store.history(since=T0 + DAY) == []

        with pytest.raises(BadInputError, match="unknown resolution '5m'"):
            store.history(resolution="5m")  # type: ignore[arg-type]
        with pytest.raises(BadInputError, match="is after the end"):
            store.history(since=T0 + timedelta(hours=1), until=T0)


def test_an_empty_store_has_no_history(store_url: str) -> None:
    with Store(store_url) as store:
        for resolution in ("auto", "raw", "1m"):
            assert store.history(resolution=resolution) == []  # type: ignore[arg-type]
        done = store.compact(now=T0)
        assert (done.raw_rows_rolled_up, done.rollup_rows_expired) == (0, 0)


def test_a_history_point_is_a_frozen_record() -> None:
    point = HistoryPoint(time=T0, hostname="h", gpu=0, resolution=Resolution.RAW, samples=1,
                         error_samples=0, power_w=1.0)
    with pytest.raises(ValueError, match="frozen"):
        point.power_w = 2.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="watts"):
        HistoryPoint.model_validate({**point.model_dump(), "watts": 1.0})
    assert HistoryPoint.model_validate_json(point.model_dump_json()) == point


# -- writers and compactors at once --------------------------------------------------------


def _write_ticks(url: str, ticks: int, gpus: int, barrier: Any) -> None:
    barrier.wait(timeout=120)
    with Store(url) as store:
        for i in range(ticks):
            store.save_sample(tick(T0 + timedelta(seconds=i),
                                   *(gpu(g, power_w=float(i + g)) for g in range(gpus))))
            time.sleep(0.001)  # spread the writes over the compactors' loops


def _compact_until(url: str, stop: Any, barrier: Any, done: Any) -> None:
    steps = rolled = 0
    try:
        with Store(url) as store:
            while not stop.is_set():
                # Everything, the minute being written included, counts as old enough: rows
                # still arriving for a rolled-up minute must be merged into it, none lost.
                result = store.compact(now=T0 + timedelta(hours=1), raw_retention=timedelta(0))
                rolled += result.raw_rows_rolled_up
                steps += 1
                if steps == 1:
                    barrier.wait(timeout=120)  # the writer starts once every compactor runs
                # A breather: in a tight loop two compactors would keep SQLite's lock nearly
                # always taken, and its busy handler's sleeps would slow the writer to a crawl.
                time.sleep(0.005)
    except BaseException as exc:
        done.put((-1, f"{type(exc).__name__}: {exc}"))
        raise
    done.put((steps, rolled))


def test_concurrent_writer_and_compactors_lose_no_sample(store_url: str) -> None:
    ticks, gpus, compactors = 300, 4, 2
    Store(store_url).close()  # created before the race; opening races are test_store's
    barrier = SPAWN.Barrier(1 + compactors)
    stop, done = SPAWN.Event(), SPAWN.Queue()
    writer = SPAWN.Process(target=_write_ticks, args=(store_url, ticks, gpus, barrier))
    procs = [SPAWN.Process(target=_compact_until, args=(store_url, stop, barrier, done))
             for _ in range(compactors)]
    for p in (writer, *procs):
        p.start()
    writer.join(timeout=240)
    stop.set()
    for p in procs:
        p.join(timeout=120)
    work = [done.get(timeout=10) for _ in procs]
    assert [p.exitcode for p in (writer, *procs)] == [0] * (1 + compactors), work
    # They really ran while the writer wrote (it takes 300 ms or more).
    assert all(steps > 1 for steps, _ in work) and sum(rolled for _, rolled in work) > 0, work

    with Store(store_url) as store:
        store.compact(now=T0 + timedelta(hours=1), raw_retention=timedelta(0))
        points = store.history(resolution="1m")
    assert table_rows(store_url, "telemetry_raw") == 0
    assert sum(p.samples for p in points) == ticks * gpus
    assert [(p.gpu, p.time, p.samples) for p in points] == [
        (g, T0 + timedelta(minutes=m), 60) for g in range(gpus) for m in range(ticks // 60)]
    for p in points:
        start = int((p.time - T0).total_seconds())
        # Means merged from pieces: equal to the whole minute's mean up to rounding.
        assert p.power_w == pytest.approx(mean([float(i + p.gpu) for i in range(start,
                                                                                 start + 60)]),
                                          rel=1e-12)
        assert p.power_max_w == float(start + 59 + p.gpu)


# -- schema versions ------------------------------------------------------------------------

def test_a_version_1_database_is_upgraded_in_place(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = create_v1_database(store_url, monkeypatch)
    assert stored_version_and_tables(store_url) == ("1", set(V1_TABLES))

    with Store(store_url) as store:
        assert [store.get(run.id) for run in runs] == runs
        store.save_sample(tick(T0, full_gpu(0, 3)))
        assert store.history()[0].power_w == 303.0
    version, tables = stored_version_and_tables(store_url)
    assert version == str(store_schema.STORE_SCHEMA_VERSION) == "3"
    assert tables == {*V1_TABLES, "telemetry_raw", "telemetry_1m", "run_nodes", "run_gpus",
                      "fleet_runs"}

    with Store(store_url) as again:  # opening an upgraded database changes nothing
        assert len(again.list_runs()) == 2 and len(again.history()) == 1
    assert stored_version_and_tables(store_url)[0] == "3"

    # The schema-1 gpuaudit now refuses it rather than ignore what it cannot read.
    with monkeypatch.context() as patch:
        patch.setattr(store_module, "STORE_SCHEMA_VERSION", 1)
        with pytest.raises(BadInputError, match="has store schema 3; this gpuaudit reads up to 1"):
            Store(store_url)


def _open_and_save(url: str, worker: int, barrier: Any) -> None:
    barrier.wait(timeout=120)
    with Store(url) as store:
        store.save_sample(tick(T0 + timedelta(seconds=worker), gpu(0, power_w=float(worker))))


def test_several_processes_upgrade_one_database_at_once(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = create_v1_database(store_url, monkeypatch)
    workers = 4
    barrier = SPAWN.Barrier(workers)
    procs = [SPAWN.Process(target=_open_and_save, args=(store_url, w, barrier))
             for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
    assert [p.exitcode for p in procs] == [0] * workers
    with Store(store_url) as store:
        assert [p.power_w for p in store.history()] == [float(w) for w in range(workers)]
        assert [store.get(run.id) for run in runs] == runs
    assert stored_version_and_tables(store_url)[0] == "3"


def test_a_newer_database_is_refused_and_left_untouched(store_url: str) -> None:
    Store(store_url).close()
    engine = raw_engine(store_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE gpuaudit_meta SET value = '4'"
                             " WHERE key = 'store_schema_version'"))
        conn.execute(sa.text("DROP TABLE telemetry_1m"))  # as if version 4 had replaced it
    engine.dispose()
    with pytest.raises(BadInputError, match=r"store schema 4.*upgrade gpuaudit"):
        Store(store_url)
    assert stored_version_and_tables(store_url) == (  # nothing created, nothing rewritten
        "4", {*V1_TABLES, "telemetry_raw", "run_nodes", "run_gpus", "fleet_runs"})


def test_an_unreadable_schema_version_is_one_line(store_url: str) -> None:
    Store(store_url).close()
    engine = raw_engine(store_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE gpuaudit_meta SET value = 'two'"
                             " WHERE key = 'store_schema_version'"))
    engine.dispose()
    with pytest.raises(BadInputError, match="unreadable store schema version 'two'"):
        Store(store_url)


def test_a_database_failure_while_saving_telemetry_is_one_line(store_url: str) -> None:
    with Store(store_url) as store:
        engine = raw_engine(store_url)
        with engine.begin() as conn:
            conn.execute(sa.text("DROP TABLE telemetry_raw"))
        engine.dispose()
        for action, what in [(lambda: store.save_sample(tick(T0, gpu(0))), "saving telemetry"),
                             (lambda: store.history(), "reading telemetry"),
                             (lambda: store.compact(now=T0), "compacting telemetry")]:
            with pytest.raises(GpuauditError, match=f"database error {what}") as caught:
                action()
            assert "\n" not in str(caught.value) and "telemetry_raw" in str(caught.value)


# -- write throughput -----------------------------------------------------------------------


def test_saving_8_gpus_keeps_up_with_1_hz_many_times_over(tmp_path: Path) -> None:
    ticks = 200
    samples = [tick(T0 + timedelta(seconds=i), *(full_gpu(g, i) for g in range(8)))
               for i in range(ticks)]
    with Store(tmp_path / "speed.db") as store:
        started = time.perf_counter()
        for sample in samples:
            store.save_sample(sample)
        elapsed = time.perf_counter() - started
        assert len(store.history(resolution="raw")) == ticks * 8
    # Each tick is its own committed (fsynced) transaction, as in the monitor. 50 ticks/s is
    # 50× what 1 Hz needs; measured ~1800 ticks/s on the development VM's disk.
    assert ticks / elapsed > 50, f"{ticks / elapsed:.0f} ticks/s"


# -- --since / --until ---------------------------------------------------------------------


NOW = datetime(2025, 3, 1, 12, 0, 30, tzinfo=timezone.utc)


@pytest.mark.parametrize(("text", "expected"), [
    ("1h", NOW - timedelta(hours=1)),
    ("30m", NOW - timedelta(minutes=30)),
    ("2d", NOW - timedelta(days=2)),
    ("90s", NOW - timedelta(seconds=90)),
    ("1w", NOW - timedelta(weeks=1)),
    ("1h30m", NOW - timedelta(minutes=90)),
    ("1.5H", NOW - timedelta(minutes=90)),
    (" now ", NOW),
    ("0m", NOW),
    ("2025-02-28T10:00:00Z", datetime(2025, 2, 28, 10, tzinfo=timezone.utc)),
    ("2025-02-28T12:00:00+02:00", datetime(2025, 2, 28, 10, tzinfo=timezone.utc)),
    ("2025-02-28 10:00:00.5+00:00", datetime(2025, 2, 28, 10, 0, 0, 500_000, tzinfo=timezone.utc)),
])
def test_parse_time(text: str, expected: datetime) -> None:
    parsed = parse_time(text, now=NOW)
    assert parsed == expected and parsed.utcoffset() == timedelta(0)


def test_parse_time_takes_an_iso_time_without_offset_as_local(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")  # +05:30, no daylight saving
    time.tzset()
    try:
        assert parse_time("2025-03-01T12:00") == datetime(2025, 3, 1, 6, 30, tzinfo=timezone.utc)
        assert parse_time("2025-03-01") == datetime(2025, 2, 28, 18, 30, tzinfo=timezone.utc)
    finally:
        monkeypatch.undo()
        time.tzset()


def test_parse_time_without_now_counts_back_from_the_clock() -> None:
    before = datetime.now(timezone.utc)
    parsed = parse_time("1h")
    after = datetime.now(timezone.utc)
    assert before - timedelta(hours=1) <= parsed <= after - timedelta(hours=1)


@pytest.mark.parametrize("text", ["", "  ", "1x", "h", "-1h", "1 h", "yesterday", "1h-",
                                  "2025-13-01", "99999999999d", "12:00"])
def test_parse_time_refuses_garbage_in_one_line(text: str) -> None:
    with pytest.raises(BadInputError) as caught:
        parse_time(text, now=NOW)
    message = str(caught.value)
    assert caught.value.exit_code == 2 and "\n" not in message
    assert f"bad time {text.strip()!r}" in message and "30m" in message

