"""Reading never writes: read-only opening, foreign databases, missing stores, read-only file
systems, locks, and what error messages may show of a password. Real SQLite files and (marked
`postgres`) the real PostgreSQL server; the read-only file system is a real read-only bind
mount made in a private mount namespace (see `readonly_mount`)."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import platformdirs
import pytest
import sqlalchemy as sa

import gpuaudit.store.database as store_module
from gpuaudit.errors import BadInputError, GpuauditError
from gpuaudit.model import GpuSample, Sample
from gpuaudit.store import RunNotFoundError, Store, StoreNotFoundError, mask_secrets
from tests.conftest import cli_env, pg_base_url
from tests.support.cli import FIX, assert_one_line_error, gpuaudit
from tests.support.stores import (
    T0,
    create_v1_database,
    make_run,
    raw_engine,
    stored_version_and_tables,
)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tables(url: str) -> set[str]:
    engine = raw_engine(url)
    try:
        with engine.connect() as conn:
            return set(sa.inspect(conn).get_table_names())
    finally:
        engine.dispose()


def sample(host: str = "node-a", seconds: int = 0) -> Sample:
    return Sample(time=T0.replace(second=seconds), hostname=host, interval_s=1.0,
                  gpus=(GpuSample(index=0, utilization_gpu_pct=0, power_w=80.0),))


# -- missing stores create nothing ----------------------------------------------------------


def test_reading_a_mistyped_path_says_so_and_creates_nothing(tmp_path: Path) -> None:
    typo = tmp_path / "nowhere" / "runz.db"
    for url in (typo, str(typo), f"sqlite:///{typo}"):
        with pytest.raises(StoreNotFoundError, match=f"no store at {typo}") as caught:
            Store(url, read_only=True)
        assert caught.value.exit_code == 2
    assert not typo.parent.exists()
    assert_one_line_error(gpuaudit("runs", "--db", str(typo)), "no store at", str(typo))
    assert_one_line_error(gpuaudit("show", "abcd", "--db", str(typo)), "no store at")
    assert_one_line_error(gpuaudit("monitor", "history", "--db", str(typo)), "no store at")
    assert not typo.parent.exists()


def test_the_default_store_before_anything_was_saved_reads_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    monkeypatch.delenv("GPUAUDIT_DB", raising=False)
    monkeypatch.setattr(platformdirs, "user_data_dir", lambda app, *a, **k: str(data / app))
    with Store(read_only=True) as store:
        assert store.list_runs() == []
        assert store.history() == []
        with pytest.raises(RunNotFoundError, match="nothing is stored yet"):
            store.get("abcd")
        with pytest.raises(GpuauditError, match="opened read-only"):
            store.save(make_run())
    assert not data.exists()  # not even the data directory
    with Store() as writer:  # writing creates it, and reading then finds the run
        writer.save(make_run(run_id="abcd00000001"))
    with Store(read_only=True) as store:
        assert [s.id for s in store.list_runs()] == ["abcd00000001"]


def test_reading_an_empty_database_finds_no_store_and_leaves_it_empty(store_url: str) -> None:
    with pytest.raises(StoreNotFoundError) as caught:
        Store(store_url, read_only=True)
    assert caught.value.exit_code == 2 and "nothing was ever saved there" in str(caught.value)
    if store_url.startswith("sqlite"):
        assert not Path(sa.make_url(store_url).database).exists()
    else:
        assert tables(store_url) == set()


# -- foreign databases ----------------------------------------------------------------------


def plant_foreign_tables(url: str) -> None:
    """Someone else's database: an app table, and one named like ours."""
    engine = raw_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE bookmarks (id INTEGER PRIMARY KEY, url TEXT)"))
        conn.execute(sa.text("CREATE TABLE runs (id INTEGER PRIMARY KEY, km REAL)"))
        conn.execute(sa.text("INSERT INTO runs (id, km) VALUES (1, 5.2)"))
    engine.dispose()


def test_a_foreign_database_is_refused_for_reading_and_writing(store_url: str) -> None:
    plant_foreign_tables(store_url)
    path = Path(sa.make_url(store_url).database or "")
    before = digest(path) if store_url.startswith("sqlite") else None
    for read_only in (True, False):
        with pytest.raises(BadInputError) as caught:
            Store(store_url, read_only=read_only)
        message = str(caught.value)
        assert "is not a gpuaudit store" in message and "bookmarks, runs" in message
        assert "\n" not in message
    assert tables(store_url) == {"bookmarks", "runs"}  # none of ours added
    if before is not None:
        assert digest(path) == before
        assert not Path(f"{path}-wal").exists()


