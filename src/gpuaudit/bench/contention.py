"""Was anything else using the GPUs while we measured? A figure taken on a shared GPU says how
fast the GPU was for us while someone else used it, not what the server delivers.

Between suites (and before the first, after the last; the runner leaves out a look where
nothing was measured since the previous one) `Watch.look` reads every benchmarked GPU
through `gpuaudit.hw` (NVML) while this run does nothing on it: once, then after `settle_s`
(GPM still counts our last kernels right after they end) and `window_s` later:
- NVML's process lists: a process that is not this run holds the GPU;
- GPM SM activity over that window (Hopper and newer): the GPU computes while we are idle.
  Without GPM, NVML's utilization is used at the first look only (its sampling period reaches
  back up to a second, into our own work at the later looks).
A suite's figures carry the evidence of the looks before and after it. A matmul or memory
figure whose IQR exceeds `SPREAD_FRACTION` of its median is marked on that evidence alone (a
clean run's widest was 13 % on the H200s; with a neighbour's matmul loop it was 80 %).

Our own process is recognised by its pid. Where NVML's pids come from another pid namespace
(a container), our pid is absent from the lists; one process we cannot see from here is then
taken to be us, and any further one as another tenant.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from gpuaudit.bench.stragglers import relative_iqr
from gpuaudit.bench.suites import HOST_SUITES
from gpuaudit.hw.nvml import NvmlSource
from gpuaudit.hw.telemetry import GpuStatic, read_gpu_sample, read_static
from gpuaudit.model import (
    ContendingProcess,
    Contention,
    Finding,
    GpuSample,
    Measurement,
    Severity,
)
from gpuaudit.parse import human_bytes

ACTIVITY_PCT = 5.0  # SM activity while we are idle above this: another workload computes
SPREAD_FRACTION = 0.30
SPREAD_SUITES = frozenset({"matmul", "memory"})
# The host suites' figures (bench.suites.HOST_SUITES): a process on a GPU does not make them
# contended. nvJPEG, the one GPU figure among them, carries its gpu_index and is judged like
# the others.
WINDOW_S = 0.25  # GPM needs samples ~100 ms+ apart; a quarter second per look
# A GPM sample taken right after our own kernels end still counts some of them: on an H200
# (validation/bench/gpm_settle.py) a look right after a synchronized matmul burst read 22-36 %
# SM activity with nothing else on the GPU, and readings up to ~180 ms after it still counted
# the burst; with 0.1-0.3 s of settling every look read 0 %.
SETTLE_S = 0.25


@dataclass(frozen=True)
class Look:
    """What one look saw on each GPU."""

    where: str  # "before matmul", "after collectives"
    processes: dict[int, tuple[ContendingProcess, ...]] = field(default_factory=dict)
    activity: dict[int, tuple[float, str]] = field(default_factory=dict)  # above threshold

    def busy_gpus(self) -> list[int]:
        return sorted(set(self.processes) | set(self.activity))


def others(samples: Iterable[GpuSample], own_pids: set[int]) -> dict[int, list[ContendingProcess]]:
    """Per GPU, the processes that are not this run (see the module doc for containers)."""
    found: dict[int, list[ContendingProcess]] = {}
    for s in samples:
        procs = {p.pid: p for p in s.processes}.values()
        rest = [ContendingProcess(gpu_index=s.index, pid=p.pid, command=_one_line(p.command),
                                  used_memory_bytes=p.used_memory_bytes)
                for p in procs if p.pid not in own_pids]
        if not any(p.pid in own_pids for p in procs):
            hidden = [p for p in rest if p.command is None]
            if hidden:  # NVML's pids are not ours to read: one unseen process may be us
                rest.remove(hidden[0])
        if rest:
            found[s.index] = rest
    return found


def _one_line(command: str | None) -> str | None:
    if command is None:
        return None
    text = " ".join(command.split())
    return text if len(text) <= 120 else text[:117] + "..."


def _ours() -> set[int]:
    """This process and its children (the DDP and collective workers it started): a worker
    still leaving the GPU at a look is our own work, not a neighbour's."""
    import psutil

    pids = {os.getpid()}
    with contextlib.suppress(psutil.Error):
        pids.update(c.pid for c in psutil.Process().children(recursive=True))
    return pids


class Watch:
    """Looks at the benchmarked GPUs between suites. `wait` passes the idle window (a replayed
    trace advances a frame instead of sleeping)."""

    def __init__(self, src: NvmlSource, gpus: Sequence[int], *, window_s: float = WINDOW_S,
                 settle_s: float = SETTLE_S,
                 wait: Callable[[float], object] = time.sleep,
                 own_pids: Callable[[], set[int]] | None = None) -> None:
        self.src = src
        self.static: list[GpuStatic] = [read_static(src, i) for i in gpus]
        self.window_s = window_s
        self.settle_s = settle_s
        self.wait = wait
        self.own_pids = own_pids or _ours
        self.looks: list[Look] = []

    def _read(self) -> list[GpuSample]:
        out = []
        for st in self.static:
            try:
                out.append(read_gpu_sample(self.src, st))
            except Exception:  # a GPU that cannot be read gives no evidence, not a crash
                continue
        return out

    def look(self, where: str) -> Look:
        first = self._read()
        if self.settle_s > 0:  # the GPM window restarts here, after our own work has left it
            self.wait(self.settle_s)
            self._read()
        self.wait(self.window_s)
        second = self._read()
        own = self.own_pids()
        procs: dict[int, dict[int, ContendingProcess]] = {}
        for gpu, found in [*others(first, own).items(), *others(second, own).items()]:
            for p in found:
                procs.setdefault(gpu, {}).setdefault(p.pid, p)
        activity: dict[int, tuple[float, str]] = {}
        for s in second:
            by_static = next((st for st in self.static if st.index == s.index), None)
            if s.sm_activity_pct is not None:
                reading = (s.sm_activity_pct, "gpm_sm_activity")
            elif not self.looks and not (by_static and by_static.gpm) \
                    and s.utilization_gpu_pct is not None:
                reading = (float(s.utilization_gpu_pct), "nvml_utilization")
            else:
                continue
            if reading[0] >= ACTIVITY_PCT:
                activity[s.index] = reading
        found = Look(where=where, processes={g: tuple(p.values()) for g, p in procs.items()},
                     activity=activity)
        self.looks.append(found)
        return found


