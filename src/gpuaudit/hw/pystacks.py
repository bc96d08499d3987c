"""The Python stacks of a running job, sampled from outside by py-spy (a declared dependency).

py-spy reads the interpreter's memory without stopping it (`--nonblocking`), so the job pays
nothing; it needs the right to read the process (ptrace rules: a parent may read its child,
root may read anything; a container may forbid it). It samples in chunks (`py-spy record
--duration`), each chunk's counts kept with its start and end, so that a diagnosis can take
the chunks of its window (after a compile warm-up, say) and memory stays bounded.

Every thread is sampled, idle ones included (`--idle`): the counts are wall time, and the
main thread's counts say where its time went, computing or waiting.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuaudit.model.units import Count, Pid

RATE_HZ = 100
CHUNK_S = 3  # short enough to leave a job's start and end out; py-spy restarts in ~0.1 s
_PROCESS = re.compile(r'process (\d+):".*?";', re.S)  # its command line may hold newlines
_FRAME = re.compile(r"^(?P<fn>.*) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")
_THREAD = re.compile(r"^thread \((?P<tid>\w+)\)(?::\s*(?P<name>.*))?$")
# py-spy's errors that will not go away by trying again
_FINAL = ("Permission Denied", "Operation not permitted", "ptrace", "No such file")


UNREADABLE = "<unreadable>"  # a frame's file name that came back damaged


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: Count | None


@dataclass(frozen=True)
class Stack:
    """One distinct stack of one thread, root first (indices into its chunk's frames), and
    how many samples had it."""

    pid: Pid
    tid: Pid
    thread: str | None
    frames: tuple[Count, ...]
    count: Count


@dataclass(frozen=True)
class StackChunk:
    start_s: float  # time.monotonic()
    end_s: float
    rate_hz: Count
    target_pid: Pid
    frames: tuple[Frame, ...]  # each distinct frame once (stacks share most of theirs)
    stacks: tuple[Stack, ...]

    def resolve(self, stack: Stack) -> tuple[Frame, ...]:
        return tuple(self.frames[i] for i in stack.frames)


def parse_raw(text: str) -> tuple[tuple[Frame, ...], list[Stack]]:
    """py-spy's raw (collapsed) output with --threads --subprocesses: one line a stack,
    "process P:"cmd";...;thread (T): name;fn (file:line);... COUNT". The distinct frames,
    and the stacks as indices into them."""
    table: dict[Frame, int] = {}
    out = []
    for line in _PROCESS.sub(lambda m: f"process {m[1]};", text).splitlines():
        head, _, count = line.rpartition(" ")
        if not head or not count.isdigit():
            continue
        pid = tid = 0
        thread = None
        frames = []
        for part in head.split(";"):
            if part.startswith("process "):
                with contextlib.suppress(ValueError):
                    pid = int(part.split()[1])
                continue
            if (m := _THREAD.match(part)) is not None:
                tid = int(m["tid"], 16) if m["tid"].startswith("0x") else int(m["tid"])
                thread = m["name"]
                continue
            if (f := _FRAME.match(part)) is not None:
                # a file name read while the process rewrote it can hold a NUL byte, which
                # no file has (and linecache raises on): kept as a frame of no file
                file = f["file"] if "\x00" not in f["file"] else UNREADABLE
                frame = Frame(f["fn"], file, int(f["line"]) if f["line"] else None)
                frames.append(table.setdefault(frame, len(table)))
        out.append(Stack(pid=pid, tid=tid, thread=thread, frames=tuple(frames),
                         count=int(count)))
    return tuple(table), out


def find_pyspy() -> str | None:
    here = Path(sys.executable).with_name("py-spy")  # installed beside us in a venv
    return str(here) if here.exists() else shutil.which("py-spy")


class StackSampler:
    """Samples the Python processes `targets()` names (the job's outermost ones) in chunks of
    `chunk_s`, on a thread of its own, until `stop()`. Keeps the chunks that end within the
    last `keep_s`. `reason` says why there are none (py-spy missing or refused)."""

    def __init__(self, targets: Callable[[], list[int]], *, rate_hz: int = RATE_HZ,
                 chunk_s: int = CHUNK_S, keep_s: float = 600.0, pyspy: str | None = None
                 ) -> None:
        self.targets = targets
        self.rate_hz = rate_hz
        self.chunk_s = max(1, int(chunk_s))
        self.keep_s = keep_s
        self.pyspy = pyspy or find_pyspy()
        self.reason: str | None = None if self.pyspy else "py-spy is not installed"
        self.chunks: collections.deque[StackChunk] = collections.deque()
        self._stop = threading.Event()
        self._running: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        self._tmp = tempfile.mkdtemp(prefix="gpuaudit-stacks-")
        self._thread = threading.Thread(target=self._run, name="gpuaudit-stacks", daemon=True)

    def start(self) -> StackSampler:
        if self.pyspy:
            self._thread.start()
        return self

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            pids = self.targets()
            if not pids:
                self._stop.wait(0.5)
                continue
            got, error = self._chunk(pids[:4])
            if got:
                failures = 0
                self.reason = None
            elif error:
                failures += 1
                self.reason = error
                if any(word in error for word in _FINAL) or failures >= 10:
                    return  # py-spy cannot read this job: say so once, stop trying
                self._stop.wait(0.5)  # the interpreter may still be starting

    def _chunk(self, pids: list[int]) -> tuple[bool, str | None]:
        pyspy = self.pyspy
        assert pyspy is not None  # chunks are taken only where py-spy was found
        start = time.monotonic()
        procs = []
        for pid in pids:
            out = os.path.join(self._tmp, f"{pid}.txt")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(out)
            cmd = [pyspy, "record", "--pid", str(pid), "--rate", str(self.rate_hz),
                   "--duration", str(self.chunk_s), "--format", "raw", "--output", out,
                   "--nonblocking", "--threads", "--subprocesses", "--idle",
                   "--full-filenames"]
            try:
                procs.append((pid, out, subprocess.Popen(
                    cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE, start_new_session=True)))
            except OSError as exc:
                return False, f"py-spy could not start: {exc}"
        with self._lock:
            self._running = [p for _pid, _out, p in procs]
        errors, got = [], False
        for pid, out, proc in procs:
            try:
                _, err = proc.communicate(timeout=self.chunk_s + 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            end = time.monotonic()
            frames, stacks = parse_raw(Path(out).read_text(errors="replace")) \
                if os.path.exists(out) else ((), [])
            if stacks:
                got = True
                self._keep(StackChunk(start, end, self.rate_hz, pid, frames, tuple(stacks)))
            elif proc.returncode:
                lines = [ln.strip() for ln in err.decode(errors="replace").splitlines()
                         if ln.strip().startswith("Error")]
                errors.append(f"py-spy on pid {pid}: "
                              f"{lines[0] if lines else f'exit {proc.returncode}'}")
        with self._lock:
            self._running = []
        return got, "; ".join(errors) or None

    def _keep(self, chunk: StackChunk) -> None:
        self.chunks.append(chunk)
        while self.chunks and chunk.end_s - self.chunks[0].end_s > self.keep_s:
            self.chunks.popleft()

    def stop(self) -> list[StackChunk]:
        """End the chunk in flight (py-spy writes what it has on SIGINT) and return all."""
        self._stop.set()
        with self._lock:
            for p in self._running:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGINT)
        if self._thread.is_alive():
            self._thread.join(timeout=15)
        shutil.rmtree(self._tmp, ignore_errors=True)
        return list(self.chunks)
