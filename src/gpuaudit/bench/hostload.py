"""Was anything else using the host's CPUs while a suite measured them? A CPU figure (a CPU
matmul, the host's memory bandwidth, JPEG decoding, gloo collectives, a model trained on the
CPU) taken while other processes kept cores busy says how fast the host was for us beside them,
not what it delivers; and two such runs differ by what else ran, not by the machine.

Around each suite the runner reads the system's busy CPU time (/proc/stat through psutil, steal
included: another tenant of a VM) and this process tree's own; the difference, over the suite's
wall time, is the cores others kept busy. The CPU figures of the suite carry it
(`params.host_others_cores`, with `params.host_cores`); `compare` does not judge a CPU figure
measured beside a quarter of the host's cores or more."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import psutil

from gpuaudit.bench.suites import HOST_SUITES
from gpuaudit.model import Measurement

BUSY_SHARE = 0.25  # others on this share of the cores or more: CPU figures are not judged


def on_cpu(m: Measurement) -> bool:
    """Measured on the host's CPUs: it moves with whatever else the host runs."""
    return (m.params.get("device") == "cpu" or m.params.get("backend") == "gloo"
            or (m.suite in HOST_SUITES and m.gpu_index is None))


@dataclass(frozen=True)
class Reading:
    wall_s: float
    busy_s: float  # every core's non-idle time, summed
    ours_s: float  # this process and its children, summed


def _busy() -> float:
    t = psutil.cpu_times()
    total = sum(t)
    # guest time is counted inside user time already
    total -= getattr(t, "guest", 0.0) + getattr(t, "guest_nice", 0.0)
    return total - t.idle - getattr(t, "iowait", 0.0)


def _ours() -> float:
    me = psutil.Process()
    t = me.cpu_times()
    used = t.user + t.system + t.children_user + t.children_system
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            c = child.cpu_times()
            used += c.user + c.system
    return used


def read() -> Reading | None:
    try:
        return Reading(time.monotonic(), _busy(), _ours())
    except (psutil.Error, OSError, AttributeError):
        return None


def others_cores(start: Reading | None, end: Reading | None) -> float | None:
    """Cores kept busy by other processes between the two readings."""
    if start is None or end is None or end.wall_s - start.wall_s <= 0:
        return None
    others = (end.busy_s - start.busy_s) - (end.ours_s - start.ours_s)
    return max(0.0, others / (end.wall_s - start.wall_s))


def mark(m: Measurement, others: float | None) -> Measurement:
    """`m` with the host's other load, when it is a CPU figure and the load is known."""
    if others is None or m.value is None or not on_cpu(m):
        return m
    return m.model_copy(update={"params": {**m.params, "host_others_cores": round(others, 2),
                                           "host_cores": psutil.cpu_count() or 1}})


def busy(m: Measurement) -> bool:
    """Measured beside others using BUSY_SHARE of the host's cores or more."""
    others, cores = m.params.get("host_others_cores"), m.params.get("host_cores")
    return (isinstance(others, int | float) and isinstance(cores, int) and cores > 0
            and others / cores >= BUSY_SHARE)
