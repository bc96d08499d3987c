"""`fleet run`'s progress: live lines on a terminal, plain timestamped lines elsewhere (a
Kubernetes Job's log, CI, `2> file`), and stdout kept for the JSON while Ray runs."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.markup import escape

# Above this many nodes the progress shows counts, not a line per node.
MAX_NODE_LINES = 24
# A fleet bigger than that: a line of counts this often (and every node that ends badly).
COUNTS_EVERY_S = 15.0
ENDED = ("done", "failed", "timed_out", "lost", "interrupted")


class LiveLines:
    """On a terminal: a line per node (a bar of nodes done for big fleets)."""

    def __init__(self, progress: Any) -> None:
        self.progress = progress
        self.tasks: dict[str, Any] = {}
        self.total = self.progress.add_task("nodes", total=None)
        self.done = 0
        self.count = 0

    def stage(self, text: str) -> None:
        self.progress.update(self.total, description=text)

    def __call__(self, p: Any) -> None:
        key = p.node.node_id
        finished = p.state in ENDED
        if key not in self.tasks:
            self.count += 1
            self.progress.update(self.total, total=self.count)
            self.tasks[key] = (self.progress.add_task("", total=None)
                               if self.count <= MAX_NODE_LINES else None)
        if finished:
            self.done += 1
            self.progress.update(self.total, completed=self.done)
        task = self.tasks[key]
        if task is not None:
            style = "" if p.state in ("waiting", "running", "done") else "[red]"
            self.progress.update(task, description=style + escape(
                f"{p.hostname}: {p.state} {p.text}"), completed=1 if finished else 0, total=1)


class PlainLines:
    """Elsewhere: one line per event as it happens (`[  12s] h200-a: running inspect`); for
    a big fleet, a line of counts every COUNTS_EVERY_S and a line for each node that ends
    badly."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.start = time.monotonic()
        self.state: dict[str, str] = {}
        self.next_counts = self.start + COUNTS_EVERY_S

    def _line(self, text: str) -> None:
        self.console.print(f"[{time.monotonic() - self.start:5.0f}s] {text}", markup=False,
                           highlight=False, soft_wrap=True)

    def stage(self, text: str) -> None:
        self._line(text)

    def __call__(self, p: Any) -> None:
        self.state[p.node.node_id] = p.state
        big = len(self.state) > MAX_NODE_LINES
        if not big or p.state in ENDED[1:]:
            self._line(f"{p.hostname}: {p.state} {p.text}")
        now = time.monotonic()
        if big and (now >= self.next_counts or all(s in ENDED for s in self.state.values())):
            self.next_counts = now + COUNTS_EVERY_S
            counts = Counter(self.state.values())
            self._line(f"{len(self.state)} node(s): " + ", ".join(
                f"{counts[s]} {s}" for s in ("waiting", "running", *ENDED) if counts[s]))


@contextlib.contextmanager
def stdout_kept_for_json() -> Iterator[None]:
    """While Ray runs in this process, whatever it or its C++ core writes to file
    descriptor 1 (a dying raylet's last words, a worker's prints) goes to stderr, so that
    stdout carries only the JSON written after it. Nothing to do when stdout is not a real
    file (a test's capture)."""
    try:
        sys.stdout.flush()
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        yield
        return
    saved = os.dup(fd)
    try:
        os.dup2(sys.stderr.fileno(), fd)
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        os.dup2(saved, fd)
        os.close(saved)
