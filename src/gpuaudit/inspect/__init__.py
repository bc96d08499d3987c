"""The performance query: what is this GPU server, and is it healthy?"""

from __future__ import annotations

import sys
from pathlib import Path

from gpuaudit._version import __version__
from gpuaudit.errors import BadInputError
from gpuaudit.model import Machine, Run, load_run, utc_now
from gpuaudit.reading import read_text

from .health import check_machine


def inspect_machine(machine: Machine | None = None, *, source: str = "live",
                    expect_gpus: int | None = None) -> Run:
    """Snapshot this machine (or take `machine`, e.g. read from a file) and judge its health;
    `expect_gpus`: how many GPUs it should have, when you know (what you rented)."""
    started = utc_now()
    if machine is None:
        from gpuaudit.hw import take_snapshot

        machine = take_snapshot()
    return Run(kind="inspect", started_at=started, finished_at=utc_now(),
               tool_version=__version__, command=tuple(sys.argv), source=source,
               machine=machine, findings=check_machine(machine, expect_gpus=expect_gpus))


def read_snapshot(path: Path) -> Machine:
    """The Machine in a saved document (what `inspect --json` printed), or BadInputError."""
    text = read_text(path, "snapshot")
    # Strict: a field of the wrong type ("16" for a number, 1 for true) is a damaged snapshot,
    # not something to coerce and judge.
    run = load_run(text, origin=f"snapshot {path}", strict=True, nan_ok=True)
    if run.machine is None:
        raise BadInputError(f"snapshot {path} holds no machine facts (a {run.kind} run)")
    return run.machine


__all__ = ["check_machine", "inspect_machine", "read_snapshot"]