def busy_line(look: Look) -> str:
    """One line naming what occupies the GPUs (for --exclusive's refusal)."""
    parts = []
    for gpu in look.busy_gpus():
        procs = [f"pid {p.pid} ({p.command or 'not visible from here'}"
                 + (f", {human_bytes(p.used_memory_bytes)}" if p.used_memory_bytes else "")
                 + ")" for p in look.processes.get(gpu, ())]
        if gpu in look.activity:
            pct, _ = look.activity[gpu]
            procs.append(f"{pct:.0f}% SM activity while this run was idle")
        parts.append(f"GPU {gpu}: " + "; ".join(procs))
    return "; ".join(parts)


def _evidence(looks: Sequence[Look], gpus: Iterable[int]) -> Contention | None:
    procs: dict[tuple[int, int], ContendingProcess] = {}
    activity: tuple[float, str] | None = None
    for look in looks:
        for g in gpus:
            for p in look.processes.get(g, ()):
                procs.setdefault((g, p.pid), p)
            if g in look.activity and (activity is None or look.activity[g][0] > activity[0]):
                activity = look.activity[g]
    if not procs and activity is None:
        return None
    named = [f"GPU {p.gpu_index} pid {p.pid} ({p.command or 'not visible from here'})"
             for p in procs.values()]
    if activity is not None:
        named.append(f"{activity[0]:.0f}% SM activity while this run was idle")
    return Contention(processes=tuple(procs.values()),
                      activity_pct=activity[0] if activity else None,
                      activity_source=activity[1] if activity else None,
                      summary="measured while other work ran on the GPU: " + "; ".join(named))


def mark(measured: Sequence[tuple[int, Measurement]], looks: Sequence[Look],
         gpus: Sequence[int]) -> list[Measurement]:
    """The figures with their contention set. `measured` pairs each figure with the index of
    the last look taken before its suite began; no look is taken during a suite, so the next
    look (if the run got that far) is the first one after the suite. A figure of no one GPU
    (collectives, totals) is judged on every benchmarked GPU."""
    out = []
    for before, m in measured:
        if (m.value is None or m.params.get("device") == "cpu"
                or (m.suite in HOST_SUITES and m.gpu_index is None)):
            out.append(m)
            continue
        around = looks[before:before + 2]
        on = [m.gpu_index] if m.gpu_index is not None else list(gpus)
        found = _evidence(around, on)
        spread = relative_iqr(m)
        if m.suite in SPREAD_SUITES and spread > SPREAD_FRACTION:
            why = f"IQR {100 * spread:.0f}% of the median"
            found = (found.model_copy(update={"spread_pct": round(100 * spread, 1),
                                              "summary": f"{found.summary}; {why}"})
                     if found else Contention(spread_pct=round(100 * spread, 1),
                                              summary=f"the spread says the GPU was shared: "
                                                      f"{why} (no other process seen)"))
        out.append(m if found is None else contended(m, found))
    return out


def contended(m: Measurement, why: Contention) -> Measurement:
    """`m` marked: kept as measured, but not judged against the datasheet."""
    return m.model_copy(update={
        "contention": why, "pct_of_spec": None,
        "notes": (f"CONTENDED: {why.summary}; not judged against spec", *m.notes)})


def findings(measured: Sequence[Measurement]) -> list[Finding]:
    """One WARN per GPU (or for the figures of no one GPU) whose figures were contended: the
    benchmarks do not describe the server."""
    by_gpu: dict[int | None, list[Measurement]] = {}
    for m in measured:
        if m.contention is not None:
            by_gpu.setdefault(m.gpu_index, []).append(m)
    out = []
    for gpu, ms in sorted(by_gpu.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
        procs = {p.pid: p for m in ms for p in (m.contention.processes if m.contention else ())}
        acts = [m.contention.activity_pct for m in ms
                if m.contention and m.contention.activity_pct is not None]
        where = "shared figures" if gpu is None else f"GPU {gpu}"
        out.append(Finding(
            code="bench.contended", severity=Severity.WARN, gpu_index=gpu,
            message=f"{len(ms)} figure(s) on {where} were measured while other work used the "
                    f"GPU ({ms[0].contention.summary if ms[0].contention else ''}): these "
                    "benchmarks do not describe the server",
            advice="Stop the other work or choose idle GPUs (--gpus), then run again; "
                   "`--exclusive` refuses to start on busy GPUs.",
            evidence={"figures": len(ms),
                      "pids": ",".join(str(p) for p in sorted(procs)) or None,
                      "commands": "; ".join(sorted({p.command or "?" for p in procs.values()}))
                      or None,
                      "activity_pct": max(acts) if acts else None}))
    return out
