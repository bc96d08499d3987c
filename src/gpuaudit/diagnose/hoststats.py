"""The host side of a job, summarised: its trainer processes and their data-loader workers
(from the process tree's ticks), and its steps (from the step markers of the Python API)."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from gpuaudit.hw.proctree import ProcTick
from gpuaudit.percentile import percentile

# Processes that run Python: trainers and DataLoader workers are; shells and launchers may be.
PYTHON_NAMES = ("python", "pt_main_thread", "pt_data_worker", "ipython")


@dataclass(frozen=True)
class ProcessStats:
    ticks: int
    cores: int
    trainers: int  # processes that drive a GPU (or the job's main Python process)
    trainer_cpu_pct: float  # median over ticks of the busiest trainer (100 = one core)
    workers: int  # children of the trainers (data-loader workers), most seen at once
    worker_cpu_pct: float  # median over ticks of the workers' mean (100 = one core each)
    workers_cpu_total_pct: float  # median over ticks of all workers together
    host_cpu_pct: float  # the whole host, 0–100 of all cores
    host_memory_used_max: float  # fraction
    swap_used_max_bytes: int
    # median over ticks of the busiest trainer's main thread alone (None: not read)
    main_thread_cpu_pct: float | None = None


@dataclass(frozen=True)
class StepStats:
    steps: int
    median_s: float
    p10_s: float
    p90_s: float
    data_wait_median_s: float | None = None  # time waiting for the next batch, per step
    source: str = "gpuaudit.step() markers"
    syncs_per_step: float | None = None  # host syncs (median per step), where counted
    sync_wait_median_s: float | None = None  # time blocked in them, per step
    # steps in which a convolution met a new input shape under cudnn.benchmark, and the time
    # they took beyond the median of the others, as a share of all the steps' time (None:
    # too few ordinary steps to compare with)
    new_shape_steps: int = 0
    new_shape_extra_share: float | None = 0.0

    @property
    def steps_per_s(self) -> float:
        return 1 / self.median_s if self.median_s > 0 else 0.0

    @property
    def data_wait_share(self) -> float | None:
        if self.data_wait_median_s is None or self.median_s <= 0:
            return None
        return min(1.0, self.data_wait_median_s / self.median_s)

    @property
    def sync_wait_share(self) -> float | None:
        if self.sync_wait_median_s is None or self.median_s <= 0:
            return None
        return min(1.0, self.sync_wait_median_s / self.median_s)

    @property
    def spread(self) -> float:
        """(p90 − p10) ÷ median: how uneven the steps are."""
        return (self.p90_s - self.p10_s) / self.median_s if self.median_s > 0 else 0.0


def is_python(name: str) -> bool:
    return any(name.lower().startswith(p) for p in PYTHON_NAMES)


def process_stats(ticks: Sequence[ProcTick], gpu_pids: set[int] | None = None
                  ) -> ProcessStats | None:
    """Trainers: the job's processes NVML lists on a GPU; without any, the Python processes
    nearest the root (the root itself when it is Python). Workers: their children."""
    ticks = list(ticks[1:]) if len(ticks) > 1 else list(ticks)  # the first has no interval
    if not ticks:
        return None
    trainer_ids: set[int] = set()
    seen = {p.pid: p for t in ticks for p in t.procs}
    if gpu_pids:
        trainer_ids = {pid for pid in seen if pid in gpu_pids}
    if not trainer_ids:
        pythons = [p for p in seen.values() if is_python(p.name)]
        if pythons:
            parents = {p.pid for p in pythons}
            # the outermost Python processes: no Python parent in the tree
            trainer_ids = {p.pid for p in pythons if p.ppid not in parents}
        elif ticks[0].procs:
            trainer_ids = {ticks[0].procs[0].pid}
    trainer_cpu, worker_mean, worker_total, counts = [], [], [], []
    main_cpu: list[float] = []
    for t in ticks:
        trainers = [p for p in t.procs if p.pid in trainer_ids]
        threads = [p.main_thread_cpu_pct for p in trainers if p.main_thread_cpu_pct is not None]
        if threads:
            main_cpu.append(max(threads))
        workers = [p for p in t.procs if p.ppid in trainer_ids and p.pid not in trainer_ids
                   and is_python(p.name)]
        trainer_cpu.append(max((p.cpu_pct for p in trainers), default=0.0))
        counts.append(len(workers))
        worker_total.append(sum(p.cpu_pct for p in workers))
        if workers:
            worker_mean.append(worker_total[-1] / len(workers))
    return ProcessStats(
        ticks=len(ticks), cores=ticks[-1].cores, trainers=len(trainer_ids),
        trainer_cpu_pct=statistics.median(trainer_cpu),
        main_thread_cpu_pct=statistics.median(main_cpu) if main_cpu else None,
        workers=max(counts), worker_cpu_pct=statistics.median(worker_mean) if worker_mean else 0.0,
        workers_cpu_total_pct=statistics.median(worker_total),
        host_cpu_pct=statistics.median(t.host_cpu_pct for t in ticks),
        host_memory_used_max=max(t.host_memory_used_fraction for t in ticks),
        swap_used_max_bytes=max(t.swap_used_bytes for t in ticks))


SOURCES = {"markers": "gpuaudit.step() markers",
           "optimizer": "optimizer steps (found by the bootstrap)",
           "batches": "DataLoader batches (found by the bootstrap)"}


def step_stats(times_s: Sequence[float], waits_s: Sequence[float | None] = (), *,
               skip: int = 1, source: str = "gpuaudit.step() markers",
               syncs: Sequence[int] = (), sync_s: Sequence[float] = (),
               new_shapes: Sequence[bool] = ()) -> StepStats | None:
    """Step durations from the times the steps ended; the first `skip` steps (warm-up:
    allocation, autotuning, compilation) are left out when there are enough. Per-step
    values (waits, syncs) belong to the step that ends at the same index."""
    order = sorted(range(len(times_s)), key=lambda i: times_s[i])
    times = [times_s[i] for i in order]

    def per_step(values: Sequence) -> list:  # the value of each step that has a duration
        if len(values) != len(times_s):
            return list(values)
        return [values[i] for i in order][1:]

    durations = [b - a for a, b in itertools.pairwise(times)]
    waits, n_syncs, blocked, new = (per_step(v) for v in (waits_s, syncs, sync_s, new_shapes))
    if len(durations) > skip + 2:
        durations = durations[skip:]
        waits, n_syncs, blocked, new = (v[skip:] if len(v) > skip + 2 else v
                                        for v in (waits, n_syncs, blocked, new))
    if not durations:
        return None
    new_steps, extra = _new_shape_cost(durations, new)
    waits = [w for w in waits if w is not None]
    d = sorted(durations)
    return StepStats(steps=len(durations), median_s=statistics.median(d),
                     p10_s=percentile(d, 10), p90_s=percentile(d, 90),
                     data_wait_median_s=statistics.median(waits) if waits else None,
                     source=source,
                     syncs_per_step=statistics.median(n_syncs) if n_syncs else None,
                     sync_wait_median_s=statistics.median(blocked) if blocked else None,
                     new_shape_steps=new_steps, new_shape_extra_share=extra)


def _new_shape_cost(durations: Sequence[float], new: Sequence[bool]
                    ) -> tuple[int, float | None]:
    """Steps flagged new-shape, and their time beyond the median of the other steps as a
    share of all the steps' time; None with fewer than 3 other steps to compare with (every
    step met a new shape: an H200 job at a new resolution each step had none)."""
    if len(new) != len(durations) or not any(new):
        return 0, 0.0
    others = [d for d, n in zip(durations, new, strict=True) if not n]
    if len(others) < 3:
        return sum(new), None
    base = statistics.median(others)
    extra = sum(max(0.0, d - base) for d, n in zip(durations, new, strict=True) if n)
    total = sum(durations)
    return sum(new), (extra / total if total > 0 else 0.0)
