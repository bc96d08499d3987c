"""The feed benchmarks' worker processes: started together, errors carried back, none left
behind by Ctrl-C or by a parent that dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gpuaudit.bench.feed.procs import Workers, ctrl_c_held
from tests.conftest import cli_env

ROOT = Path(__file__).resolve().parents[2]


def _square_after_setup(x: int, ready) -> int:
    ready()
    return x * x


def _fails_in_setup(ready) -> None:
    raise ValueError("no such file")


def _dies_after_go(ready) -> None:
    ready()
    os._exit(3)


def _sleeps(seconds: float, ready) -> None:
    ready()
    time.sleep(seconds)


def test_results_come_back_in_order():
    with Workers(_square_after_setup, [(k,) for k in range(4)]) as w:
        assert w.results(timeout_s=30) == [0, 1, 4, 9]


def test_a_setup_error_is_raised_on_entry_with_the_workers_name():
    w = Workers(_fails_in_setup, [()], what="test worker")
    with pytest.raises(OSError, match="test worker failed: ValueError: no such file"), w:
        pass


def test_a_worker_that_dies_without_a_result_is_an_error_not_a_hang():
    with pytest.raises(OSError, match=r"died \(exit 3\)"), \
            Workers(_dies_after_go, [(), ()]) as w:
        w.results(timeout_s=30)


def test_a_worker_past_the_timeout_is_an_error_and_is_stopped():
    # A handler of the parent's that ignores SIGTERM must not keep a worker alive.
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        _timed_out_worker_is_stopped()
    finally:
        signal.signal(signal.SIGTERM, previous)


def _timed_out_worker_is_stopped() -> None:
    w = Workers(_sleeps, [(60.0,)])
    t0 = time.monotonic()
    with pytest.raises(OSError, match="did not answer in time"), w:
        w.results(timeout_s=0.5)
    assert time.monotonic() - t0 < 20
    assert not w.procs[0].is_alive()


def test_ctrl_c_during_the_worker_start_is_raised_after_it_not_inside():
    before = signal.getsignal(signal.SIGINT)
    reached = []
    with pytest.raises(KeyboardInterrupt), ctrl_c_held():
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the interpreter checks for signals between these
            reached.append(1)
    assert len(reached) == 1000
    assert signal.getsignal(signal.SIGINT) is before


def test_a_worker_whose_parent_dies_before_the_go_ends_instead_of_lingering(tmp_path: Path):
    data = tmp_path / "data"
    data.write_bytes(b"\0" * 4096)
    script = (
        "import os, sys\n"
        "from gpuaudit.bench.feed import storage as s\n"
        "from gpuaudit.bench.feed.procs import Workers\n"
        "w = Workers(s._rand_worker, [(sys.argv[1], False, 1, 0.1, 0)])\n"
        "w.procs[0].start()\n"
        "assert w.conns[0].recv()[0] == 'ready'\n"
        "print(w.procs[0].pid, flush=True)\n"
        "os._exit(0)  # gone without a go and without stopping its worker\n")
    env = cli_env()
    done = subprocess.run([sys.executable, "-c", script, str(data)], capture_output=True,
                          text=True, env=env, timeout=60)
    worker = int(done.stdout)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if psutil.Process(worker).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    else:
        psutil.Process(worker).kill()
        pytest.fail("the worker outlived its parent")
