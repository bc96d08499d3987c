"""The monitor's samples of the GPUs a job used, summarised per GPU (medians over the window).

The first sample of a window is left out: GPM's rates need the interval before it, and a job
is usually still starting then.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gpuaudit.model import GpuSample, Sample

# Clock-event reasons that slow the clocks for power or heat (nvmlClocksEventReason names).
THROTTLE_REASONS = ("sw_power_cap", "hw_slowdown", "hw_thermal_slowdown",
                    "hw_power_brake_slowdown", "sw_thermal_slowdown")
ACTIVE_SM_PCT = 0.5  # a tick with less SM activity (and NVML utilization 0) is idle
MIB = 1 << 20


@dataclass(frozen=True)
class GpuStats:
    index: int
    name: str | None
    samples: int
    interval_s: float
    gpm: bool
    utilization_pct: float | None = None
    sm_activity_pct: float | None = None
    sm_occupancy_pct: float | None = None
    tensor_activity_pct: float | None = None
    dram_bandwidth_pct: float | None = None
    fp32_activity_pct: float | None = None
    fp16_activity_pct: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None  # median over the loaded ticks
    sm_clock_max_mhz: int | None = None  # the GPU's maximum, where known
    throttle_fraction: float = 0.0  # of the loaded ticks, those with a power/thermal reason
    throttle_reasons: tuple[str, ...] = ()
    loaded_ticks: int = 0
    pcie_rx_bytes_per_s: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    nvlink_bytes_per_s: float | None = None  # rx + tx
    memory_used_max_bytes: int | None = None
    memory_total_bytes: int | None = None
    active_fraction: float = 0.0  # ticks with any work ÷ ticks
    h2d_burst_ratio: float | None = None  # median H2D rate on active ticks ÷ on idle ticks
    job_memory_bytes: int | None = None  # what the job's processes hold (max)
    other_processes: tuple[tuple[int, str | None, int | None], ...] = ()  # (pid, cmd, bytes)
    # SM utilization of the other processes together and of the job's (NVML's per-process
    # samples, mean over the ticks that had them; NVML gives each sample period mostly to one
    # process, so only the mean over many ticks reads as a share); None where NVML gave none,
    # and the others' None where no sample caught them working beside the job
    others_sm_pct: float | None = None
    job_sm_pct: float | None = None
    # What the other processes asked of the GPU on their own: its utilization (the share of
    # time a kernel ran; else SM activity), median over the ticks before the job's processes
    # reached it, while only others were on it.
    others_alone_busy_pct: float | None = None
    utilization_series: tuple[float | None, ...] = field(default=(), repr=False)

    @property
    def pcie_bytes_per_s(self) -> float | None:
        if self.pcie_rx_bytes_per_s is None and self.pcie_tx_bytes_per_s is None:
            return None
        return (self.pcie_rx_bytes_per_s or 0.0) + (self.pcie_tx_bytes_per_s or 0.0)

    @property
    def pcie_link_bytes_per_s(self) -> float | None:
        """One direction of the link as trained now, after encoding (gen 3+: 128b/130b)."""
        if not self.pcie_gen or not self.pcie_width:
            return None
        per_lane_gt = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}.get(self.pcie_gen)
        if per_lane_gt is None:
            return None
        encoding = 0.8 if self.pcie_gen <= 2 else 128 / 130
        return per_lane_gt * 1e9 * encoding / 8 * self.pcie_width

    @property
    def memory_used_fraction(self) -> float | None:
        if self.memory_used_max_bytes is None or not self.memory_total_bytes:
            return None
        return self.memory_used_max_bytes / self.memory_total_bytes

    @property
    def idle_share(self) -> float | None:
        """Share of time no kernel or copy ran: 1 − NVML utilization."""
        return None if self.utilization_pct is None else 1 - self.utilization_pct / 100

    @property
    def sm_busy(self) -> float | None:
        """Share of time the SMs worked: GPM's SM activity, else NVML utilization."""
        if self.sm_activity_pct is not None:
            return self.sm_activity_pct / 100
        return None if self.utilization_pct is None else self.utilization_pct / 100


def _mean(values: Iterable[float | int | None]) -> float | None:
    got = [float(v) for v in values if v is not None]
    return statistics.fmean(got) if got else None


