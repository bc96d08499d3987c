"""Ctrl-C at any moment of `gpuaudit run`: what finished is saved and marked partial, one line
says so, exit code 130, and it is never ignored. SIGINT is sent to the real command at points
from the command line's own start-up to the middle of the suites, one of them while torch is
being imported (libtorch mapped, the import not yet done)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpuaudit import interrupt
from tests.conftest import cli_env

# The run itself takes 15-40 s on a 2-core machine: an ignored Ctrl-C shows as a run that
# goes on; a handled one ends within a few seconds (the save takes well under one). The
# middle of the suites is found by the run's own progress lines, not by a time that a fast
# machine may already have passed.
ENDS_WITHIN_S = 20


def mapped(pid: int, name: str) -> bool:
    try:
        return any(name in m.path for m in psutil.Process(pid).memory_maps())
    except psutil.Error:
        return False


def ctrl_c_run(tmp_path: Path, when: str) -> tuple[subprocess.CompletedProcess, float, list]:
    """`gpuaudit run` on a fresh store, SIGINT at `when`: seconds after the start, 'torch'
    (libtorch just mapped: its import under way), 'torch+N' (N s after that), 'step:TEXT'
    (its progress line on stderr names TEXT) or 'collectives' (their workers running)."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    proc = subprocess.Popen([sys.executable, "-m", "gpuaudit", "run", "--db", db],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env(COLUMNS="100"))
    start = time.monotonic()
    # both streams read as they come (a full pipe would stop the run), stderr line by line
    streams: dict[str, list[str]] = {"out": [], "err": []}
    seen = threading.Event()

    def read(name: str, f: Any) -> None:
        for line in f:
            streams[name].append(line)
            # a progress line: `[   12s] 7/11 train gpt-tiny ...`
            if when.startswith("step:") and re.match(rf"\[ *\d+s\] (\d+/\d+ )?{when[5:]}",
                                                     line):
                seen.set()

    readers = [threading.Thread(target=read, args=(n, f), daemon=True)
               for n, f in (("out", proc.stdout), ("err", proc.stderr))]
    for r in readers:
        r.start()
    if when.startswith("step:"):
        while not seen.wait(0.05) and proc.poll() is None and time.monotonic() - start < 180:
            pass
    elif when == "collectives":  # its workers started: matmul and memory are done by then
        def workers() -> bool:
            try:
                return any("collectives_worker" in " ".join(c.cmdline())
                           for c in psutil.Process(proc.pid).children(recursive=True))
            except psutil.Error:
                return False

        while not workers() and proc.poll() is None and time.monotonic() - start < 180:
            time.sleep(0.05)
    elif when.startswith("torch"):
        while not mapped(proc.pid, "libtorch_cpu") and proc.poll() is None \
                and time.monotonic() - start < 120:
            time.sleep(0.01)
        time.sleep(float(when.partition("+")[2] or 0))
    else:
        time.sleep(float(when))
    assert proc.poll() is None, "the run ended before the Ctrl-C"
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    proc.wait(timeout=180)
    took = time.monotonic() - sent
    for r in readers:
        r.join(timeout=10)
    out, err = "".join(streams["out"]), "".join(streams["err"])
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    runs = []
    if (tmp_path / "runs.db").exists():
        listing = subprocess.run([sys.executable, "-m", "gpuaudit", "runs", "--json", "--db",
                                  db], capture_output=True, text=True, env=cli_env(),
                                 timeout=120)
        for r in json.loads(listing.stdout or "[]"):
            shown = subprocess.run([sys.executable, "-m", "gpuaudit", "show", r["id"],
                                    "--json", "--db", db], capture_output=True, text=True,
                                   env=cli_env(), timeout=120)
            runs.append(json.loads(shown.stdout))
    return done, took, runs


@pytest.mark.parametrize("when", ["0.3", "torch", "torch+1.5", "6", "step:train"])
def test_ctrl_c_at_any_moment_keeps_what_finished(tmp_path, when):
    pytest.importorskip("torch")
    done, took, runs = ctrl_c_run(tmp_path, when)
    assert done.returncode == 130, (done.stdout[-2000:], done.stderr[-2000:])
    assert took < ENDS_WITHIN_S, f"the Ctrl-C was not acted on for {took:.0f} s"
    assert "Traceback" not in done.stderr, done.stderr
    said = [ln for ln in (done.stdout + done.stderr).splitlines() if "interrupted" in ln]
    assert len(said) == 1, said  # one line says so
    assert len(runs) <= 1
    if runs:  # something had finished: it is saved, marked partial, the inspection with it
        (run,) = runs
        assert run["status"] == "partial" and run["kind"] == "run"
        assert "saved as run " + run["id"] in said[0] and "partial" in said[0]
        assert run["machine"] is not None and run["findings"], run  # the inspection
    else:
        assert "nothing" in said[0] or said[0].startswith("gpuaudit: interrupted"), said


def test_a_ctrl_c_in_the_suites_keeps_the_figures(tmp_path):
    pytest.importorskip("torch")
    done, _, runs = ctrl_c_run(tmp_path, "collectives")
    assert done.returncode == 130
    (run,) = runs
    assert run["status"] == "partial"
    assert any(m["value"] is not None for m in run["measurements"]), run["suite_seconds"]


def test_a_swallowed_ctrl_c_is_raised_again_at_the_next_step():
    """Code that catches everything (as some libraries' imports do) cannot make the run go
    on: the handler remembers the Ctrl-C and `check()` raises it again."""
    with interrupt.installed():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the signal is taken here, as KeyboardInterrupt
        except BaseException:
            pass
        assert interrupt.pending()
        with pytest.raises(KeyboardInterrupt):
            interrupt.check()
        interrupt.clear()
        interrupt.check()  # dealt with: nothing raised


def test_a_shielded_save_is_not_cut_short():
    with interrupt.installed():
        finished = False
        with interrupt.shielded():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
            finished = True
        assert finished and interrupt.pending()
        with pytest.raises(KeyboardInterrupt):
            interrupt.check()
        interrupt.clear()
