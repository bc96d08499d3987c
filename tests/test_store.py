"""The store against a real SQLite file and (marked `postgres`) a real PostgreSQL server.

PostgreSQL tests use GPUAUDIT_TEST_PG_URL (see .ci/postgres.sh), each in a database of its own
that is dropped afterwards. Without the URL they skip, except under CI=true where they fail:
CI must really exercise PostgreSQL.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import sqlite3
import sys
from datetime import timedelta, timezone
from pathlib import Path
from typing import Any

import platformdirs
import pytest
import sqlalchemy as sa
from pydantic import ValidationError

from gpuaudit.errors import BadInputError, GpuauditError
from gpuaudit.model import Severity, load_run
from gpuaudit.store import RunNotFoundError, RunSummary, Store, default_db_url
from gpuaudit.store.schema import STORE_SCHEMA_VERSION
from tests.conftest import pg_base_url
from tests.support.stores import T0, make_run, raw_engine

CEST = timezone(timedelta(hours=2))
SPAWN = multiprocessing.get_context("spawn")


def count_rows(url: str, table: str, run_id: str | None = None) -> int:
    engine = raw_engine(url)
    try:
        with engine.connect() as conn:
            where = " WHERE run_id = :rid" if run_id else ""
            return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}{where}"),
                                    {"rid": run_id}).scalar_one())
    finally:
        engine.dispose()


# -- round trip and lookup ------------------------------------------------------------------


def test_round_trip_keeps_the_whole_run(store_url: str) -> None:
    run = make_run(3, tz=CEST, gpus=2)
    with Store(store_url) as store:
        assert store.save(run) == run.id
        same = store.get(run.id)
    assert same == run
    assert same.machine is not None and same.machine.gpus[1].name == "NVIDIA H200"
    assert same.machine.xid_counts == {79: 1}
    assert same.findings[0].evidence == {"gen_current": 3, "gen_max": 5}
    assert same.measurements[0].samples == (700.25, 701.5, 702.0)
    assert same.measurements[1].value is None
    assert same.started_at.utcoffset() == timedelta(hours=2)
    assert same.verdict is Severity.FAIL

    with Store(store_url) as reopened:  # really on disk / on the server, not in a cache
        assert reopened.get(run.id) == run
        [summary] = reopened.list_runs()
    assert summary.started_at == run.started_at
    assert summary.started_at.utcoffset() == timedelta(0)
    assert summary.finished_at == run.finished_at
    assert summary.finished_at is not None and summary.finished_at.tzinfo is not None
    # The index tables hold one row per finding and measurement.
    assert count_rows(store_url, "findings", run.id) == 3
    assert count_rows(store_url, "measurements", run.id) == 2


def test_get_by_prefix_ambiguous_and_missing(store_url: str) -> None:
    with Store(store_url) as store:
        for n, rid in enumerate(["abcd00000001", "abcd00000002", "abce00000003"]):
            store.save(make_run(n, run_id=rid))
        for n in range(7):
            store.save(make_run(10 + n, run_id=f"beef{n:08d}"))

        assert store.get("abce").id == "abce00000003"
        assert store.get("abcd00000002").id == "abcd00000002"

        with pytest.raises(BadInputError) as ambiguous:
            store.get("abcd0000")
        assert not isinstance(ambiguous.value, RunNotFoundError)
        assert "abcd00000001" in str(ambiguous.value)
        assert "abcd00000002" in str(ambiguous.value)

        with pytest.raises(BadInputError) as many:
            store.get("beef")
        assert sum(f"beef{n:08d}" in str(many.value) for n in range(7)) == 5

        with pytest.raises(RunNotFoundError) as short:
            store.get("abc")  # would be unique among a-runs, but 3 characters are too few
        assert "4 characters" in str(short.value)
        for missing in ("ffff", "abc%", "abc_", "abcd000000019"):
            with pytest.raises(RunNotFoundError) as nope:
                store.get(missing)  # % and _ are literal, not LIKE wildcards
            assert nope.value.exit_code == 2 and missing in str(nope.value)


def test_list_newest_first_with_counts(store_url: str) -> None:
    # Ids run against time, and the oldest run is in +02:00 (its local clock reads latest):
    # the order must come from the instants.
    runs = [
        make_run(5, run_id="aaaa00000005", kind="run", gpus=2, fails=2),
        make_run(9, run_id="aaaa00000001", kind="run", machine=False),
        make_run(1, run_id="aaaa00000009", kind="inspect", gpus=0, fails=0, tz=CEST),
        make_run(3, run_id="aaaa00000003", kind="inspect"),
    ]
    with Store(store_url) as store:
        for run in runs:
            store.save(run)
        listed = store.list_runs()
        assert [s.id for s in listed] == ["aaaa00000001", "aaaa00000005", "aaaa00000003",
                                          "aaaa00000009"]
        assert [s.id for s in store.list_runs(limit=2)] == ["aaaa00000001", "aaaa00000005"]
        assert [s.id for s in store.list_runs(kind="inspect")] == ["aaaa00000003",
                                                                   "aaaa00000009"]
        assert store.list_runs(kind="bench") == []

    by_id = {s.id: s for s in listed}
    two_fails = by_id["aaaa00000005"]
    assert (two_fails.findings_fail, two_fails.findings_warn) == (2, 1)
    assert two_fails.gpu_summary == "2× NVIDIA H200"
    assert two_fails.hostname == "node-5"
    assert two_fails.verdict is Severity.FAIL
    assert two_fails.kind == "run" and two_fails.tool_version == "0.1.0"
    clean = by_id["aaaa00000009"]
    assert (clean.findings_fail, clean.findings_warn) == (0, 1)
    assert clean.verdict is Severity.WARN
    assert clean.gpu_summary == "no GPU"
    assert clean.started_at == T0 + timedelta(minutes=1)
    no_machine = by_id["aaaa00000001"]
    assert no_machine.hostname is None and no_machine.gpu_summary is None
    assert isinstance(no_machine, RunSummary)
    with pytest.raises(ValidationError):
        no_machine.kind = "other"  # type: ignore[misc]  # frozen record


def test_filters_are_in_the_query_so_an_old_match_is_found(store_url: str) -> None:
    """The newest run is not the one asked for: the filter narrows before the limit, so the
    oldest run that matches comes back even with limit=1 (a list filtered after reading
    the newest N would have dropped it)."""
    old = make_run(0, run_id="bbbb00000000", gpus=2, fails=0)  # node-0, 2 GPUs, WARN
    newer = [make_run(n, run_id=f"bbbb0000000{n}", fails=1) for n in range(1, 6)]  # FAIL
    with Store(store_url) as store:
        for run in (old, *newer):
            store.save(run)
        assert [s.id for s in store.list_runs(limit=1)] == ["bbbb00000005"]
        assert [s.id for s in store.list_runs(limit=1, host="NODE-0")] == ["bbbb00000000"]
        assert [s.id for s in store.list_runs(limit=1, gpu="2× nvidia")] == ["bbbb00000000"]
        assert [s.id for s in store.list_runs(limit=1, verdict=Severity.WARN)] == [
            "bbbb00000000"]
        assert [s.id for s in store.list_runs(since=T0 + timedelta(minutes=4))] == [
            "bbbb00000005", "bbbb00000004"]
        assert store.list_runs(host="node-%") == []  # LIKE's wildcards are literal here
        assert store.list_runs(host="node-1", verdict=Severity.WARN) == []  # filters combine
        assert store.run_kinds() == {"run": 6}



def test_saving_the_same_id_twice_is_refused(store_url: str) -> None:
    run = make_run(run_id="dddd00000001")
    with Store(store_url) as store:
        store.save(run)
        with pytest.raises(GpuauditError, match="run dddd00000001 already stored") as dup:
            store.save(run.model_copy(update={"kind": "bench"}))
        assert dup.value.exit_code == 1
        assert store.get(run.id) == run  # the first one is untouched
        assert len(store.list_runs()) == 1
    assert count_rows(store_url, "findings") == 3  # nothing half-written by the second save


def test_a_newer_store_schema_is_refused(store_url: str) -> None:
    Store(store_url).close()
    engine = raw_engine(store_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE gpuaudit_meta SET value = '99'"
                             " WHERE key = 'store_schema_version'"))
    engine.dispose()
    with pytest.raises(BadInputError, match=r"store schema 99.*upgrade gpuaudit"):
        Store(store_url)


def test_a_database_failure_after_opening_is_one_line(store_url: str) -> None:
    with Store(store_url) as store:
        engine = raw_engine(store_url)
        with engine.begin() as conn:  # someone else wrecks the database under the store
            for table in ("measurements", "findings", "run_gpus", "run_nodes", "runs"):
                conn.execute(sa.text(f"DROP TABLE {table}"))
        engine.dispose()
        for action in (store.list_runs, lambda: store.get("abcd"),
                       lambda: store.save(make_run())):
            with pytest.raises(GpuauditError, match="database error") as caught:
                action()
            assert "\n" not in str(caught.value) and "runs" in str(caught.value)
            assert ":gpuaudit@" not in str(caught.value)  # the CI password, masked


# -- several processes ----------------------------------------------------------------------


def _writer(url: str, worker: int, count: int, barrier: Any) -> None:
    barrier.wait(timeout=120)  # all open the (fresh) database at the same moment
    with Store(url) as store:
        for i in range(count):
            store.save(make_run(i, run_id=f"{worker:04x}{i:08x}"))


def test_concurrent_writers(store_url: str) -> None:
    workers, each = 4, 25
    barrier = SPAWN.Barrier(workers)
    procs = [SPAWN.Process(target=_writer, args=(store_url, w, each, barrier))
             for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * workers

    with Store(store_url) as store:
        listed = store.list_runs(limit=None)
        assert len(listed) == workers * each
        assert {s.id for s in listed} == {f"{w:04x}{i:08x}" for w in range(workers)
                                          for i in range(each)}
        for w in range(workers):
            for i in range(each):
                assert store.get(f"{w:04x}{i:08x}") == make_run(i, run_id=f"{w:04x}{i:08x}")
    assert count_rows(store_url, "findings") == workers * each * 3


def _crash_child(url: str, run_json: str, seen: Any) -> None:
    def hold(conn: sa.Connection, cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO MEASUREMENTS"):
            # Every row of the run is written, nothing committed: report that, then wait for
            # the parent's SIGKILL.
            rid = load_run(run_json).id
            counts = [conn.execute(sa.text(f"SELECT count(*) FROM {t} WHERE {c} = :rid"),
                                   {"rid": rid}).scalar_one()
                      for t, c in (("runs", "id"), ("findings", "run_id"),
                                   ("measurements", "run_id"))]
            seen.put(counts)
            signal.pause()

    sa.event.listen(sa.Engine, "after_cursor_execute", hold)
    with Store(url) as store:
        store.save(load_run(run_json))
    sys.exit(3)  # not reached: the hook never returns


def test_killed_writer_leaves_the_store_intact(store_url: str) -> None:
    before = [make_run(n, run_id=f"cccc{n:08d}") for n in range(3)]
    with Store(store_url) as store:
        for run in before:
            store.save(run)
    partial = make_run(7, run_id="deadbeef0007")
    seen = SPAWN.Queue()
    child = SPAWN.Process(target=_crash_child, args=(store_url, partial.model_dump_json(), seen))
    child.start()
    try:
        counts = seen.get(timeout=120)
    except queue.Empty:
        child.kill()
        pytest.fail(f"the child never reached the hook (exit code {child.exitcode})")
    assert counts == [1, 3, 2]  # it was killed with the whole run written but not committed
    os.kill(child.pid, signal.SIGKILL)
    child.join(timeout=60)
    assert child.exitcode == -signal.SIGKILL

    with Store(store_url) as store:
        for run in before:
            assert store.get(run.id) == run
        with pytest.raises(RunNotFoundError):
            store.get(partial.id)
        assert {s.id for s in store.list_runs()} == {r.id for r in before}
        after = make_run(8, run_id="cccc00000008")
        store.save(after)  # the lock the child held is gone
        assert store.get("cccc00000008") == after
    for table in ("findings", "measurements"):
        assert count_rows(store_url, table, partial.id) == 0


# -- opening: URLs, paths, defaults ---------------------------------------------------------


def open_error(url: str | Path) -> str:
    with pytest.raises(BadInputError) as caught:
        Store(url)
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    assert caught.value.exit_code == 2
    return message


def test_unreachable_server_is_one_line_with_the_password_masked() -> None:
    message = open_error("postgresql://u:secret@127.0.0.1:1/x")
    assert "secret" not in message
    assert "postgresql://u:***@127.0.0.1:1/x" in message
    assert "refused" in message.lower()
    assert "secret" not in open_error("postgresql://u@127.0.0.1:1/x?password=secret")
    assert "secret" not in open_error("postgres://u:secret@127.0.0.1:1/x")
    unparsable = open_error("postgresql://u:s3cr3t@127.0.0.1:port/x")
    assert "cannot parse" in unparsable and "s3cr3t" not in unparsable


def test_unknown_dialect_and_missing_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "unknown database type 'notadialect'" in open_error("notadialect://x")
    monkeypatch.setitem(sys.modules, "MySQLdb", None)  # as if not installed
    message = open_error("mysql://u:secret@localhost/db")
    assert "not installed" in message and "MySQLdb" in message and "secret" not in message
    assert "empty" in open_error("")


def test_sqlite_path_that_cannot_be_created(tmp_path: Path) -> None:
    blocker = tmp_path / "plain-file"
    blocker.write_text("not a directory")
    for url in (blocker / "sub" / "x.db", f"sqlite:///{blocker}/sub/x.db"):
        message = open_error(url)
        assert f"{blocker} is not a directory" in message
    assert "is not a file" in open_error(tmp_path)  # a directory where the file should be


def test_a_file_that_is_not_sqlite_is_refused_and_left_alone(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    content = b"this is not an SQLite database, only some bytes " * 100
    junk.write_bytes(content)
    assert "not a database" in open_error(junk)
    assert "not a database" in open_error(f"sqlite:///{junk}")
    assert junk.read_bytes() == content


def test_bare_path_creates_a_wal_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "runs.db"
    run = make_run()
    with Store(path) as store:
        store.save(run)
        with store._engine.connect() as conn:  # the settings every connection gets
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 10_000
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert db.execute("SELECT id FROM runs").fetchall() == [(run.id,)]
        assert db.execute("SELECT value FROM gpuaudit_meta").fetchall() == [
            (str(STORE_SCHEMA_VERSION),)]
    assert Store(str(path)).get(run.id) == run


def test_gpuaudit_db_overrides_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'env.db'}"
    monkeypatch.setenv("GPUAUDIT_DB", url)
    monkeypatch.setattr(platformdirs, "user_data_dir", lambda *a, **k: pytest.fail("consulted"))
    assert default_db_url() == url
    run = make_run()
    with Store() as store:
        store.save(run)
    assert Store(url).get(run.id) == run


def test_default_is_a_file_in_the_user_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    def data_dir(appname: str, *args: Any, **kwargs: Any) -> str:
        asked.append(appname)
        return str(tmp_path / "data" / appname)

    monkeypatch.delenv("GPUAUDIT_DB", raising=False)
    monkeypatch.setattr(platformdirs, "user_data_dir", data_dir)
    expected = tmp_path / "data" / "gpuaudit" / "gpuaudit.db"
    assert default_db_url() == f"sqlite:///{expected}"
    assert asked == ["gpuaudit"]
    assert expected.parent.is_dir()
    run = make_run()
    with Store() as store:
        store.save(run)
    assert expected.is_file()
    assert Store(expected).get(run.id) == run


@pytest.mark.postgres
def test_postgres_wrong_password_is_one_line_and_masked() -> None:
    url = sa.make_url(pg_base_url()).set(password="wrong-secret")
    message = open_error(url.render_as_string(hide_password=False))
    assert "wrong-secret" not in message
    assert "authentication failed" in message
