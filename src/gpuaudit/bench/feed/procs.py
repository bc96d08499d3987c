"""Worker processes for the feed benchmarks (storage I/O, JPEG decode), started so that none
outlives the parent.

Each worker sets up (opens its file, warms its decoder), reports ready on its own pipe and waits
for the parent's go, so the parent's clock starts when every worker is set up; the go reaches
them within microseconds of each other. A multiprocessing Barrier did this before: an
interrupted or terminated party leaves its shared condition broken, and the other parties then
wait for ever or fail an internal assertion. A worker whose parent is gone before the go ends.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

START_TIMEOUT_S = 60.0


@contextlib.contextmanager
def ctrl_c_held() -> Iterator[None]:
    """Ctrl-C waits until the block is done, then is raised. Raised between a fork and the
    child's registration it would leave a worker nobody stops, holding the terminal's pipes;
    raised in an at-fork hook it would be swallowed ("Exception ignored")."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def _await_go(conn: Any) -> None:
    import multiprocessing as mp
    from multiprocessing.connection import wait

    conn.send(("ready", None))
    parent = mp.parent_process()
    wait([conn, parent.sentinel] if parent is not None else [conn])
    if not conn.poll() or conn.recv() != "go":
        raise SystemExit(1)  # the parent is gone, or stopped before the go


def _child(target: Callable[..., Any], args: tuple[Any, ...], conn: Any) -> None:
    """In the worker: `target(*args, ready)` where `ready()` is called once set up; its
    return value, or its error as text, goes back to the parent. A forked worker inherits the
    parent's Python signal handlers: Ctrl-C is the parent's to handle (it stops the workers),
    and SIGTERM must end the worker, not run a handler of the parent's."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        conn.send(("ok", target(*args, lambda: _await_go(conn))))
    except Exception as exc:
        with contextlib.suppress(OSError):
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class Workers:
    """One process per argument tuple, each running `target(*args, ready)`. Entering starts
    them and returns once all have called `ready()` and been told to go; `results()` collects
    their return values in order. Leaving stops any still running if the block was
    interrupted. `what` names them in errors ("I/O worker failed: …")."""

    def __init__(self, target: Callable[..., Any], args: list[tuple[Any, ...]],
                 what: str = "worker") -> None:
        import multiprocessing as mp

        # Forked where the OS allows, as DataLoader starts its workers.
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        self.what = what
        self.conns: list[Any] = []
        self.child_ends: list[Any] = []
        self.procs: list[Any] = []
        self.started: list[Any] = []
        for a in args:
            parent, child = ctx.Pipe()
            self.conns.append(parent)
            self.child_ends.append(child)
            self.procs.append(ctx.Process(target=_child, args=(target, a, child), daemon=True))

    def __enter__(self) -> Workers:
        try:
            with ctrl_c_held():
                for p in self.procs:
                    p.start()
                    self.started.append(p)
            for c in self.child_ends:
                c.close()  # the workers hold their ends; without ours a dead one reads as EOF
            for conn, proc in zip(self.conns, self.procs, strict=True):
                self._receive(conn, proc, START_TIMEOUT_S)
            for conn in self.conns:
                conn.send("go")
        except BaseException:
            self._stop(interrupted=True)
            raise
        return self

    def _receive(self, conn: Any, proc: Any, timeout_s: float | None) -> Any:
        from multiprocessing.connection import wait

        got = None
        if wait([conn, proc.sentinel], timeout=timeout_s) and conn.poll():
            with contextlib.suppress(EOFError):  # the worker died, and its pipe with it
                got = conn.recv()
        if got is None:
            proc.join(timeout=1)
            if proc.exitcode is None:
                raise OSError(f"{self.what} did not answer in time")
            raise OSError(f"{self.what} died (exit {proc.exitcode})")
        kind, payload = got
        if kind == "error":
            raise OSError(f"{self.what} failed: {payload}")
        return payload

    def results(self, timeout_s: float | None = None) -> list[Any]:
        """Each worker's return value, in order, once all have finished; a worker's error, a
        worker that died without a result, or one not done within `timeout_s` (counted from
        this call) is an OSError."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        return [self._receive(conn, proc,
                              None if deadline is None else max(0.0, deadline - time.monotonic()))
                for conn, proc in zip(self.conns, self.procs, strict=True)]

    def _stop(self, interrupted: bool) -> None:
        for p in self.started:
            if interrupted and p.is_alive():
                p.terminate()
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
        for c in (*self.conns, *self.child_ends):
            c.close()

    def __exit__(self, *exc: object) -> None:
        self._stop(interrupted=exc[0] is not None)
