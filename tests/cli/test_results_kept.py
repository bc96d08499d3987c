"""No result is lost to the store: the store is checked before the work, and a save that still
fails after it prints the results and keeps the run in a file the error names.

The CLI tests replace the work itself (inspect + benchmarks, which take a minute and need
nothing of the store) with a stand-in that returns a real inspected run from a recorded H200
snapshot, notes that it ran, and can break the store while it "works"; everything else (the
command, the store, the error path) is the real one, in a subprocess.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

import gpuaudit.store.database as store_module
from gpuaudit.errors import BadInputError
from gpuaudit.model import load_run
from gpuaudit.store import Store, UnsavedRunError, check_store, keep_run, save_or_keep
from tests.conftest import cli_env
from tests.support.cli import FIX, assert_one_line_error, validate_run
from tests.support.stores import make_run

SNAPSHOT = FIX / "faults" / "ecc-uncorrectable.json"  # a FAIL finding: exit 1 when saved

STAND_IN = """
import os, sys
from pathlib import Path
import gpuaudit.audit, gpuaudit.bench.runner
from gpuaudit.inspect import inspect_machine, read_snapshot

def work(*args, **kwargs):
    Path(os.environ["WORKED"]).write_text("the work ran")
    broken = os.environ.get("BREAK_STORE")
    if broken:  # the store's path is taken by a directory while we work
        Path(broken).unlink(missing_ok=True)
        Path(broken).mkdir()
    snapshot = Path(os.environ["SNAPSHOT"])
    return inspect_machine(read_snapshot(snapshot), source=str(snapshot)).model_copy(
        update={"kind": "run"})

