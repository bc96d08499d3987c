"""Gathering a job's evidence: run a command unchanged (with the bootstrap on its PYTHONPATH
unless told not to) or attach to a running process, and watch it until it ends.

While the job runs, the doctor may ask its bootstrap for a short profile (`AUTO_PROFILE`):
only when the job's GPUs are mostly idle, so a job that uses its GPU well is never profiled,
and one that does not gets kernel-level evidence (kernel counts, launch gaps, sync gaps).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from gpuaudit.errors import BadInputError
from gpuaudit.model import utc_now

from . import launch
from .channel import ENV_DIR, ENV_PROFILE, PROFILE_REQUEST, ChannelData, read_channel
from .kineto import analyse, read_trace
from .recording import Evidence
from .session import WatchData, Watcher, wait_for
from .stacks import source_lines

BOOTSTRAP_DIR = Path(__file__).with_name("bootstrap")
AUTO = -1  # profile_steps: profile a few steps only if the GPU is mostly idle
AUTO_PROFILE_STEPS = 5
AUTO_IDLE_UTIL_PCT = 50.0  # median NVML utilization under this over the last samples
AUTO_SAMPLES = 6


@dataclass(frozen=True)
class WatchOptions:
    interval_s: float = 0.5
    keep: int = 1200  # samples kept: the diagnosis describes the last keep × interval
    gpus: list[int] | None = None
    profile_steps: int = AUTO  # N: profile N steady steps; 0: never; AUTO: when GPU idles
    nvml: bool = True
    keep_profile: Path | None = None  # copy the profiler trace here (replay: --profile)
    inject: bool = True  # the bootstrap on the job's PYTHONPATH
    stacks: bool = True  # sample the job's Python stacks (py-spy)


def job_env(channel: Path, opts: WatchOptions) -> dict[str, str]:
    """The job's environment: ours, the safe NCCL/NVSHMEM settings, the channel, and the
    bootstrap first on PYTHONPATH (children inherit it)."""
    from gpuaudit.hw.torch_env import apply_safe_env

    env = apply_safe_env(dict(os.environ))
    env[ENV_DIR] = str(channel)
    if opts.profile_steps > 0:
        env[ENV_PROFILE] = str(opts.profile_steps)
    if opts.inject:
        rest = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(BOOTSTRAP_DIR) + (os.pathsep + rest if rest else "")
    return env


class AutoProfile:
    """Asks the job's bootstrap for a profile once the job's GPUs have been mostly idle over
    the last AUTO_SAMPLES samples (and the bootstrap has torch's hooks in)."""

    def __init__(self, channel: Path, watcher: Watcher, job_pids: Callable[[], set[int]]
                 ) -> None:
        self.channel = channel
        self.watcher = watcher
        self.job_pids = job_pids
        self.why: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuaudit-autoprofile",
                                        daemon=True)

    def start(self) -> AutoProfile:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        steps_from = None  # when the job's first steps reached the channel
        while not self._stop.wait(1.0):
            if steps_from is None:
                if any(self.channel.glob("*steps-*.txt")):
                    steps_from = utc_now()
                continue
            why = self.idle_gpu(steps_from)
            if why:
                self.why = why
                (self.channel / PROFILE_REQUEST).write_text(str(AUTO_PROFILE_STEPS))
                return

    def idle_gpu(self, since: datetime) -> str | None:
        """Why to profile, judged on the samples since the job began its steps (the GPU idles
        while a job imports and builds its model: that says nothing)."""
        pids = self.job_pids()
        samples = [s for s in self.watcher.recent_samples(AUTO_SAMPLES) if s.time >= since]
        if len(samples) < AUTO_SAMPLES:
            return None
        utils = [g.utilization_gpu_pct for s in samples for g in s.gpus
                 if g.utilization_gpu_pct is not None and any(p.pid in pids for p in g.processes)]
        if len(utils) < AUTO_SAMPLES:
            return None
        median = statistics.median(utils)
        if median >= AUTO_IDLE_UTIL_PCT:
            return None
        return (f"the job's GPU was {median:.0f} % utilized over {len(samples)} samples: "
                f"{AUTO_PROFILE_STEPS} steps were profiled to see why")