def _median(values: Iterable[float | int | None]) -> float | None:
    got = [float(v) for v in values if v is not None]
    return statistics.median(got) if got else None


def _active(g: GpuSample) -> bool:
    return bool((g.utilization_gpu_pct or 0) > 0 or (g.sm_activity_pct or 0) > ACTIVE_SM_PCT)


def job_gpus(samples: Sequence[Sample], job_pids: set[int] | None) -> tuple[list[int], str]:
    """The GPUs the job used, and how that was decided."""
    seen: dict[int, set[int]] = {}
    for s in samples:
        for g in s.gpus:
            seen.setdefault(g.index, set()).update(p.pid for p in g.processes)
    if job_pids is not None:
        mine = [i for i, pids in sorted(seen.items()) if pids & job_pids]
        if mine:
            return mine, "the GPUs NVML lists the job's processes on"
    else:
        mine = [i for i, pids in sorted(seen.items()) if pids]
        if mine:
            return mine, "the GPUs with a process on them"
    # Processes not visible (another PID namespace, or none listed): what rose or worked.
    first = {g.index: g.memory_used_bytes or 0 for g in samples[0].gpus} if samples else {}
    busy = sorted({g.index for s in samples[1:] for g in s.gpus
                   if (g.memory_used_bytes or 0) - first.get(g.index, 0) > 256 * MIB
                   or _active(g)})
    if busy:
        return busy, "the GPUs whose memory rose or that worked (processes not visible)"
    return sorted(seen), "every GPU watched (none showed the job)"


