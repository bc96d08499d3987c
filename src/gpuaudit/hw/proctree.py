"""The host side of a job: its process tree (CPU per process, data-loader workers among the
children), host memory, and the GPUs' maximum clocks, read for `gpuaudit doctor`.

psutil's CPU percentages are since the previous call on the same Process object, so one
`ProcessTree` is kept for the whole watch and read once per tick.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

import psutil

from gpuaudit.model.units import Bytes, CorePct, Count, Fraction, Pct, Pid

from .gpus import Reader
from .nvml import Dev, NvmlSource


@dataclass(frozen=True)
class ProcInfo:
    pid: Pid
    ppid: Pid
    name: str
    cpu_pct: CorePct  # of one core, since the previous tick (100 = one core busy)
    rss_bytes: Bytes
    threads: Count
    # The process's main thread (the one that runs the training loop) alone, % of one core
    # since the previous tick; None on the first tick or where threads cannot be read.
    main_thread_cpu_pct: CorePct | None = None


@dataclass(frozen=True)
class ProcTick:
    time_s: float  # time.monotonic()
    procs: tuple[ProcInfo, ...]  # the job's tree, root first
    host_cpu_pct: Pct  # all cores together, 0–100
    host_memory_used_fraction: Fraction
    swap_used_bytes: Bytes
    cores: Count  # the CPUs this job may run on


class ProcessTree:
    """Reads a process and all its descendants, once per `read()`."""

    def __init__(self, root_pid: int) -> None:
        self.root_pid = root_pid
        self._procs: dict[int, psutil.Process] = {}
        self._main_cpu: dict[int, tuple[float, float]] = {}  # pid → (time, main thread's s)
        try:
            root = psutil.Process(root_pid)
        except psutil.Error as exc:
            raise ProcessLookupError(f"no process {root_pid}: {exc}") from None
        self._procs[root_pid] = root
        with contextlib.suppress(psutil.Error):
            root.cpu_percent(None)  # starts its interval
        psutil.cpu_percent(None)
        try:
            self.cores = len(root.cpu_affinity() or []) or (psutil.cpu_count() or 1)
        except (psutil.Error, AttributeError):
            self.cores = psutil.cpu_count() or 1

    def alive(self) -> bool:
        try:
            return self._procs[self.root_pid].status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def read(self) -> ProcTick:
        root = self._procs[self.root_pid]
        found: list[psutil.Process] = [root]
        with contextlib.suppress(psutil.Error):
            found += root.children(recursive=True)
        infos = []
        for p in found:
            known = self._procs.setdefault(p.pid, p)
            try:
                with known.oneshot():
                    cpu = known.cpu_percent(None)
                    infos.append(ProcInfo(pid=known.pid, ppid=known.ppid(), name=known.name(),
                                          cpu_pct=cpu, rss_bytes=known.memory_info().rss,
                                          threads=known.num_threads(),
                                          main_thread_cpu_pct=self._main_thread(known)))
            except psutil.Error:
                continue  # ended between the listing and the reading
        alive = {i.pid for i in infos}
        for pid in [pid for pid in self._procs if pid not in alive and pid != self.root_pid]:
            del self._procs[pid]
            self._main_cpu.pop(pid, None)
        mem = psutil.virtual_memory()
        return ProcTick(time_s=time.monotonic(), procs=tuple(infos),
                        host_cpu_pct=psutil.cpu_percent(None),
                        host_memory_used_fraction=1 - mem.available / mem.total,
                        swap_used_bytes=psutil.swap_memory().used, cores=self.cores)


    def _main_thread(self, p: psutil.Process) -> float | None:
        """CPU of the thread whose id is the process's (Linux: the main thread), in % of a
        core since the last reading; psutil's per-thread times, no interval of its own."""
        try:
            used = next((t.user_time + t.system_time for t in p.threads() if t.id == p.pid),
                        None)
        except (psutil.Error, OSError):
            return None
        if used is None:
            return None
        now = time.monotonic()
        before = self._main_cpu.get(p.pid)
        self._main_cpu[p.pid] = (now, used)
        if before is None or now <= before[0]:
            return None
        return max(0.0, (used - before[1]) / (now - before[0]) * 100)


def max_sm_clock_mhz(src: NvmlSource, index: int) -> int | None:
    """The GPU's maximum SM clock (None where NVML cannot say)."""
    from .decode import CLOCK_SM

    mhz: int | None = Reader(src).get("sm_max_mhz", "nvmlDeviceGetMaxClockInfo", Dev(index),
                                      CLOCK_SM)
    return mhz


def pid_exists(pid: int) -> bool:
    return pid > 0 and psutil.pid_exists(pid) and pid != os.getpid()
