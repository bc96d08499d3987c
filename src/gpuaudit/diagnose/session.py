"""Watching a live job: GPU telemetry through the monitor's sampler and the job's process tree,
on a background thread, for as long as the job runs.

The sampler reads NVML through `gpuaudit.hw.LiveNvml` (safe by construction: see
docs/monitor-safety.md). A machine without NVML still gets a diagnosis from the host side
(process tree, step markers, profiler); the reason is kept.

Where asked, the Python stacks of the job's outermost Python processes are sampled too
(`hw.pystacks`, py-spy from outside: the job pays nothing).

The job's own evidence (steps, data-wait times, syncs, compilation, a profiler trace,
allocator retries) comes from its bootstrap and the Python API through files in a directory
named by $GPUAUDIT_DOCTOR_DIR (`channel`).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuaudit.hw.proctree import ProcessTree, ProcTick, max_sm_clock_mhz
from gpuaudit.hw.pystacks import StackChunk, StackSampler
from gpuaudit.model import Sample, utc_now

from .hoststats import is_python

log = logging.getLogger("gpuaudit.doctor")


@dataclass
class WatchData:
    started_at: datetime
    samples: list[Sample] = field(default_factory=list)
    proc_ticks: list[ProcTick] = field(default_factory=list)
    sm_clock_max_mhz: dict[int, int | None] = field(default_factory=dict)
    gpu_reason: str | None = None  # why there is no GPU telemetry
    ended_at: float | None = None  # time.monotonic() when the watch stopped
    started_mono: float = field(default_factory=time.monotonic)
    stacks: list[StackChunk] = field(default_factory=list)
    stacks_reason: str | None = None  # why there are no stacks

    @property
    def duration_s(self) -> float:
        return (self.ended_at or time.monotonic()) - self.started_mono


def check_gpus(gpus: list[int] | None) -> None:
    """`--gpus` against the GPUs NVML sees, before the job starts: a GPU this machine does not
    have (or any, on a machine without one) is bad input naming those it has."""
    if gpus is None:
        return
    from gpuaudit.errors import BadInputError
    from gpuaudit.hw.telemetry import gpu_count

    source, why = open_nvml()
    if source is None:
        raise BadInputError(f"--gpus {','.join(map(str, gpus))}: this machine has no GPU to "
                            f"watch ({why})")
    try:
        have = gpu_count(source)
    finally:
        with contextlib.suppress(Exception):
            source.close()
    missing = sorted(set(gpus) - set(range(have)))
    if missing:
        has = "no GPU" if not have else "GPU 0" if have == 1 else f"GPUs 0-{have - 1}"
        raise BadInputError(f"--gpus: this machine has no GPU {', '.join(map(str, missing))} "
                            f"(it has {has})")


def open_nvml() -> tuple[Any | None, str | None]:
    """LiveNvml, or None and why not."""
    from gpuaudit.hw import LiveNvml, NvmlUnavailable

    try:
        return LiveNvml(), None
    except NvmlUnavailable as exc:
        return None, str(exc)


class Watcher:
    """Samples the GPUs and the process tree of `root_pid` every `interval_s` until `stop()`.

    Keeps the last `keep` samples (the diagnosis describes the job's recent steady state,
    and memory stays bounded however long the job runs)."""

    def __init__(self, root_pid: int, *, interval_s: float = 0.5, keep: int = 1200,
                 gpus: list[int] | None = None, source: Any | None = None,
                 nvml: bool = True, stacks: bool = False) -> None:
        self.interval_s = interval_s
        self.data = WatchData(started_at=utc_now())
        self._tree = ProcessTree(root_pid)
        self._samples: collections.deque[Sample] = collections.deque(maxlen=keep)
        self._ticks: collections.deque[ProcTick] = collections.deque(maxlen=keep)
        self._stop = threading.Event()
        self._owned = None
        self._sampler = None
        if source is None and nvml:
            source, self.data.gpu_reason = open_nvml()
            self._owned = source
        elif source is None:
            self.data.gpu_reason = "GPU telemetry off"
        if source is not None:
            from gpuaudit.hw.telemetry import Sampler

            try:
                self._sampler = Sampler(source, hostname=socket.gethostname(),
                                        interval_s=interval_s, gpus=gpus)
                for st in self._sampler.static:
                    self.data.sm_clock_max_mhz[st.index] = max_sm_clock_mhz(source, st.index)
                if not self._sampler.static:
                    self.data.gpu_reason = "NVML sees no GPU"
                    self._sampler = None
            except Exception as exc:  # the job matters more than our telemetry
                self.data.gpu_reason = f"GPU telemetry failed: {type(exc).__name__}: {exc}"
                self._sampler = None
        self._thread = threading.Thread(target=self._run, name="gpuaudit-doctor", daemon=True)
        self._stacks = StackSampler(self.python_roots, keep_s=keep * interval_s) \
            if stacks else None
        if not stacks:
            self.data.stacks_reason = "stack sampling off"

    def start(self) -> Watcher:
        self._thread.start()
        if self._stacks is not None:
            self._stacks.start()
        return self

    def python_roots(self) -> list[int]:
        """The job's outermost Python processes (py-spy follows their children)."""
        if not self._ticks:
            return []
        procs = self._ticks[-1].procs
        pythons = {p.pid for p in procs if is_python(p.name)}
        return [p.pid for p in procs if p.pid in pythons and p.ppid not in pythons]

    def tree_pids(self) -> set[int]:
        """The job's processes at the last tick."""
        return {p.pid for p in self._ticks[-1].procs} if self._ticks else set()

    def recent_samples(self, n: int) -> list[Sample]:
        return list(self._samples)[-n:]

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.tick()
            next_at += self.interval_s
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def tick(self) -> None:
        if self._sampler is not None:
            try:
                self._samples.append(self._sampler.sample(utc_now()))
            except Exception as exc:
                self.data.gpu_reason = f"GPU telemetry stopped: {type(exc).__name__}: {exc}"
                log.warning("%s", self.data.gpu_reason)
                self._sampler = None
        with contextlib.suppress(Exception):
            self._ticks.append(self._tree.read())

    def root_alive(self) -> bool:
        return self._tree.alive()

    def stop(self) -> WatchData:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.data.ended_at = time.monotonic()
        self.data.samples = list(self._samples)
        self.data.proc_ticks = list(self._ticks)
        if self._stacks is not None:
            self.data.stacks = self._stacks.stop()
            self.data.stacks_reason = None if self.data.stacks else \
                (self._stacks.reason or "no Python process was sampled")
        if self._owned is not None:
            self._owned.close()
            self._owned = None
        return self.data


def wait_for(pid_alive: Callable[[], bool], stop: threading.Event, poll_s: float = 0.2
             ) -> None:
    """Until the watched process ends or `stop` is set."""
    while not stop.is_set() and pid_alive():
        stop.wait(poll_s)