def test_runs_on_someone_elses_sqlite_file_is_one_line_and_leaves_it_alone(
    tmp_path: Path,
) -> None:
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE notes (body TEXT)")
        db.execute("INSERT INTO notes VALUES ('keep me')")
    db.close()
    before = digest(other)
    assert_one_line_error(gpuaudit("runs", "--db", str(other)), "not a gpuaudit store", "notes")
    snap = str(FIX / "h200-1gpu" / "inspect.json")
    assert_one_line_error(gpuaudit("inspect", "--from", snap, "--save", "--db", str(other)),
                          "not a gpuaudit store")
    assert digest(other) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.sqlite"]


# -- what reading may do ----------------------------------------------------------------------


def test_a_read_only_store_cannot_write_even_underneath(store_url: str) -> None:
    run = make_run(run_id="abcd00000001")
    with Store(store_url) as writer:
        writer.save(run)
    with Store(store_url, read_only=True) as store:
        assert store.get("abcd") == run
        for write in (lambda: store.save(make_run()), lambda: store.save_sample(sample()),
                      lambda: store.compact()):
            with pytest.raises(GpuauditError, match="opened read-only"):
                write()
        # The connection itself refuses writes (SQLite mode=ro; PostgreSQL read-only
        # transactions), so no code path of the store can write while reading.
        assert store._engine is not None
        with pytest.raises(sa.exc.DBAPIError, match=r"(?i)read-?only"), \
                store._engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM runs"))
    with Store(store_url, read_only=True) as store:
        assert [s.id for s in store.list_runs()] == [run.id]