gpuaudit.audit.audit = work
gpuaudit.bench.runner.run_bench = work
from gpuaudit.cli.app import main
sys.argv = ["gpuaudit", *sys.argv[1:]]
main()
"""


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nobody listens there once it is closed


def gpuaudit_standin(tmp_path: Path, *args: str, break_store: Path | None = None
                     ) -> tuple[subprocess.CompletedProcess[str], bool]:
    """The real CLI with the work replaced; returns the process and whether the work ran."""
    worked = tmp_path / "worked"
    worked.unlink(missing_ok=True)
    env = cli_env(COLUMNS="160", WORKED=str(worked), SNAPSHOT=str(SNAPSHOT),
                  XDG_DATA_HOME=str(tmp_path / "data"), GPUAUDIT_DB="")
    if break_store is not None:
        env["BREAK_STORE"] = str(break_store)
    proc = subprocess.run([sys.executable, "-c", STAND_IN, *args], capture_output=True,
                          text=True, env=env, timeout=120)
    return proc, worked.exists()


# -- before the work --------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["run"], ["bench", "matmul"]])
def test_an_unreachable_server_is_refused_before_the_work(tmp_path: Path,
                                                          command: list[str]) -> None:
    url = f"postgresql://u:pw@127.0.0.1:{closed_port()}/x"
    started = time.monotonic()
    proc, worked = gpuaudit_standin(tmp_path, *command, "--json", "--db", url)
    assert_one_line_error(proc, "refused", "postgresql://u:***@127.0.0.1")
    assert not worked and proc.stdout == ""
    assert time.monotonic() - started < 60
    assert not (tmp_path / "data").exists()  # nothing to keep: nothing was measured


def test_no_save_does_not_need_a_store(tmp_path: Path) -> None:
    url = f"postgresql://u:pw@127.0.0.1:{closed_port()}/x"
    proc, worked = gpuaudit_standin(tmp_path, "run", "--json", "--no-save", "--db", url)
    assert worked and proc.returncode == 1, proc.stderr  # the snapshot's FAIL finding
    assert json.loads(proc.stdout)["kind"] == "run"


def test_check_store_opens_for_writing(tmp_path: Path) -> None:
    path = tmp_path / "new" / "s.db"
    assert check_store(path) == str(path)
    assert not path.parent.exists()  # checked, not created: the first save makes it
    with Store(path) as store:  # made now; a check opens it for writing
        assert store.list_runs() == []
    assert check_store(path) == str(path)
    (tmp_path / "file").write_text("in the way")
    with pytest.raises(BadInputError, match="is not a directory"):
        check_store(tmp_path / "file" / "s.db")
    with pytest.raises(BadInputError, match="refused"):
        check_store(f"postgresql://u:secret@127.0.0.1:{closed_port()}/x")


# -- after the work ---------------------------------------------------------------------------


def test_a_store_that_breaks_during_the_work_costs_no_result(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    proc, worked = gpuaudit_standin(tmp_path, "run", "--json", "--db", str(path),
                                    break_store=path)
    assert worked
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    printed = json.loads(proc.stdout)  # the results, on stdout as always
    validate_run(printed)
    [error] = [ln for ln in proc.stderr.splitlines() if ln.startswith("gpuaudit: error:")]
    assert f"run {printed['id']} was not saved" in error and "is not a file" in error
    kept = Path(error.rsplit("the run is kept in ", 1)[1])
    assert kept == tmp_path / "data" / "gpuaudit" / "unsaved" / f"run-{printed['id']}.json"
    assert json.loads(kept.read_text()) == printed
    assert "saved as run" not in proc.stderr


def test_the_terminal_view_is_printed_too(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    proc, _ = gpuaudit_standin(tmp_path, "bench", "--db", str(path), break_store=path)
    assert proc.returncode == 1
    assert "ecc.uncorrectable" in proc.stdout  # the finding, in the run's view
    assert proc.stderr.strip().splitlines()[-1].startswith("gpuaudit: error: run ")
    assert "the run is kept in" in proc.stderr


def test_save_or_keep_when_the_server_is_gone(tmp_path: Path) -> None:
    run = make_run()
    with pytest.raises(UnsavedRunError) as caught:
        save_or_keep(run, f"postgresql://u:secret@127.0.0.1:{closed_port()}/x",
                     directories=[tmp_path / "kept"])
    assert caught.value.exit_code == 1 and caught.value.run_id == run.id
    assert caught.value.kept_at == tmp_path / "kept" / f"run-{run.id}.json"
    assert load_run(caught.value.kept_at.read_text()) == run
    assert "secret" not in str(caught.value) and "\n" not in str(caught.value)


def test_save_or_keep_when_another_process_holds_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.db"
    Store(path).close()
    monkeypatch.setattr(store_module, "SQLITE_WRITE_TIMEOUT_S", 0.5)
    hold = ("import sqlite3, sys; db = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "db.execute('BEGIN IMMEDIATE'); print('held', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(path)], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        run = make_run()
        with pytest.raises(UnsavedRunError, match="is locked by another process") as caught:
            save_or_keep(run, path, directories=[tmp_path / "kept"])
    finally:
        holder.communicate(timeout=30)
    assert caught.value.kept_at is not None
    assert load_run(caught.value.kept_at.read_text()) == run
    with Store(path, read_only=True) as store:
        assert store.list_runs() == []  # nothing half-saved


@pytest.mark.parametrize(
    "store_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
def test_save_or_keep_when_the_database_was_dropped(store_url: str, tmp_path: Path) -> None:
    check_store(store_url)
    url = sa.make_url(store_url)
    admin = sa.create_engine(url.set(drivername="postgresql+psycopg", database="postgres"),
                             isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE "{url.database}" WITH (FORCE)')
    admin.dispose()
    run = make_run()
    with pytest.raises(UnsavedRunError, match="does not exist") as caught:
        save_or_keep(run, store_url, directories=[tmp_path])
    assert caught.value.kept_at is not None
    assert load_run(caught.value.kept_at.read_text()) == run


def test_keep_run_falls_back_and_says_when_nothing_took_it(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    run = make_run()
    assert keep_run(run, [blocker / "sub", tmp_path / "second"]) == (
        tmp_path / "second" / f"run-{run.id}.json")
    assert keep_run(run, [blocker / "sub"]) is None
    with pytest.raises(UnsavedRunError) as caught:
        save_or_keep(run, tmp_path / "a-file" / "s.db", directories=[blocker / "x"])
    assert caught.value.kept_at is None
    assert "could not be written to a file either" in str(caught.value)
    assert str(blocker / "x") in str(caught.value)
    assert sorted(p.name for p in (tmp_path / "second").iterdir()) == [f"run-{run.id}.json"]


@pytest.mark.parametrize(
    "store_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
def test_a_server_that_only_reads_is_refused_before_the_work(store_url: str) -> None:
    check_store(store_url)  # the store exists: opening it creates nothing that could fail
    # As a standby server or a read-only role answers: every transaction is read-only.
    read_only = sa.make_url(store_url).update_query_dict(
        {"options": "-c default_transaction_read_only=on"})
    with pytest.raises(BadInputError, match="read-only transaction") as caught:
        check_store(read_only.render_as_string(hide_password=False))
    assert "\n" not in str(caught.value) and ":gpuaudit@" not in str(caught.value)
