"""The evidence a diagnosis is made from, gathered in one record, and the words that say where
each number came from."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuaudit.model import Observation

from .channel import SyncSite
from .compilation import CompileStats
from .gpustats import GpuStats
from .hoststats import ProcessStats, StepStats
from .kineto import TraceStats
from .stacks import HostStacks


@dataclass(frozen=True)
class Signals:
    """Everything a rule may look at. Any part may be missing: a rule that needs it stays
    silent."""

    gpus: tuple[GpuStats, ...] = ()
    process: ProcessStats | None = None
    steps: StepStats | None = None
    trace: TraceStats | None = None
    # The GPU's dense datasheet peaks (TFLOP/s) by precision, where the GPU is in the catalog.
    peaks_tflops: dict[str, float] | None = None
    alloc_retries: int | None = None  # torch.cuda.memory_stats()["num_alloc_retries"]
    stacks: HostStacks | None = None  # where the trainer's main thread spends its time
    compile: CompileStats | None = None  # torch.compile's warm-up and recompiles
    sync_sites: tuple[SyncSite, ...] = ()  # the job's host syncs, by call site


def gpu_source(g: GpuStats) -> str:
    what = "NVML GPM" if g.gpm else "NVML"
    return f"{what}, median of {g.samples} samples at {g.interval_s:g} s, GPU {g.index}"


def obs(name: str, value: float | int | str | bool | None, unit: str, source: str,
        digits: int = 3) -> Observation:
    if isinstance(value, float):
        # NaN (a median of nothing) is not a figure: None, "not known", as a record holds it.
        value = round(value, digits) if math.isfinite(value) else None
    return Observation(name=name, value=value, unit=unit, source=source)


def gpu_obs(g: GpuStats, name: str, unit: str = "%") -> Observation:
    return obs(name, getattr(g, name), unit, gpu_source(g), 2)


def process_source(p: ProcessStats) -> str:
    return f"psutil, the job's process tree, median of {p.ticks} ticks"


def steps_source(s: StepStats) -> str:
    return f"{s.source}, median of {s.steps} steps"


def stacks_source(h: HostStacks) -> str:
    return f"py-spy, {h.samples} samples of pid {h.pid}'s main thread"


def compile_source(c: CompileStats) -> str:
    return f"torch.compile's callbacks (bootstrap), {c.compiles} compilations"


def trace_source(t: TraceStats) -> str:
    where = f"{t.steps} profiled steps" if t.steps else "the whole trace"
    return f"torch.profiler trace, {where} (HTA definitions)"
