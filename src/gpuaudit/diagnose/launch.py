"""Starting the user's command unchanged, and passing Ctrl-C on to it.

The command runs in a process group of its own, so that a signal reaches the whole job (a
launcher, its ranks, their loader workers) and nothing else. On a terminal that group is made
the foreground one: Ctrl-C then goes to the job straight from the terminal, and the job may
read the keyboard. SIGINT, SIGTERM and SIGHUP sent to `gpuaudit doctor` itself are forwarded to
the job's group; the doctor waits for the job to end, then diagnoses what ran.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gpuaudit.errors import BadInputError

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _tty_fd() -> int | None:
    """The terminal we are in the foreground of, if any."""
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, ValueError, OSError):
        return None
    try:
        if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
            return fd
    except OSError:
        return None
    return None


def start(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """Popen of the command in its own process group (the foreground one on a terminal); a
    command that cannot start is bad input (exit 2)."""
    if not argv:
        raise BadInputError("no command to run: gpuaudit doctor -- python train.py ...")
    tty = _tty_fd()

    def child_setup() -> None:  # runs in the child between fork and exec
        os.setpgid(0, 0)
        if tty is not None:
            old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
            with contextlib.suppress(OSError):
                os.tcsetpgrp(tty, os.getpgrp())
            signal.signal(signal.SIGTTOU, old)

    try:
        return subprocess.Popen(list(argv), env=dict(env), preexec_fn=child_setup)
    except FileNotFoundError:
        raise BadInputError(f"cannot start {argv[0]!r}: command not found") from None
    except PermissionError:
        raise BadInputError(f"cannot start {argv[0]!r}: permission denied") from None
    except OSError as exc:
        raise BadInputError(f"cannot start {argv[0]!r}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def forwarding(proc: subprocess.Popen[bytes]) -> Iterator[list[int]]:
    """While inside: the signals in FORWARDED go to the job's process group (the list yielded
    collects their numbers); afterwards the terminal is ours again."""
    got: list[int] = []

    def forward(signum: int, frame: Any) -> None:
        got.append(signum)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signum)

    old = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        yield got
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        _take_back_terminal()


def _take_back_terminal() -> None:
    try:
        fd = sys.stdin.fileno()
        if not os.isatty(fd):
            return
    except (AttributeError, ValueError, OSError):
        return
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        with contextlib.suppress(OSError):
            os.tcsetpgrp(fd, os.getpgrp())
    finally:
        signal.signal(signal.SIGTTOU, old)


def exit_status(returncode: int) -> int:
    """A shell's exit status: 128 + N for a job ended by signal N."""
    return 128 - returncode if returncode < 0 else returncode
