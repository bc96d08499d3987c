"""GPU↔GPU copies: bandwidth of each ordered pair alone, both directions at once, and latency.

Judged against the topology: an NVLink pair against its links' share of the GPU's NVLink
bandwidth, a PCIe path against the slower of the two GPUs' links. Without peer access the
driver stages copies through host memory, which the figure then shows.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.stats import measure, reason_of, skipped
from gpuaudit.bench.transfer import (
    GIB,
    MIB,
    cpu_only_reason,
    gbps,
    link_spec,
    release,
    streams,
)
from gpuaudit.hw.torch_env import import_torch
from gpuaudit.model import Link, LinkKind, Measurement, Params
from gpuaudit.specs import GpuSpec

SUITE = "p2p"
UNIT = "GB/s"
NAMES = (("p2p_unidir", UNIT), ("p2p_bidir", UNIT), ("p2p_latency", "us"))
NEEDS_TWO = "needs 2 or more GPUs"
# Destination-side streams rotated between copies: torch makes each cross-device copy wait on
# the destination device's current stream, which waited on the previous copy; rotating keeps
# that wait already satisfied instead of a cross-GPU ping-pong per copy.
AUX_STREAMS = 4
LATENCY_NOTE = ("GPU time per 4-byte copy, back to back on one stream (PyTorch adds a "
                "cross-device event wait to each copy)")


# ---- pure helpers ----

def per_direction_gbps(link: Link | None, spec: GpuSpec | None,
                       pcie_rates: Sequence[float | None]) -> float | None:
    """The rate one direction of a GPU pair should reach, from the topology.

    NVLink: the GPU's NVLink bandwidth (datasheet total, both directions) halved, times the
    share of its links that join the pair. Anything else is a PCIe path: the slower GPU link.
    """
    if link is None or link.kind is None:
        return None
    if link.kind is LinkKind.NVLINK:
        if spec is None or spec.nvlink_bandwidth_gbps is None:
            return None
        rate = spec.nvlink_bandwidth_gbps / 2
        if spec.nvlink_links and link.nvlink_count:
            rate *= min(link.nvlink_count, spec.nvlink_links) / spec.nvlink_links
        return rate
    if not pcie_rates or any(r is None for r in pcie_rates):
        return None
    return min(r for r in pcie_rates if r is not None)


def expected_gbps(ctx: BenchContext, src: int, dst: int, *, bidir: bool = False) -> float | None:
    """spec_value of a pair (NVML indices); both directions at once count twice."""
    rate = per_direction_gbps(ctx.machine.link(src, dst), ctx.spec(src),
                              [link_spec(ctx, src)[0], link_spec(ctx, dst)[0]])
    return None if rate is None else rate * (2 if bidir else 1)


# ---- measuring ----

@dataclass(frozen=True)
class Plan:
    nbytes: int
    reps: int  # copies per timed sample
    warmup: int
    samples: int
    latency_reps: int


def plan_for(ctx: BenchContext) -> Plan:
    # NVLink moves 128 MiB in ~0.35 ms: several copies per sample keep event overhead small.
    return Plan(nbytes=ctx.pick(128 * MIB, 256 * MIB, GIB), reps=ctx.pick(4, 8, 8),
                warmup=ctx.pick(1, 2, 3), samples=ctx.pick(7, 15, 25),
                latency_reps=ctx.pick(50, 100, 100))


@dataclass
class _Gpu:
    """One GPU's buffers and streams. `src` holds the same random bytes on every GPU, so a
    copy into `dst` is checked against the local `src` without moving data again."""
    index: int
    src: Any
    dst: Any
    tiny_src: Any
    tiny_dst: Any
    stream: Any
    aux: list[Any]


def _setup(torch: Any, cuda_indices: Sequence[int], plan: Plan) -> list[_Gpu]:
    first = torch.device("cuda", cuda_indices[0])
    host = torch.empty(plan.nbytes, dtype=torch.uint8, device=first).random_(0, 256).cpu()
    gpus = []
    for i in cuda_indices:
        device = torch.device("cuda", i)
        with torch.cuda.device(i):
            gpus.append(_Gpu(
                index=i, src=host.to(device), dst=torch.empty_like(host, device=device),
                tiny_src=torch.tensor([12345 + i], dtype=torch.int32, device=device),
                tiny_dst=torch.zeros(1, dtype=torch.int32, device=device),
                stream=torch.cuda.Stream(device=device),
                aux=[torch.cuda.Stream(device=device) for _ in range(AUX_STREAMS)]))
    # One torch copy per ordered pair: torch turns peer access on at its first cross-device
    # copy, and cudaMemcpyPeerAsync then goes GPU to GPU instead of through host memory.
    for a, b in itertools.permutations(gpus, 2):
        b.tiny_dst.copy_(a.tiny_src)
    for i in cuda_indices:
        torch.cuda.synchronize(i)
    return gpus


@functools.cache
def _memcpy_peer() -> Callable[[Any, Any, Any], None] | None:
    """cudaMemcpyPeerAsync through NVIDIA's cuda-bindings, when installed (torch ships it).

    A torch cross-device copy_ makes each copy wait on events of both devices; the gaps cost
    about 10 % of NVLink bandwidth against the copy engine driven back to back, which is
    what nvbandwidth and p2pBandwidthLatencyTest measure."""
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        return None

    def copy(dst: Any, src: Any, stream: Any) -> None:
        (err,) = cudart.cudaMemcpyPeerAsync(
            dst.data_ptr(), dst.device.index, src.data_ptr(), src.device.index,
            src.numel() * src.element_size(), stream.cuda_stream)
        if err != cudart.cudaError_t.cudaSuccess:
            raise RuntimeError(f"cudaMemcpyPeerAsync failed: {err}")

    return copy


def copy_method() -> str:
    return "cudaMemcpyPeerAsync" if _memcpy_peer() else "torch copy_"


def _copy(torch: Any, dst: Any, src: Any, src_stream: Any, dst_stream: Any) -> None:
    peer = _memcpy_peer()
    if peer is not None:
        peer(dst, src, src_stream)
        return
    # torch runs a cross-device copy on the source device's current stream.
    with streams(torch, src_stream, dst_stream):
        dst.copy_(src, non_blocking=True)


def _unidir(torch: Any, a: _Gpu, b: _Gpu, plan: Plan) -> tuple[list[float], bool]:
    b.dst.zero_()
    torch.cuda.synchronize(b.index)
    samples = []
    for i in range(plan.warmup + plan.samples):
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record(a.stream)
        for r in range(plan.reps):
            _copy(torch, b.dst, a.src, a.stream, b.aux[r % AUX_STREAMS])
        end.record(a.stream)
        end.synchronize()
        if i >= plan.warmup:
            samples.append(gbps(plan.reps * plan.nbytes, start.elapsed_time(end) / 1e3))
    torch.cuda.synchronize(b.index)
    return samples, bool(torch.equal(b.dst, b.src))


def _bidir(torch: Any, a: _Gpu, b: _Gpu, plan: Plan) -> tuple[list[float], bool]:
    for g in (a, b):
        g.dst.zero_()
        torch.cuda.synchronize(g.index)
    samples = []
    for i in range(plan.warmup + plan.samples):
        start, b_done, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        start.record(a.stream)
        b.stream.wait_event(start)  # both directions start together...
        for r in range(plan.reps):
            _copy(torch, b.dst, a.src, a.stream, b.aux[r % AUX_STREAMS])
            _copy(torch, a.dst, b.src, b.stream, a.aux[r % AUX_STREAMS])
        b_done.record(b.stream)
        a.stream.wait_event(b_done)  # ...and `end` waits for both
        end.record(a.stream)
        end.synchronize()
        if i >= plan.warmup:
            samples.append(gbps(2 * plan.reps * plan.nbytes, start.elapsed_time(end) / 1e3))
    for g in (a, b):
        torch.cuda.synchronize(g.index)
    return samples, bool(torch.equal(a.dst, a.src) and torch.equal(b.dst, b.src))


def _latency(torch: Any, a: _Gpu, b: _Gpu, plan: Plan) -> tuple[list[float], bool, bool]:
    """(us per copy, verified, host-bound). A spin kernel holds the stream until every copy is
    queued, so the GPU time is not the Python loop's pace (nvbandwidth does the same)."""
    cycles = 5_000_000
    samples, host_bound = [], False
    for i in range(plan.warmup + plan.samples):
        spin, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        t0 = time.perf_counter()
        spin.record(a.stream)
        with torch.cuda.stream(a.stream):
            torch.cuda._sleep(cycles)
        start.record(a.stream)
        for r in range(plan.latency_reps):
            _copy(torch, b.tiny_dst, a.tiny_src, a.stream, b.aux[r % AUX_STREAMS])
        end.record(a.stream)
        queued = time.perf_counter() - t0
        end.synchronize()
        if queued * 1e3 > spin.elapsed_time(start):  # the spin ended before all was queued
            cycles *= 2
            host_bound = host_bound or i >= plan.warmup
        if i >= plan.warmup:
            samples.append(start.elapsed_time(end) * 1e3 / plan.latency_reps)
    torch.cuda.synchronize(b.index)
    return samples, int(b.tiny_dst.item()) == int(a.tiny_src.item()), host_bound