def test_reading_an_old_store_leaves_it_at_its_version(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = create_v1_database(store_url, monkeypatch)
    with Store(store_url, read_only=True) as store:
        assert [store.get(r.id) for r in runs] == runs
        assert store.history() == []  # schema 1 has no telemetry tables
    version, found = stored_version_and_tables(store_url)
    assert version == "1" and "telemetry_raw" not in found


# -- read-only file systems ---------------------------------------------------------------


def readonly_prefix() -> list[str] | None:
    """A command prefix that runs what follows with the directory given as its first argument
    mounted read-only, in a private mount namespace (gone when the command exits, nothing
    left mounted), or None where no such namespace can be made. Root: `unshare -m`; anyone
    else: a user namespace (`unshare -rm`). chmod would not do: it does not stop root."""
    script = ('mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && shift && '
              'exec "$@"')
    if shutil.which("unshare") is None:
        return None
    for flags in (["-m"], ["-r", "-m"]):
        probe = subprocess.run(["unshare", *flags, "sh", "-c", script, "sh", "/tmp", "true"],
                               capture_output=True, timeout=30)
        if probe.returncode == 0:
            return ["unshare", *flags, "sh", "-c", script, "sh"]
    return None


def gpuaudit_ro(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    prefix = readonly_prefix()
    if prefix is None:
        pytest.skip("cannot make a read-only mount here (needs unshare and mount rights)")
    env = cli_env(COLUMNS="160",
                  XDG_DATA_HOME=str(directory / "data"))  # even the fallback is read-only
    return subprocess.run([*prefix, str(directory), sys.executable, "-m", "gpuaudit", *args],
                          capture_output=True, text=True, env=env, timeout=120)


def test_a_store_on_a_read_only_file_system_is_read_and_not_written(tmp_path: Path) -> None:
    path = tmp_path / "store" / "gpuaudit.db"
    run = make_run(run_id="abcd00000001")
    with Store(path) as store:  # a WAL file, cleanly closed: no -wal/-shm left beside it
        store.save(run)
        store.save_sample(sample())
    directory = path.parent
    assert sorted(p.name for p in directory.iterdir()) == ["gpuaudit.db"]
    before = digest(path)

    listed = gpuaudit_ro(directory, "runs", "--json", "--db", str(path))
    assert listed.returncode == 0, listed.stderr
    assert [r["id"] for r in json.loads(listed.stdout)] == [run.id]
    shown = gpuaudit_ro(directory, "show", "abcd", "--json", "--db", str(path))
    assert json.loads(shown.stdout)["id"] == run.id, shown.stderr
    history = gpuaudit_ro(directory, "monitor", "history", "--since", "2025-03-01T11:00:00Z",
                          "--until", "2025-03-01T13:00:00Z", "--json", "--db", str(path))
    assert [p["power_w"] for p in json.loads(history.stdout)["points"]] == [80.0]

    # Writing is refused before any work: `run` would inspect and benchmark first.
    started = time.monotonic()
    refused = gpuaudit_ro(directory, "run", "--json", "--db", str(path))
    assert_one_line_error(refused, "read-only file system", str(directory))
    assert refused.stdout == ""
    assert time.monotonic() - started < 60
    snap = str(FIX / "h200-1gpu" / "inspect.json")
    assert_one_line_error(gpuaudit_ro(directory, "inspect", "--from", snap, "--save", "--db",
                                      str(directory / "new.db")), "read-only file system")
    assert digest(path) == before
    assert sorted(p.name for p in directory.iterdir()) == ["gpuaudit.db"]


# -- locks ------------------------------------------------------------------------------------


HOLD = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
if sys.argv[2] == "readers":  # WAL readers wait for nobody, except an exclusive-mode holder
    db.execute("PRAGMA locking_mode = EXCLUSIVE")
db.execute("BEGIN EXCLUSIVE")
db.execute("INSERT INTO gpuaudit_meta (key, value) VALUES ('held', 'x')")
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


@pytest.fixture
def locked(tmp_path: Path):
    """A store whose lock another process holds: yields (path, that process's pid, start)."""
    path = tmp_path / "locked.db"
    Store(path).close()

    def hold(whom: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), whom], text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        holders.append(proc)
        return proc

    holders: list[subprocess.Popen[str]] = []
    yield path, hold
    for proc in holders:
        proc.communicate(timeout=30)


def test_a_locked_store_gives_up_soon_and_names_the_lock(
    locked, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, hold = locked
    monkeypatch.setattr(store_module, "SQLITE_WRITE_TIMEOUT_S", 1.0)
    monkeypatch.setattr(store_module, "SQLITE_READ_TIMEOUT_S", 0.5)
    with Store(path) as store:  # opened (which takes the lock briefly) before it is held
        writer = hold("writers")
        started = time.monotonic()
        with pytest.raises(GpuauditError) as caught:
            store.save(make_run())
        assert time.monotonic() - started < 5
    message = str(caught.value)
    assert f"{path} is locked by another process ({writer.pid} (python" in message
    assert "gave up after 1 s" in message and "\n" not in message
    writer.communicate(timeout=30)

    reader_blocker = hold("readers")
    with pytest.raises(BadInputError) as caught:
        Store(path, read_only=True)
    assert f"is locked by another process ({reader_blocker.pid} (python" in str(caught.value)
    assert "gave up after 0.5 s" in str(caught.value)


def test_runs_on_a_locked_store_is_a_prompt_one_line_error(locked) -> None:
    path, hold = locked
    holder = hold("readers")
    started = time.monotonic()
    proc = gpuaudit("runs", "--db", str(path))
    assert time.monotonic() - started < 20  # the read timeout is 3 s, not 30
    assert_one_line_error(proc, "is locked by another process", str(holder.pid),
                          "gave up after 3 s")


# -- passwords in messages ------------------------------------------------------------------


def test_only_password_fields_are_masked() -> None:
    assert mask_secrets("connection refused") == "connection refused"
    assert mask_secrets("postgresql://u:e@h:5432/db: connection refused") == (
        "postgresql://u:***@h:5432/db: connection refused")
    assert mask_secrets("postgresql://u@h/db?sslmode=require&password=e&x=1") == (
        "postgresql://u@h/db?sslmode=require&password=***&x=1")
    assert mask_secrets("host=h user=u password='e s' dbname=d") == (
        "host=h user=u password=*** dbname=d")
    assert mask_secrets("mysql://:e@h/db and sqlite:////tmp/e.db") == (
        "mysql://:***@h/db and sqlite:////tmp/e.db")


def test_a_short_password_does_not_star_the_message() -> None:
    with pytest.raises(BadInputError) as caught:
        Store("postgresql://u:e@127.0.0.1:1/x")
    message = str(caught.value)
    assert "postgresql://u:***@127.0.0.1:1/x" in message
    assert "refused" in message.lower() and "***ction" not in message


@pytest.mark.postgres
def test_a_wrong_short_password_leaves_the_servers_words_intact() -> None:
    url = sa.make_url(pg_base_url()).set(password="a")
    with pytest.raises(BadInputError) as caught:
        Store(url.render_as_string(hide_password=False))
    message = str(caught.value)
    assert "password authentication failed" in message  # not "p***ssword"
    assert ":a@" not in message and ":***@" in message
