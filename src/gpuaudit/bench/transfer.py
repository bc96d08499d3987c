"""Host↔device copy bandwidth: pinned and pageable host memory, each GPU alone and all at once.

Each GPU alone shows its own PCIe link; all GPUs at once expose what they share (a PCIe switch,
a host bridge, one socket's memory). Where the host has several NUMA nodes, the thread that
allocates and copies a GPU's host buffer runs on that GPU's CPUs, so the buffer sits in the
GPU's NUMA node (pages land on the node of the CPU that first touches them).

Figures are GB/s (10^9 B/s) per direction, judged against the link's theoretical rate.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from gpuaudit.bench import pageable
from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.pcie import below_max_note, link_rate_gbps, max_rate_gbps
from gpuaudit.bench.stats import measure, reason_of, skipped
from gpuaudit.hw.torch_env import CudaDevice, import_torch, why_no_cuda
from gpuaudit.model import Gpu, Machine, Measurement, Params

SUITE = "transfer"
UNIT = "GB/s"
MIB = 1 << 20
GIB = 1 << 30
ALONE = ("h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable", "d2h_pageable_reused")
TOTALS = ("h2d_pinned_all_total", "d2h_pinned_all_total")
TOTAL_NOTE = ("all GPUs' bytes copied at once over the time from the first start to the last "
              "end; well below the sum of the links means the GPUs share a PCIe switch, a host "
              "bridge or one socket's memory")


# ---- pure helpers (tested without a GPU) ----

def gbps(nbytes: float, seconds: float) -> float:
    """Bytes over seconds in GB/s (10^9 B/s)."""
    if seconds <= 0:
        raise ValueError(f"non-positive duration {seconds}")
    return nbytes / seconds / 1e9


def aggregate_gbps(windows: Sequence[Sequence[tuple[float, float]]],
                   nbytes: Sequence[int]) -> list[float]:
    """The concurrent run's total rate per iteration.

    windows[g][i] is GPU g's (start, end) host time in iteration i; nbytes[g] its copy size.
    Iteration i's figure is all bytes over the span from the earliest start to the latest end,
    so a GPU that finishes late (a shared link) lowers the total.
    """
    if len(windows) != len(nbytes) or not windows:
        raise ValueError("one window list and one size per GPU")
    total = sum(nbytes)
    count = min(len(w) for w in windows)
    return [gbps(total, max(w[i][1] for w in windows) - min(w[i][0] for w in windows))
            for i in range(count)]


def numa_cpus(machine: Machine, gpu: Gpu | None) -> tuple[int, ...] | None:
    """The CPUs to run a GPU's host-side thread on: its affinity where NUMA placement matters."""
    if gpu is None or not gpu.cpu_affinity or (machine.host.numa_nodes or 1) < 2:
        return None
    return gpu.cpu_affinity


def link_spec(ctx: BenchContext, nvml_index: int) -> tuple[float | None, tuple[str, ...]]:
    """(per-direction rate the GPU's PCIe link should reach, notes about the link)."""
    gpu = ctx.gpu(nvml_index)
    rate = max_rate_gbps(gpu.pcie) if gpu else None
    if rate is None:  # NVML could not say: fall back to the datasheet's link
        spec = ctx.spec(nvml_index)
        rate = link_rate_gbps(spec.pcie_generation, spec.pcie_width) if spec else None
    note = below_max_note(gpu.pcie) if gpu else None
    return rate, (note,) if note else ()


def cpu_only_reason() -> str:
    """Why a suite got no GPU: no torch, a CPU-only torch, no device; or none was chosen."""
    why = why_no_cuda()
    return "no GPU selected" if why == "CUDA is available" else why


# ---- torch helpers shared with p2p and latency ----

@contextmanager
def on_cpus(cpus: Sequence[int] | None) -> Iterator[bool]:
    """Run the calling thread on `cpus` (Linux affinity is per thread); yields whether it did."""
    bound = False
    before: set[int] = set()
    if cpus and hasattr(os, "sched_setaffinity"):
        before = os.sched_getaffinity(0)
        wanted = set(cpus) & before  # a container may allow only some of them
        if wanted:
            try:
                os.sched_setaffinity(0, wanted)
                bound = True
            except OSError:
                bound = False
    try:
        yield bound
    finally:
        if bound:
            os.sched_setaffinity(0, before)


@contextmanager
def streams(torch: Any, *chosen: Any) -> Iterator[None]:
    """Make each stream current on its own device (several devices at once)."""
    with ExitStack() as stack:
        for s in chosen:
            stack.enter_context(torch.cuda.stream(s))
        yield


def release(torch: Any) -> None:
    """Give cached device and pinned host memory back (after OOM; between NUMA placements)."""
    torch.cuda.empty_cache()
    empty_host = getattr(getattr(torch, "accelerator", None), "empty_host_cache", None)
    empty_host = empty_host or getattr(torch._C, "_host_emptyCache", None)
    if empty_host is not None:
        empty_host()