def run(argv: Sequence[str], opts: WatchOptions = WatchOptions(),
        on_started: Callable[[int], None] | None = None) -> tuple[int, Evidence]:
    """Run `argv` unchanged (its stdin, stdout and stderr are ours), watch it until it ends,
    and return its exit status with what was seen."""
    channel = Path(tempfile.mkdtemp(prefix="gpuaudit-doctor-"))
    try:
        proc = launch.start(argv, job_env(channel, opts))
        if on_started:
            on_started(proc.pid)
        watcher = _watcher(proc.pid, opts)
        auto = None
        if watcher is not None and opts.profile_steps == AUTO and opts.inject:
            auto = AutoProfile(channel, watcher, watcher.tree_pids)
        with launch.forwarding(proc) as signals_got:
            if watcher is not None:
                watcher.start()
            if auto is not None:
                auto.start()
            while True:
                try:
                    returncode = proc.wait()
                    break
                except KeyboardInterrupt:  # pragma: no cover - the handler forwards instead
                    continue
        if auto is not None:
            auto.stop()
        data = watcher.stop() if watcher else None
        notes = []
        if signals_got:
            notes.append(f"signal {signals_got[0]} was passed on to the job")
        if returncode < 0:
            notes.append(f"the job was ended by signal {-returncode}")
        elif returncode:
            notes.append(f"the job failed (exit status {returncode}): the diagnosis covers "
                         "what ran before")
        found = read_channel(channel)
        if opts.keep_profile is not None and found.traces:
            shutil.copyfile(found.traces[0], opts.keep_profile)
        status = launch.exit_status(returncode)
        ev = evidence(data, found, pid=proc.pid, command=tuple(argv), exit_code=status,
                      notes=notes, injected=opts.inject)
        ev.profile_requested = auto.why if auto else None
        if opts.profile_steps > 0 and ev.trace is None:
            ev.notes.append(f"no profile: the job made fewer than {opts.profile_steps + 4} "
                            "steps the bootstrap could see (optimizer steps, DataLoader "
                            "batches or gpuaudit.step() markers)")
        return status, ev
    finally:
        shutil.rmtree(channel, ignore_errors=True)


def attach(pid: int, opts: WatchOptions = WatchOptions(),
           stop: threading.Event | None = None) -> Evidence:
    """Watch a process that is already running (and its children) until it ends or `stop`
    is set. The bootstrap cannot be loaded into it: the stacks (py-spy) and the GPUs are what
    there is."""
    from gpuaudit.hw.proctree import pid_exists

    if not pid_exists(pid):
        raise BadInputError(f"--attach {pid}: no such process")
    stop = stop or threading.Event()
    watcher = _watcher(pid, opts)
    if watcher is None:
        raise BadInputError(f"--attach {pid}: the process ended")
    watcher.start()
    wait_for(watcher.root_alive, stop)
    data = watcher.stop()
    notes = ["attached to a running process: its exit status is its parent's to see; steps, "
             "batch waits, syncs and compilation need the job started by `gpuaudit doctor`"]
    if stop.is_set():
        notes.insert(0, "watching stopped before the process ended")
    return evidence(data, ChannelData(), pid=pid, command=None, exit_code=None, notes=notes,
                    injected=False)


def _watcher(pid: int, opts: WatchOptions) -> Watcher | None:
    try:
        return Watcher(pid, interval_s=opts.interval_s, keep=opts.keep, gpus=opts.gpus,
                       nvml=opts.nvml, stacks=opts.stacks)
    except ProcessLookupError:
        return None  # ended before we could look: the diagnosis says what little it can


def evidence(data: WatchData | None, found: ChannelData, *, pid: int,
             command: tuple[str, ...] | None, exit_code: int | None, notes: list[str],
             injected: bool) -> Evidence:
    data = data or WatchData(started_at=utc_now(), ended_at=time.monotonic())
    trace, trace_name = None, None
    if found.traces:
        trace, trace_name = analyse(read_trace(found.traces[0])), found.traces[0].name
    return Evidence(
        started_at=data.started_at, started_mono_s=data.started_mono,
        duration_s=data.duration_s, pid=pid, command=command, exit_code=exit_code,
        samples=data.samples, proc_ticks=data.proc_ticks,
        sm_clock_max_mhz=data.sm_clock_max_mhz, gpu_reason=data.gpu_reason,
        boots=found.boots, markers=found.markers, auto=found.auto,
        sync_sites=found.sync_sites, events=found.events, alloc_retries=found.alloc_retries,
        trace=trace, trace_name=trace_name, stacks=data.stacks,
        stacks_reason=data.stacks_reason, source_lines=source_lines(data.stacks),
        injected=injected, notes=notes + found.problems)