def gpu_stats(samples: Sequence[Sample], index: int, job_pids: set[int] | None = None,
              sm_clock_max_mhz: int | None = None, lead: Sequence[Sample] = ()
              ) -> GpuStats | None:
    """Medians of one GPU over the window the job was on it (the first sample left out);
    `lead`: samples before the window, for what other processes did before the job came."""
    rows = [(s, g) for s in samples[1:] for g in s.gpus if g.index == index and g.error is None]
    alone: list[GpuSample] = []
    if job_pids is not None:
        on = [(s, g) for s, g in rows if any(p.pid in job_pids for p in g.processes)]
        # the ticks before the job reached this GPU, with only other processes on it (the
        # first of all samples left out: GPM's rates need the interval before it)
        before = [g for s in [*lead, *samples][1:] for g in s.gpus
                  if g.index == index and g.error is None]
        for g in before:
            if any(p.pid in job_pids for p in g.processes):
                break
            if g.processes:
                alone.append(g)
    else:
        on = [(s, g) for s, g in rows if g.processes]
    rows = on or rows
    if not rows:
        return None
    gs = [g for _s, g in rows]
    loaded = [g for g in gs if (g.sm_activity_pct if g.sm_activity_pct is not None
                                else g.utilization_gpu_pct or 0) >= 50]
    throttled = [g for g in loaded if set(g.clock_event_reasons or ()) & set(THROTTLE_REASONS)]
    reasons = sorted({r for g in throttled for r in g.clock_event_reasons or ()
                      if r in THROTTLE_REASONS})
    gpm = any(g.sm_activity_pct is not None for g in gs)
    rx = _median(g.gpm_pcie_rx_bytes_per_s if g.gpm_pcie_rx_bytes_per_s is not None
                 else g.pcie_rx_bytes_per_s for g in gs)
    tx = _median(g.gpm_pcie_tx_bytes_per_s if g.gpm_pcie_tx_bytes_per_s is not None
                 else g.pcie_tx_bytes_per_s for g in gs)
    active = [g for g in gs if _active(g)]
    idle = [g for g in gs if not _active(g)]
    burst = None
    if active and idle:
        on_rx = _median(g.gpm_pcie_rx_bytes_per_s or g.pcie_rx_bytes_per_s for g in active)
        off_rx = _median(g.gpm_pcie_rx_bytes_per_s or g.pcie_rx_bytes_per_s for g in idle)
        if on_rx is not None and off_rx:
            burst = on_rx / off_rx
    nvlink = _nvlink_rate(rows)
    job_mem = [sum(p.used_memory_bytes or 0 for p in g.processes
                   if job_pids is None or p.pid in job_pids) for g in gs]
    others: dict[int, tuple[int, str | None, int | None]] = {}
    if job_pids is not None:
        for g in gs:
            for p in g.processes:
                if p.pid not in job_pids:
                    old = others.get(p.pid)
                    used = max(p.used_memory_bytes or 0, (old[2] or 0) if old else 0)
                    others[p.pid] = (p.pid, p.command, used)
    others_sm, job_sm = [], []
    # caught working in a tick in which the job was too (not only while it started or ended)
    others_seen = any(
        any(p.sm_util_pct is not None for p in g.processes if p.pid in others)
        and any(p.sm_util_pct is not None for p in g.processes if p.pid not in others)
        for g in gs)
    for g in gs:
        if any(p.sm_util_pct is not None for p in g.processes):
            mine = job_pids is None
            job_sm.append(sum(p.sm_util_pct or 0.0 for p in g.processes
                              if mine or p.pid in (job_pids or ())))
            others_sm.append(0.0 if mine else sum(p.sm_util_pct or 0.0 for p in g.processes
                                                  if p.pid not in (job_pids or ())))
    last = gs[-1]
    interval = samples[-1].interval_s if samples else 0.0
    return GpuStats(
        index=index, name=last.name, samples=len(gs), interval_s=interval, gpm=gpm,
        utilization_pct=_median(g.utilization_gpu_pct for g in gs),
        sm_activity_pct=_median(g.sm_activity_pct for g in gs),
        sm_occupancy_pct=_median(g.sm_occupancy_pct for g in gs),
        tensor_activity_pct=_median(g.tensor_activity_pct for g in gs),
        dram_bandwidth_pct=_median(g.dram_bandwidth_util_pct for g in gs),
        fp32_activity_pct=_median(g.fp32_activity_pct for g in gs),
        fp16_activity_pct=_median(g.fp16_activity_pct for g in gs),
        power_w=_median(g.power_w for g in gs),
        power_limit_w=_median(g.power_limit_w for g in gs),
        sm_clock_mhz=_median(g.sm_clock_mhz for g in loaded) if loaded else None,
        sm_clock_max_mhz=sm_clock_max_mhz,
        throttle_fraction=len(throttled) / len(loaded) if loaded else 0.0,
        throttle_reasons=tuple(reasons), loaded_ticks=len(loaded),
        pcie_rx_bytes_per_s=rx, pcie_tx_bytes_per_s=tx,
        pcie_gen=last.pcie_link_gen, pcie_width=last.pcie_link_width,
        nvlink_bytes_per_s=nvlink,
        memory_used_max_bytes=max((g.memory_used_bytes for g in gs
                                   if g.memory_used_bytes is not None), default=None),
        memory_total_bytes=last.memory_total_bytes,
        active_fraction=len(active) / len(gs), h2d_burst_ratio=burst,
        job_memory_bytes=max(job_mem) if any(job_mem) else None,
        other_processes=tuple(others.values()),
        # (never caught in a sample over the window: not measured, rather than 0)
        others_sm_pct=_mean(others_sm) if job_pids is not None and others_seen else None,
        job_sm_pct=_mean(job_sm),
        others_alone_busy_pct=_median(g.utilization_gpu_pct if g.utilization_gpu_pct is not None
                                      else g.sm_activity_pct for g in alone),
        utilization_series=tuple(g.utilization_gpu_pct for g in gs))


def _nvlink_rate(rows: list[tuple[Sample, GpuSample]]) -> float | None:
    """rx + tx over NVLink: GPM's rates where there are some, else the counters' growth."""
    gpm = _median((g.gpm_nvlink_rx_bytes_per_s or 0) + (g.gpm_nvlink_tx_bytes_per_s or 0)
                  for _s, g in rows if g.gpm_nvlink_rx_bytes_per_s is not None
                  or g.gpm_nvlink_tx_bytes_per_s is not None)
    if gpm is not None:
        return gpm
    counted = [(s.time, (g.nvlink_rx_bytes or 0) + (g.nvlink_tx_bytes or 0)) for s, g in rows
               if g.nvlink_rx_bytes is not None or g.nvlink_tx_bytes is not None]
    if len(counted) < 2:
        return None
    seconds = (counted[-1][0] - counted[0][0]).total_seconds()
    return (counted[-1][1] - counted[0][1]) / seconds if seconds > 0 else None
