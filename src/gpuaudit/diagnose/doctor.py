"""`gpuaudit doctor` as library functions: run a command and diagnose it, watch a running
process, or diagnose recordings after the fact (saved evidence, a telemetry trace, a profiler
trace).

The diagnosis describes the job's steady state: what came before its first step (imports, the
model's building), a torch.compile warm-up (until the steps run without compiling) and the few
steps a profile slowed are left out of the window, and said so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuaudit.errors import BadInputError
from gpuaudit.model import Diagnosis, utc_now

from . import collect, recording
from .channel import StepTimes, main_steps
from .collect import AUTO, WatchOptions
from .compilation import CompileStats, compile_stats
from .engine import build_signals, make_diagnosis
from .evidence import Signals
from .hoststats import SOURCES, is_python, step_stats
from .kineto import TraceStats, analyse, read_trace
from .recording import Evidence
from .stacks import main_thread

__all__ = ["AUTO", "WatchOptions", "attach", "diagnose", "from_evidence", "from_recordings",
           "run", "signals"]
PROFILE_EXPORT_S = 0.5  # after a profile ends: its trace being written, the job paused
MIN_SAMPLES = 3


def run(argv: Sequence[str], opts: WatchOptions | None = None,
        on_started: Callable[[int], None] | None = None,
        save_evidence: Path | None = None) -> tuple[int, Diagnosis]:
    """Run `argv` unchanged, watch it until it ends; its exit status and the diagnosis."""
    status, ev = collect.run(argv, opts or WatchOptions(), on_started)
    if save_evidence is not None:
        recording.save(ev, save_evidence)
    return status, diagnose(ev)


def attach(pid: int, opts: WatchOptions | None = None,
           stop: threading.Event | None = None, save_evidence: Path | None = None
           ) -> Diagnosis:
    """Watch a running process (and its children) until it ends or `stop` is set."""
    ev = collect.attach(pid, opts or WatchOptions(), stop)
    if save_evidence is not None:
        recording.save(ev, save_evidence)
    return diagnose(ev)


def from_evidence(path: Path) -> Diagnosis:
    return diagnose(recording.load(path))


@dataclass(frozen=True)
class Window:
    """The part of the job diagnosed: from `start_s` to `end_s`, without the `excluded`
    spans."""

    start_s: float | None
    end_s: float | None = None
    excluded: tuple[tuple[float, float], ...] = ()

    def keeps(self, t: float) -> bool:
        return (self.start_s is None or t >= self.start_s) and \
            (self.end_s is None or t <= self.end_s) and \
            not any(a <= t <= b for a, b in self.excluded)

    def mostly_in(self, a: float, b: float) -> bool:
        """At least half of the span [a, b] lies between the window's start and end."""
        lo = a if self.start_s is None else max(a, self.start_s)
        hi = b if self.end_s is None else min(b, self.end_s)
        return b <= a or hi - lo >= (b - a) / 2


def _profiled(ev: Evidence) -> tuple[tuple[float, float], ...]:
    starts = [e.t_s for e in ev.events if e.kind == "profile_start"]
    ends = [e.t_s for e in ev.events if e.kind == "profile_end"]
    return tuple((a, (ends[i] if i < len(ends) else ev.ended_mono_s) + PROFILE_EXPORT_S)
                 for i, a in enumerate(starts))


def _steps_in(steps: StepTimes, window: Window) -> StepTimes:
    """The steps that end inside the window."""
    keep = [i for i, t in enumerate(steps.end_s) if window.keeps(t)]
    if len(keep) == len(steps.end_s):
        return steps

    def pick(values: Sequence) -> tuple:
        return tuple(values[i] for i in keep if i < len(values))

    return StepTimes(steps.pid, steps.source, pick(steps.end_s), pick(steps.wait_s),
                     pick(steps.syncs), pick(steps.sync_s), pick(steps.new_shapes))


def diagnose(ev: Evidence) -> Diagnosis:
    """The diagnosis of gathered evidence."""
    sig, sources, notes = signals(ev)
    return make_diagnosis(sig, started_at=ev.started_at, duration_s=ev.duration_s,
                          command=ev.command, pid=ev.pid, exit_code=ev.exit_code,
                          sources=sources, notes=notes)