def _pair(torch: Any, ctx: BenchContext, gpus: list[_Gpu], nvml: list[int], i: int, j: int,
          plan: Plan) -> Iterator[Measurement]:
    a, b = gpus[i], gpus[j]
    peer = bool(torch.cuda.can_device_access_peer(a.index, b.index))
    params: Params = {"src": nvml[i], "dst": nvml[j], "peer_access": peer,
                      "method": copy_method(),
                      "bytes": plan.nbytes}
    link = ctx.machine.link(nvml[i], nvml[j])
    notes = [f"topology: {link.label}"] if link else []
    if not peer:
        notes.append("no peer access: the driver stages the copy through host memory")
    measured: list[tuple[str, str, Any]] = [
        ("p2p_unidir", UNIT, lambda: _unidir(torch, a, b, plan))]
    if i < j:  # both directions at once: once per unordered pair
        measured.append(("p2p_bidir", UNIT, lambda: _bidir(torch, a, b, plan)))
    measured.append(("p2p_latency", "us", lambda: _latency(torch, a, b, plan)))
    for name, unit, fn in measured:
        spec = (None if unit == "us" else
                expected_gbps(ctx, nvml[i], nvml[j], bidir=name == "p2p_bidir"))
        p = {**params, "bytes": 4} if unit == "us" else params
        try:
            result = fn()
        except RuntimeError as e:
            release(torch)
            yield skipped(SUITE, name, unit, reason_of(e), gpu_index=nvml[i], params=p,
                          spec_value=spec)
            continue
        extra = []
        if name == "p2p_bidir":
            extra.append("sum of both directions")
        if unit == "us":
            extra.append(LATENCY_NOTE)
            if result[2]:
                extra.append("the host could not queue copies ahead of the GPU: figure too high")
        yield measure(SUITE, name, unit, result[0], warmup=plan.warmup, spec_value=spec,
                      gpu_index=nvml[i], params=p, verified=result[1], notes=[*notes, *extra])


def run(ctx: BenchContext) -> Iterator[Measurement]:
    if len(ctx.devices) < 2:
        reason = NEEDS_TWO if ctx.on_gpu else f"{NEEDS_TWO} ({cpu_only_reason()})"
        for name, unit in NAMES:
            yield skipped(SUITE, name, unit, reason)
        return
    torch = import_torch()
    plan = plan_for(ctx)
    nvml = [n for _, n in ctx.devices]
    try:
        gpus = _setup(torch, [d.cuda_index for d, _ in ctx.devices], plan)
    except RuntimeError as e:
        release(torch)
        for name, unit in NAMES:
            yield skipped(SUITE, name, unit, reason_of(e), params={"bytes": plan.nbytes})
        return
    for i, j in itertools.permutations(range(len(gpus)), 2):
        ctx.step(f"GPU {nvml[i]} → GPU {nvml[j]} copies")
        yield from _pair(torch, ctx, gpus, nvml, i, j, plan)
    del gpus
    release(torch)
