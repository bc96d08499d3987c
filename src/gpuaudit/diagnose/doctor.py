"""`gpuaudit doctor` as library functions: run a command and diagnose it, watch a running
process, or diagnose recordings (a telemetry trace, a profiler trace) after the fact."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuaudit.errors import BadInputError
from gpuaudit.model import Diagnosis, utc_now

from . import launch
from .channel import ENV_DIR, ENV_PROFILE, ChannelData, read_channel
from .engine import build_signals, make_diagnosis
from .hoststats import step_stats
from .kineto import TraceStats, analyse, read_trace
from .session import WatchData, Watcher, wait_for


@dataclass(frozen=True)
class WatchOptions:
    interval_s: float = 0.5
    keep: int = 1200  # samples kept: the diagnosis describes the last keep × interval
    gpus: list[int] | None = None
    profile_steps: int = 0
    nvml: bool = True
    keep_profile: Path | None = None  # copy the profiler trace here (replay: --profile)


def run(argv: Sequence[str], opts: WatchOptions = WatchOptions(),
        on_started: Callable[[int], None] | None = None) -> tuple[int, Diagnosis]:
    """Run `argv` unchanged (its stdin, stdout and stderr are ours), watch it until it ends,
    and return its exit status with the diagnosis of what ran."""
    from gpuaudit.hw.torch_env import apply_safe_env

    channel = Path(tempfile.mkdtemp(prefix="gpuaudit-doctor-"))
    try:
        env = apply_safe_env(dict(os.environ))
        env[ENV_DIR] = str(channel)
        if opts.profile_steps:
            env[ENV_PROFILE] = str(opts.profile_steps)
        proc = launch.start(argv, env)
        if on_started:
            on_started(proc.pid)
        watcher = _watcher(proc.pid, opts)
        with launch.forwarding(proc) as signals_got:
            watcher.start()
            while True:
                try:
                    returncode = proc.wait()
                    break
                except KeyboardInterrupt:  # pragma: no cover - the handler forwards instead
                    continue
        data = watcher.stop() if watcher else None
        status = launch.exit_status(returncode)
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
        diag = _diagnose(data, found, command=argv, pid=proc.pid,
                         exit_code=status, job_pids=None, notes=notes,
                         profile_steps=opts.profile_steps)
        return status, diag
    finally:
        shutil.rmtree(channel, ignore_errors=True)


def attach(pid: int, opts: WatchOptions = WatchOptions(),
           stop: threading.Event | None = None) -> Diagnosis:
    """Watch a process that is already running (and its children) until it ends or `stop`
    is set."""
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
    notes = ["attached to a running process: its exit status is its parent's to see",
             "step markers and profiles need the job started by `gpuaudit doctor` or "
             "`with gpuaudit.watch():` in the job"]
    if stop.is_set():
        notes.insert(0, "watching stopped before the process ended")
    return _diagnose(data, ChannelData(), command=None, pid=pid, exit_code=None,
                     job_pids=None, notes=notes, profile_steps=0)


def _watcher(pid: int, opts: WatchOptions) -> Watcher | None:
    try:
        return Watcher(pid, interval_s=opts.interval_s, keep=opts.keep, gpus=opts.gpus,
                       nvml=opts.nvml)
    except ProcessLookupError:
        return None  # ended before we could look: the diagnosis says what little it can


def _diagnose(data: WatchData | None, channel: ChannelData, *, command: Sequence[str] | None,
              pid: int, exit_code: int | None, job_pids: set[int] | None, notes: list[str],
              profile_steps: int) -> Diagnosis:
    tree_pids = {p.pid for t in (data.proc_ticks if data else []) for p in t.procs} | {pid}
    steps = None
    main = channel.main_steps()
    if main:
        _pid, times, waits = main
        steps = step_stats(times, waits)
    trace = None
    sources: dict[str, str] = {}
    if channel.traces:
        trace = analyse(read_trace(channel.traces[0]))
        sources["profiler"] = f"torch.profiler, {trace.steps} steps ({channel.traces[0].name})"
    elif profile_steps:
        notes.append(f"no profile: the job did not call gpuaudit.step() {profile_steps + 4} "
                     "times (the profiler needs the step markers)")
    notes += channel.problems
    samples = data.samples if data else []
    sig, how = build_signals(samples, job_pids=tree_pids if samples else job_pids,
                             proc_ticks=data.proc_ticks if data else [], steps=steps,
                             trace=trace, sm_clock_max_mhz=data.sm_clock_max_mhz if data else None,
                             alloc_retries=channel.alloc_retries)
    if data and samples:
        sources["gpu"] = (f"NVML through the monitor's sampler, {len(samples)} samples at "
                          f"{samples[0].interval_s:g} s; job GPUs: {how}")
    elif data:
        sources["gpu"] = f"none: {data.gpu_reason or 'no sample taken'}"
    if data and data.proc_ticks:
        sources["process"] = f"psutil, {len(data.proc_ticks)} readings of the process tree"
    if steps:
        sources["steps"] = f"gpuaudit.step() markers, {steps.steps} steps"
    return make_diagnosis(sig, started_at=data.started_at if data else utc_now(),
                          duration_s=data.duration_s if data else 0.0, command=command,
                          pid=pid, exit_code=exit_code, sources=sources, notes=notes)


def from_recordings(telemetry: Path | None = None, profile: Path | None = None,
                    sm_clock_max_mhz: int | None = None) -> Diagnosis:
    """Diagnose a telemetry trace (`gpuaudit monitor --record`) and/or a profiler trace."""
    from gpuaudit.hw.telemetry import Sampler, TraceReplay

    samples = []
    sources: dict[str, str] = {}
    if telemetry is not None:
        replay = TraceReplay.from_file(telemetry)
        sampler = Sampler(replay, hostname=str(replay.meta.get("hostname") or "replay"),
                          interval_s=float(replay.meta.get("interval_s") or 1.0))
        while (now := replay.advance()) is not None:
            samples.append(sampler.sample(now))
        if not samples:
            raise BadInputError(f"{telemetry}: the telemetry trace has no samples")
        sources["gpu"] = f"telemetry trace {telemetry.name}, {len(samples)} samples"
    trace: TraceStats | None = None
    if profile is not None:
        trace = analyse(read_trace(profile))
        sources["profiler"] = f"profiler trace {profile.name}, {trace.steps} steps"
    if telemetry is None and profile is None:
        raise BadInputError("nothing to diagnose: give a command, --attach PID, --trace or "
                            "--profile")
    clocks = None
    if sm_clock_max_mhz and samples:
        clocks = {g.index: sm_clock_max_mhz for g in samples[0].gpus}
    sig, how = build_signals(samples, trace=trace, sm_clock_max_mhz=clocks)
    if samples:
        sources["gpu"] += f"; job GPUs: {how}"
    started = samples[0].time if samples else utc_now()
    duration = (samples[-1].time - samples[0].time).total_seconds() if samples else \
        (trace.window_us / 1e6 if trace else 0.0)
    return make_diagnosis(sig, started_at=started, duration_s=duration, sources=sources)