# ---- measuring ----

@dataclass(frozen=True)
class Plan:
    nbytes: int
    warmup: int
    iters: int


def plan_for(ctx: BenchContext) -> Plan:
    # Large buffers so per-copy overheads vanish; the quick profile stays ~1 s per GPU.
    return Plan(nbytes=ctx.pick(256 * MIB, GIB, 4 * GIB), warmup=ctx.pick(2, 3, 3),
                iters=ctx.pick(8, 15, 20))


def pageable_plan(ctx: BenchContext) -> pageable.PageablePlan:
    """Pageable copies at the sizes people copy; the sweep on every GPU only past quick (the
    rate is the host's more than the GPU's)."""
    sizes = (4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB, GIB)
    return pageable.PageablePlan(
        headline=plan_for(ctx).nbytes,
        sizes=ctx.pick((4 * MIB, 64 * MIB, 256 * MIB), sizes, (*sizes, 4 * GIB)),
        seconds=ctx.pick(0.1, 0.3, 0.5), sweep_all_gpus=ctx.pick(False, True, True))


def _buffers(torch: Any, cuda_index: int, nbytes: int) -> tuple[Any, Any, Any]:
    device = torch.device("cuda", cuda_index)
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_(0, 256)
    back = torch.empty_like(src)
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    return src, back, host


def _timed_copies(torch: Any, dst: Any, src: Any, cuda_index: int, plan: Plan) -> list[float]:
    """GB/s of each timed pinned copy, timed by CUDA events."""
    samples = []
    stream = torch.cuda.current_stream(cuda_index)
    for i in range(plan.warmup + plan.iters):
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record(stream)
        dst.copy_(src, non_blocking=True)
        end.record(stream)
        end.synchronize()
        if i >= plan.warmup:
            samples.append(gbps(src.numel() * src.element_size(),
                                start.elapsed_time(end) / 1e3))
    return samples


def _pageable(torch: Any, ctx: BenchContext, dev: CudaDevice, nvml: int, sweep: bool
              ) -> list[Measurement]:
    spec, notes = link_spec(ctx, nvml)
    with on_cpus(numa_cpus(ctx.machine, ctx.gpu(nvml))) as bound:
        with torch.cuda.device(dev.cuda_index):
            found = pageable.measure_gpu(torch, dev.cuda_index, nvml, pageable_plan(ctx), sweep,
                                         spec, notes, {"numa_bound": bound})
        release(torch)
    return found


def _pinned(torch: Any, ctx: BenchContext, dev: CudaDevice, nvml: int, plan: Plan
            ) -> list[Measurement]:
    kind = "pinned"
    spec, notes = link_spec(ctx, nvml)
    with on_cpus(numa_cpus(ctx.machine, ctx.gpu(nvml))) as bound:
        params: Params = {"bytes": plan.nbytes, "host_memory": kind, "numa_bound": bound}
        try:
            with torch.cuda.device(dev.cuda_index):
                src, back, host = _buffers(torch, dev.cuda_index, plan.nbytes)
                d2h = _timed_copies(torch, host, src, dev.cuda_index, plan)
                h2d = _timed_copies(torch, back, host, dev.cuda_index, plan)
                # `back` went device → host → device: equal bytes prove both directions.
                ok = bool(torch.equal(src, back))
            del src, back, host
        except RuntimeError as e:  # OOM (device or pinned host) and other CUDA errors
            release(torch)
            return [skipped(SUITE, f"{d}_{kind}", UNIT, reason_of(e), gpu_index=nvml,
                            params=params, spec_value=spec) for d in ("h2d", "d2h")]
        release(torch)  # the next GPU's pinned buffer must be allocated on its own node
    return [measure(SUITE, f"{d}_{kind}", UNIT, samples, warmup=plan.warmup, spec_value=spec,
                    gpu_index=nvml, params=params, verified=ok, notes=notes)
            for d, samples in (("h2d", h2d), ("d2h", d2h))]


@dataclass
class _Lane:
    """One GPU's share of the concurrent run."""
    h2d: list[float] = field(default_factory=list)
    d2h: list[float] = field(default_factory=list)
    h2d_windows: list[tuple[float, float]] = field(default_factory=list)
    d2h_windows: list[tuple[float, float]] = field(default_factory=list)
    ok: bool = False
    bound: bool = False
    error: BaseException | None = None


