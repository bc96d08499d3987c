from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

FIXTURES = Path(__file__).parent / "fixtures"
SRC = Path(__file__).resolve().parent.parent / "src"
PG_ENV = "GPUAUDIT_TEST_PG_URL"


def src_pythonpath() -> str:
    """This checkout's src first, then the PYTHONPATH this process had: on the GPU machine that
    holds the carried wheels (/tmp/site), which a child must keep."""
    return os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH")) if p)


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for a gpuaudit (or Python) child process: this one's, with src first on
    PYTHONPATH (after it, whatever PYTHONPATH was set), and `extra` on top."""
    return {**os.environ, "PYTHONPATH": src_pythonpath(), **extra}


@functools.cache
def gpu_count() -> int:
    from gpuaudit.hw import LiveNvml, NvmlUnavailable

    try:
        nvml = LiveNvml()
    except NvmlUnavailable:
        return 0
    try:
        return nvml.query("nvmlDeviceGetCount")
    finally:
        nvml.close()


@pytest.fixture(autouse=True, scope="session")
def _own_user_dirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """No test reads or writes the real user's store, catalog or kept runs: the user data and
    config directories (platformdirs follows XDG_*) point into the test's temporary tree, for
    this process and every gpuaudit it starts."""
    root = tmp_path_factory.mktemp("user")
    mp = pytest.MonkeyPatch()
    for var in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        mp.setenv(var, str(root / var.lower()))
    mp.delenv("GPUAUDIT_DB", raising=False)
    yield
    mp.undo()


@dataclasses.dataclass(frozen=True)
class FedRun:
    """One `gpuaudit run --json` and where it kept things."""

    done: subprocess.CompletedProcess[str]
    data: Path  # the --data directory (it must be left empty)


@pytest.fixture(scope="session")
def fed_run(tmp_path_factory: pytest.TempPathFactory) -> FedRun:
    """`gpuaudit run --json --data DIR --job JOB` as users run it, once for the session: a whole
    run (inspect and every quick suite, about half a minute on CI's 2 cores) whose output
    several tests read, each asserting its own things: the feed verdict (tests/bench), the
    JSON document on stdout (tests/cli). The job, 1,000,000 samples/s of 110 KB JPEGs, is
    more than any machine of this size can feed."""
    from tests.support.cli import gpuaudit

    root = tmp_path_factory.mktemp("fed-run")
    data = root / "data"
    data.mkdir()
    done = gpuaudit("run", "--json", "--db", str(root / "runs.db"), "--data", str(data),
                    "--job", "1000000:110K:jpeg:random", timeout=600)
    return FedRun(done, data)


def pytest_collection_modifyitems(config, items):
    if gpu_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and driver")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


EXIT_STATUS = pytest.StashKey[int]()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    session.config.stash[EXIT_STATUS] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """A run whose tests ran torch's profiler on a GPU ends once pytest is done, without the
    interpreter's teardown: there kineto's CUPTI detach (TEARDOWN_CUPTI, which our profiling
    sets) was left pending, and on an H200 the process stayed past its summary for minutes
    with no Python left to show (as `gpuaudit run` and `bench` end, `cli/entry.py`)."""
    torch = sys.modules.get("torch")
    if os.environ.get("TEARDOWN_CUPTI") != "1" or torch is None \
            or not torch.cuda.is_initialized():
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(config.stash.get(EXIT_STATUS, 1))


def load_fixture(name: str, file: str = "inspect.json") -> dict:
    return json.loads((FIXTURES / name / file).read_text())


def fixture_machine(name: str = "h200-1gpu"):
    """The Machine recorded on a real H200 box (`tests/fixtures/<name>/inspect.json`)."""
    from gpuaudit.model import Machine

    return Machine.model_validate(load_fixture(name)["machine"])


def pg_base_url() -> str:
    url = os.environ.get(PG_ENV)
    if url:
        return url
    if os.environ.get("CI") == "true":
        pytest.fail(f"{PG_ENV} is not set, and CI must test PostgreSQL: run .ci/postgres.sh")
    pytest.skip(f"{PG_ENV} is not set (eval \"$(.ci/postgres.sh)\" to test PostgreSQL)")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    base = sa.make_url(pg_base_url()).set(drivername="postgresql+psycopg")
    name = f"gpuaudit_t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        # Plain postgresql://, as a user would write it: the store must pick psycopg 3 itself.
        yield base.set(drivername="postgresql", database=name).render_as_string(
            hide_password=False)
    finally:
        _drop_database(admin, name)
        admin.dispose()


def _drop_database(admin: sa.Engine, name: str) -> None:
    """FORCE: a SIGKILLed child's server session may not have gone away yet. A session of
    another role (autovacuum on the new tables, as seen in CI) cannot be ended by us: wait
    for it a few seconds rather than fail the test's teardown."""
    for attempt in range(20):
        try:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            return
        except sa.exc.ProgrammingError:
            if attempt == 19:
                raise
            time.sleep(0.25)
