"""From evidence to a Diagnosis: build the Signals, run every rule, rank findings and changes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from gpuaudit.hw.proctree import ProcTick
from gpuaudit.model import Bottleneck, Change, Diagnosis, Observation, Sample

from .channel import SyncSite
from .compilation import CompileStats
from .evidence import (
    Signals,
    compile_source,
    gpu_source,
    obs,
    process_source,
    stacks_source,
    steps_source,
    trace_source,
)
from .findings import Result
from .gpustats import gpu_stats, job_gpus
from .hoststats import StepStats, process_stats
from .kineto import TraceStats
from .rules import RULES as GPU_RULES
from .rules_copies import copy_bound
from .rules_host import RULES as HOST_RULES
from .rules_job import RULES as JOB_RULES
from .rules_job import unexplained_idle
from .stacks import CLASSES, HostStacks

# In this order ties of share and severity are broken.
RULES = (*GPU_RULES[:3], copy_bound, *GPU_RULES[3:], *HOST_RULES, *JOB_RULES)
# A finding that explains another's numbers silences it (the SMs idle *because* of copies).
SUPPRESSED_BY = {
    "gpu-idle": {"input-bound", "host-bound", "launch-bound"},
    # (a GPU idle because the host builds the batches is not short of work per step)
    "batch-too-small": {"copy-bound", "input-bound", "host-bound"},
    "launch-bound": {"copy-bound"},
    "host-bound": {"copy-bound"},
}
# A job that spent most of its window compiling or autotuning: its GPU idled (and its host
# synced) for that, not for the reasons the idle-time rules would give.
DOMINANT = {"compilation": 0.5, "cudnn-autotune": 0.5}
IDLE_RULES = {"input-bound", "gpu-idle", "batch-too-small", "host-bound", "launch-bound",
              "host-syncs"}
_ORDER = {rule.__name__.replace("_", "-"): i for i, rule in enumerate(RULES)}


def build_signals(samples: Sequence[Sample] = (), *, job_pids: set[int] | None = None,
                  lead: Sequence[Sample] = (),
                  proc_ticks: Sequence[ProcTick] = (), steps: StepStats | None = None,
                  trace: TraceStats | None = None,
                  sm_clock_max_mhz: dict[int, int | None] | None = None,
                  alloc_retries: int | None = None, stacks: HostStacks | None = None,
                  compile: CompileStats | None = None,
                  sync_sites: Sequence[SyncSite] = ()) -> tuple[Signals, str]:
    """The Signals for a job, and how its GPUs were chosen; `lead`: the samples before
    the window (other processes on the GPUs before the job came)."""
    gpus = []
    how = "no GPU telemetry"
    if samples:
        indices, how = job_gpus(samples, job_pids)
        for i in indices:
            st = gpu_stats(samples, i, job_pids, (sm_clock_max_mhz or {}).get(i), lead)
            if st is not None:
                gpus.append(st)
    gpu_pids = {p.pid for s in samples for g in s.gpus for p in g.processes}
    proc = process_stats(proc_ticks, (gpu_pids & job_pids) if job_pids else gpu_pids)
    return Signals(gpus=tuple(gpus), process=proc, steps=steps, trace=trace,
                   peaks_tflops=_peaks(gpus[0].name if gpus else None),
                   alloc_retries=alloc_retries, stacks=stacks, compile=compile,
                   sync_sites=tuple(sync_sites)), how


def _peaks(name: str | None) -> dict[str, float] | None:
    if not name:
        return None
    from gpuaudit.specs import lookup

    spec = lookup(nvml_name=name)
    if spec is None:
        return None
    return {p: v for p in ("fp32", "tf32", "bf16") if (v := spec.peak(p)) is not None}


def diagnose(sig: Signals) -> tuple[list[Bottleneck], list[Change]]:
    """Every rule's findings, most severe and largest share first, and their changes ranked
    by expected gain. One finding a code: the largest share of those found."""
    best: dict[str, Result] = {}
    for rule in RULES:
        for r in rule(sig):
            old = best.get(r.finding.code)
            if old is None or r.finding.share > old.finding.share:
                best[r.finding.code] = r
    codes = set(best)
    results = [r for r in best.values()
               if not (SUPPRESSED_BY.get(r.finding.code, set()) & codes)]
    if any(r.finding.share >= DOMINANT.get(r.finding.code, 2.0) for r in results):
        results = [r for r in results if r.finding.code not in IDLE_RULES]
    results += unexplained_idle(sig, results)
    results.sort(key=lambda r: (-r.finding.severity.rank, -r.finding.share,
                                _ORDER.get(r.finding.code, 99)))
    proposals = []
    seen: set[str] = set()
    for order, r in enumerate(results):
        for p in r.proposals:
            key = p.settings or p.action
            if key in seen:
                continue
            seen.add(key)
            proposals.append((order, r.finding.code, p))
    proposals.sort(key=lambda t: (-(t[2].gain_high or 0.0), t[0]))
    changes = [Change(rank=i + 1, finding=code, action=p.action, settings=p.settings,
                      gain_low=p.gain_low, gain_high=p.gain_high, gain_basis=p.gain_basis)
               for i, (_order, code, p) in enumerate(proposals)]
    return [r.finding for r in results], changes


def summary(sig: Signals) -> list[Observation]:
    """The figures that describe the job whatever its findings."""
    out: list[Observation] = []
    for g in sig.gpus:
        src = gpu_source(g)
        for name, unit in (("utilization_pct", "%"), ("sm_activity_pct", "%"),
                           ("tensor_activity_pct", "%"), ("dram_bandwidth_pct", "%"),
                           ("power_w", "W")):
            value = getattr(g, name)
            if value is not None:
                out.append(obs(f"gpu{g.index}.{name}", value, unit, src, 1))
        if g.memory_used_fraction is not None:
            out.append(obs(f"gpu{g.index}.memory_used_max", g.memory_used_fraction, "fraction",
                           src))
    if sig.steps:
        st = sig.steps
        out += [obs("step_time", st.median_s, "s", steps_source(st), 4),
                obs("steps_per_s", st.steps_per_s, "1/s", steps_source(st), 2)]
        if st.data_wait_share is not None:
            out.append(obs("batch_wait", st.data_wait_share, "of the step", steps_source(st)))
        if st.syncs_per_step is not None:
            out.append(obs("syncs_per_step", st.syncs_per_step, "", steps_source(st), 1))
    if sig.stacks:
        h = sig.stacks
        out += [obs(f"main_thread.{cls}", h.share(cls), "of its time", stacks_source(h))
                for cls in CLASSES if h.share(cls) >= 0.05]
        if h.functions:
            f = h.functions[0]
            out.append(obs("main_thread.busiest", f"{f.function} ({f.where})", "",
                           stacks_source(h)))
    if sig.compile:
        c = sig.compile
        out.append(obs("compile_time", c.compile_s, "s", compile_source(c), 1))
    if sig.process:
        p = sig.process
        out += [obs("trainer_cpu", p.trainer_cpu_pct, "% of a core", process_source(p), 1),
                obs("loader_workers", p.workers, "", process_source(p)),
                obs("host_memory_used_max", p.host_memory_used_max, "fraction",
                    process_source(p))]
    if sig.trace:
        t = sig.trace
        for d in t.devices:
            src = trace_source(t)
            out += [obs(f"trace.gpu{d.device}.idle", d.share(d.idle_us), "of span", src),
                    obs(f"trace.gpu{d.device}.compute", d.share(d.compute_us), "of span", src),
                    obs(f"trace.gpu{d.device}.non_compute", d.share(d.non_compute_us),
                        "of span", src)]
        if t.step_time_us is not None:
            out.append(obs("trace.step_time", t.step_time_us / 1000, "ms", trace_source(t), 2))
    return [o for o in out if o.value is not None]  # a figure not known (NaN) is left out


def make_diagnosis(sig: Signals, *, started_at: datetime, duration_s: float,
                   command: Sequence[str] | None = None, pid: int | None = None,
                   exit_code: int | None = None, sources: dict[str, str] | None = None,
                   notes: Sequence[str] = ()) -> Diagnosis:
    findings, changes = diagnose(sig)
    return Diagnosis(command=tuple(command) if command is not None else None, pid=pid,
                     exit_code=exit_code, started_at=started_at, duration_s=round(duration_s, 3),
                     gpus=tuple(g.index for g in sig.gpus), findings=tuple(findings),
                     changes=tuple(changes), summary=tuple(summary(sig)),
                     sources=dict(sources or {}), notes=tuple(notes))