def _lockstep(torch: Any, dst: Any, src: Any, cuda_index: int, plan: Plan,
              barrier: threading.Barrier) -> tuple[list[float], list[tuple[float, float]]]:
    """Copies that start together on every GPU (a barrier per iteration)."""
    samples, windows = [], []
    stream = torch.cuda.current_stream(cuda_index)
    nbytes = src.numel() * src.element_size()
    for i in range(plan.warmup + plan.iters):
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        barrier.wait()
        t0 = time.perf_counter()
        start.record(stream)
        dst.copy_(src, non_blocking=True)
        end.record(stream)
        end.synchronize()
        t1 = time.perf_counter()
        if i >= plan.warmup:
            samples.append(gbps(nbytes, start.elapsed_time(end) / 1e3))
            windows.append((t0, t1))
    return samples, windows


def _lane(torch: Any, lane: _Lane, cuda_index: int, cpus: tuple[int, ...] | None, plan: Plan,
          barrier: threading.Barrier) -> None:
    try:
        torch.cuda.set_device(cuda_index)  # per thread
        with on_cpus(cpus) as bound:
            lane.bound = bound
            src, back, host = _buffers(torch, cuda_index, plan.nbytes)
            barrier.wait()  # all allocated before any copy
            lane.d2h, lane.d2h_windows = _lockstep(torch, host, src, cuda_index, plan, barrier)
            lane.h2d, lane.h2d_windows = _lockstep(torch, back, host, cuda_index, plan, barrier)
            lane.ok = bool(torch.equal(src, back))
    except BaseException as e:  # report it from the main thread; free the others
        lane.error = e
        barrier.abort()


def _all_at_once(torch: Any, ctx: BenchContext, plan: Plan) -> list[Measurement]:
    n = len(ctx.devices)
    barrier = threading.Barrier(n, timeout=ctx.timeout_s)
    lanes = [_Lane() for _ in ctx.devices]
    threads = [threading.Thread(target=_lane, daemon=True, name=f"transfer-gpu{nvml}",
                                args=(torch, lane, dev.cuda_index,
                                      numa_cpus(ctx.machine, ctx.gpu(nvml)), plan, barrier))
               for lane, (dev, nvml) in zip(lanes, ctx.devices, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    release(torch)
    specs = [link_spec(ctx, nvml) for _, nvml in ctx.devices]
    total_spec = (sum(s for s, _ in specs if s is not None)
                  if all(s is not None for s, _ in specs) else None)
    base: Params = {"bytes": plan.nbytes, "host_memory": "pinned", "concurrent": True,
                    "gpus": n}
    errors = [lane.error for lane in lanes if lane.error is not None]
    if errors:
        # The first real error, not the BrokenBarrierError it caused in the other threads.
        first = next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)),
                     errors[0])
        reason = reason_of(first)
        per_gpu = [skipped(SUITE, f"{d}_pinned_all", UNIT, reason, gpu_index=nvml,
                           params=base, spec_value=spec)
                   for d in ("h2d", "d2h")
                   for (_, nvml), (spec, _) in zip(ctx.devices, specs, strict=True)]
        return per_gpu + [skipped(SUITE, name, UNIT, reason, params=base, spec_value=total_spec)
                          for name in TOTALS]
    found = []
    for d in ("h2d", "d2h"):
        for lane, (_, nvml), (spec, notes) in zip(lanes, ctx.devices, specs, strict=True):
            found.append(measure(SUITE, f"{d}_pinned_all", UNIT, getattr(lane, d),
                                 warmup=plan.warmup, spec_value=spec, gpu_index=nvml,
                                 params={**base, "numa_bound": lane.bound}, verified=lane.ok,
                                 notes=notes))
        windows = [getattr(lane, f"{d}_windows") for lane in lanes]
        found.append(measure(SUITE, f"{d}_pinned_all_total", UNIT,
                             aggregate_gbps(windows, [plan.nbytes] * n), warmup=plan.warmup,
                             spec_value=total_spec, params=base,
                             verified=all(lane.ok for lane in lanes), notes=(TOTAL_NOTE,)))
    return found


def run(ctx: BenchContext) -> Iterator[Measurement]:
    if not ctx.on_gpu:
        reason = cpu_only_reason()
        for name in ALONE + TOTALS:
            yield skipped(SUITE, name, UNIT, reason)
        return
    torch = import_torch()
    plan = plan_for(ctx)
    sweep_all = pageable_plan(ctx).sweep_all_gpus
    for k, (dev, nvml) in enumerate(ctx.devices):
        ctx.step(f"host↔GPU {nvml} copies, pinned memory")
        yield from _pinned(torch, ctx, dev, nvml, plan)
        ctx.step(f"host↔GPU {nvml} copies, pageable memory (tensor.to, .cpu)")
        yield from _pageable(torch, ctx, dev, nvml, sweep=sweep_all or k == 0)
    if len(ctx.devices) < 2:
        for name in TOTALS:
            yield skipped(SUITE, name, UNIT, "needs 2 or more GPUs (with one, it is the "
                          "single-GPU figure)", params={"concurrent": True})
        return
    ctx.step(f"host↔GPU copies on all {len(ctx.devices)} GPUs at once")
    yield from _all_at_once(torch, ctx, plan)