def signals(ev: Evidence) -> tuple[Signals, dict[str, str], list[str]]:
    """What the rules see of gathered evidence (over the steady-state window), where each
    part came from, and the notes on what was left out or missing."""
    notes = list(ev.notes)
    sources: dict[str, str] = {}
    all_steps = main_steps(ev.markers, ev.auto)
    comp = compile_stats(ev.events, job_start_s=ev.started_mono_s, job_end_s=ev.ended_mono_s,
                         steps=all_steps)
    window = Window(_window_start(comp, all_steps), _window_end(all_steps), _profiled(ev))
    notes += _window_notes(comp, window)
    samples = [s for s in ev.samples if window.keeps(ev.mono(s.time))]
    ticks = [t for t in ev.proc_ticks if window.keeps(t.time_s)]
    if len(samples) < MIN_SAMPLES or len(ticks) < MIN_SAMPLES:
        samples, ticks = ev.samples, ev.proc_ticks  # too little left: the whole run
    # before the window: what other processes did on the GPUs before the job came
    lead = ev.samples[:ev.samples.index(samples[0])] if samples else []
    steps = None
    if all_steps is not None:
        seen = _steps_in(all_steps, window)
        auto = seen.source != "markers"
        steps = step_stats(seen.end_s, seen.wait_s, source=SOURCES[seen.source],
                           syncs=seen.syncs if auto else (), sync_s=seen.sync_s if auto else (),
                           new_shapes=seen.new_shapes if auto else ())
        if steps:
            sources["steps"] = f"{steps.source}, {steps.steps} steps (pid {seen.pid})"
    chunks = [c for c in ev.stacks if window.mostly_in(c.start_s, c.end_s)] or ev.stacks
    stacks = main_thread(chunks, pid=all_steps.pid if all_steps else None,
                         sources=ev.source_lines)
    if stacks is not None:
        sources["stacks"] = (f"py-spy, {stacks.samples} samples of the main thread of pid "
                             f"{stacks.pid} ({stacks.seconds:.0f} s)")
    elif ev.stacks_reason:
        notes.append(f"Python stacks not sampled: {ev.stacks_reason}")
    notes += _bootstrap_notes(ev)
    if ev.trace is not None:
        sources["profiler"] = f"torch.profiler, {ev.trace.steps} steps ({ev.trace_name})"
    if ev.profile_requested:
        notes.append(ev.profile_requested)
    tree_pids = {p.pid for t in ev.proc_ticks for p in t.procs} | {ev.pid}
    sites = tuple(ev.sync_sites.get(all_steps.pid, ())) if all_steps else ()
    sig, how = build_signals(samples, job_pids=tree_pids if samples else None, lead=lead,
                             proc_ticks=ticks, steps=steps, trace=ev.trace,
                             sm_clock_max_mhz=ev.sm_clock_max_mhz,
                             alloc_retries=ev.alloc_retries, stacks=stacks, compile=comp,
                             sync_sites=sites)
    if samples:
        sources["gpu"] = (f"NVML through the monitor's sampler, {len(samples)} samples at "
                          f"{samples[0].interval_s:g} s; job GPUs: {how}")
    else:
        sources["gpu"] = f"none: {ev.gpu_reason or 'no sample taken'}"
    if ticks:
        sources["process"] = f"psutil, {len(ticks)} readings of the process tree"
    if ev.boots:
        hooks = sorted({h for b in ev.boots for h in b.hooks})
        sources["bootstrap"] = (f"{len(ev.boots)} Python process(es) of the job; hooks: "
                                f"{', '.join(hooks) or 'none (torch not imported)'}")
    return sig, sources, notes


def _window_start(comp: CompileStats | None, steps: StepTimes | None) -> float | None:
    """Where the steady state begins: after torch.compile's warm-up; else after the first
    step (imports, building the model, the first step's allocations and autotuning); the
    whole run where there are no steps or compilation never settled."""
    if comp is not None:
        return comp.steady_from_s
    return steps.end_s[0] if steps is not None and steps.end_s else None


def _window_end(steps: StepTimes | None) -> float | None:
    """After the last step the job shuts down (saving, printing, exiting): not its steady
    state. None without steps."""
    if steps is None or len(steps.end_s) < 2:
        return None
    return steps.end_s[-1]


def _window_notes(comp: CompileStats | None, window: Window) -> list[str]:
    out = []
    if comp is not None and comp.warmup_s is not None:
        out.append(f"the first {comp.warmup_s:.1f} s (torch.compile's warm-up, "
                   f"{comp.compile_s - comp.window_compile_s:.1f} s compiling) are left out "
                   "of the diagnosis window")
    if window.excluded:
        out.append("the profiled steps (and the trace's writing) are left out of the window")
    return out


def _bootstrap_notes(ev: Evidence) -> list[str]:
    if not ev.injected or ev.boots:
        return []
    pythons = any(is_python(p.name) for t in ev.proc_ticks for p in t.procs)
    if not pythons:
        return []
    return ["no Python process of the job loaded the doctor's bootstrap (python -I, -E or -S, "
            "or a PYTHONPATH the job sets itself): steps, batch waits, syncs and compilation "
            "were not seen"]


def from_recordings(telemetry: Path | None = None, profile: Path | None = None,
                    sm_clock_max_mhz: int | None = None) -> Diagnosis:
    """Diagnose a telemetry trace (`gpuaudit monitor --record`) and/or a profiler trace."""
    from gpuaudit.hw.telemetry import Sampler
    from gpuaudit.hw.telemetry_trace import TraceReplay

    samples = []
    sources: dict[str, str] = {}
    if telemetry is not None:
        replay = TraceReplay.from_file(telemetry)
        sampler = Sampler(replay, hostname=replay.hostname, interval_s=replay.interval_s)
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
        raise BadInputError("nothing to diagnose: give a command, --attach PID, --trace, "
                            "--profile or --evidence")
    clocks: dict[int, int | None] | None = None
    if sm_clock_max_mhz and samples:
        clocks = {g.index: sm_clock_max_mhz for g in samples[0].gpus}
    sig, how = build_signals(samples, trace=trace, sm_clock_max_mhz=clocks)
    if samples:
        sources["gpu"] += f"; job GPUs: {how}"
    started = samples[0].time if samples else utc_now()
    duration = (samples[-1].time - samples[0].time).total_seconds() if samples else \
        (trace.window_us / 1e6 if trace else 0.0)
    return make_diagnosis(sig, started_at=started, duration_s=duration, sources=sources)
