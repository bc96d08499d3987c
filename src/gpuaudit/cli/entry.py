"""The `gpuaudit` program: what happens around the command line itself.

- Ctrl-C while Python is still loading the command line (typer, rich, our modules) ends the
  program at once with one line and exit code 130: nothing has started, nothing is lost. Once
  a command runs, `gpuaudit.interrupt` takes over (KeyboardInterrupt, remembered).
- `run` and `bench` start importing torch (and torch._dynamo, which the training suite's
  optimizer needs) in a thread first thing, before the command line's own modules load, and
  it goes on while they load and the machine is read. The runner waits for it to end before
  it times anything: that import is the longest thing before the first figure.
- While the command line loads (typer, click, our modules), Python's cyclic garbage collector
  is off: loading makes only objects that live as long as the process, which the collector,
  run every 700 new objects, would go over again and again (a tenth of a fast command's
  time). They are then frozen (left out of every later collection) and the collector runs
  as usual for the command itself.
- After `run` or `bench` (which load torch), the process ends without tearing torch and CUDA
  down (about 1.5 s on a GPU machine), once everything is saved, written and flushed: the
  operating system and the driver free what is left. Their worker processes and temporary
  folders are closed by the suites themselves before that.
- After `recommend`, `catalog` and the root help, the same, when nothing is left for the
  interpreter's own exit to do (no exit handler registered, no other thread): tearing down
  the modules and the catalog's 10,000 offers one object at a time is a tenth of what
  `recommend` costs (about 9 ms), and only frees memory the process gives back anyway.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
from typing import Any


def _interrupted_while_loading(signum: int, frame: Any) -> None:
    try:
        os.write(2, b"gpuaudit: interrupted (Ctrl-C)\n")
    finally:
        os._exit(130)


FAST_EXIT = frozenset({"run", "bench"})
# Commands that leave nothing to the interpreter's exit but memory to free (None: no command,
# the root help or --version).
LIGHT_EXIT = frozenset({"recommend", "catalog", None})


def _nothing_left() -> bool:
    """Whether the interpreter's exit would only free memory: no atexit handler (logging,
    weakref.finalize and temporary folders register one) and no other thread to wait for."""
    import atexit
    import threading

    handlers = getattr(atexit, "_ncallbacks", None)  # CPython's count; elsewhere: unknown
    return handlers is not None and handlers() == 0 and threading.active_count() == 1


def _end(code: object, command: str | None) -> None:
    """Leave now after a command of FAST_EXIT that loaded torch, or one of LIGHT_EXIT with
    nothing left to do (see the module doc); otherwise return."""
    if not ((command in FAST_EXIT and "torch" in sys.modules)
            or (command in LIGHT_EXIT and _nothing_left())):
        return
    status = code if isinstance(code, int) else (0 if code is None else 1)
    if not isinstance(code, int | None):
        sys.stderr.write(f"{code}\n")
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)


def _preload(command: str | None, args: list[str]) -> None:
    if command not in FAST_EXIT or {"-h", "--help", "--no-bench", "--serve"} & set(args):
        return
    from gpuaudit.torchload import preload_torch  # standard library only: starts at once

    words = [a for a in args if not a.startswith("-")][1:]
    # `run` runs every suite; `bench` with no suite named too (a value taken for a suite name
    # only decides whether torch._dynamo is imported early)
    preload_torch(("train",) if command == "run" or not words else words)


def main() -> None:
    # not the main thread of an interpreter with signals: Python's own handling stays
    with contextlib.suppress(ValueError, OSError):
        signal.signal(signal.SIGINT, _interrupted_while_loading)
    command = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    _preload(command, sys.argv[1:])  # before the command line's modules load, not after
    gc.disable()
    try:
        from gpuaudit.cli.app import main as run_app
    finally:
        gc.freeze()
        gc.enable()

    try:
        run_app()
    except SystemExit as exc:
        _end(exc.code, command)
        raise
