"""`recommend`, `catalog` and the root help end without the interpreter's teardown when it
would only free memory: their output complete, their exit code kept; not when an exit
handler or another thread is left."""

from __future__ import annotations

import atexit
import json
import sys
import threading

import pytest

from gpuaudit.cli import entry
from tests.support.cli import assert_one_line_error, gpuaudit


class _Exited(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


@pytest.fixture
def exits(monkeypatch):
    """os._exit recorded instead of taken; no exit handler registered (pytest's own
    logging registers one in this process)."""
    def _exit(status: int) -> None:
        raise _Exited(status)

    monkeypatch.setattr(entry.os, "_exit", _exit)
    monkeypatch.setattr(atexit, "_ncallbacks", lambda: 0, raising=False)
    return monkeypatch


@pytest.mark.parametrize("command", ["recommend", "catalog", None])
@pytest.mark.parametrize("code, status", [(0, 0), (None, 0), (2, 2)])
def test_a_light_command_leaves_at_once_with_its_status(exits, command, code, status):
    with pytest.raises(_Exited) as left:
        entry._end(code, command)
    assert left.value.status == status


def test_a_message_as_exit_code_is_printed_and_exits_1(exits, capsys):
    with pytest.raises(_Exited) as left:
        entry._end("gpuaudit: error: bad", "recommend")
    assert left.value.status == 1
    assert capsys.readouterr().err == "gpuaudit: error: bad\n"


def test_the_interpreter_ends_it_when_something_is_left(exits):
    exits.setattr(atexit, "_ncallbacks", lambda: 1)  # e.g. logging, a temporary folder
    assert entry._end(0, "recommend") is None
    exits.setattr(atexit, "_ncallbacks", lambda: 0)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert entry._end(0, "catalog") is None
    finally:
        stop.set()
        other.join()
    # Other commands (a store, a server, NVML) always end the usual way.
    assert entry._end(0, "cost") is None
    exits.delitem(sys.modules, "torch", raising=False)
    assert entry._end(0, "run") is None  # torch not loaded


def test_without_cpythons_count_of_exit_handlers_it_ends_the_usual_way(exits):
    exits.delattr(atexit, "_ncallbacks", raising=False)
    assert entry._end(0, "recommend") is None


def test_the_whole_output_arrives_and_errors_keep_their_code(tmp_path):
    proc = gpuaudit("recommend", "train", "--params", "1B", "--tokens", "10B", "--top", "50",
                    "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # all of it: a cut document does not parse
    assert doc["ranked"] and doc["considered"] >= len(doc["ranked"])
    listed = gpuaudit("catalog", "list")
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) > 10, listed.stderr
    assert_one_line_error(gpuaudit("recommend", "train", "--params", "-1B", "--tokens", "1T"),
                          "--params")
    assert_one_line_error(gpuaudit("catalog", "show", "no-such/offer"), "no-such")
