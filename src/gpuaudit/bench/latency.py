"""Fixed costs that small work pays: kernel launch and a host↔device round trip, per GPU.

`launch` is what a PyTorch program pays per tiny op (Python dispatch + CUDA launch, timed on the
host over many back-to-back launches); `launch_graph` is the GPU's own cost per kernel when a
CUDA graph replays them (no CPU in the loop); `roundtrip` is a 4-byte copy to the GPU and back
with a synchronize, the price of every `.item()`-style host sync.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.stats import measure, reason_of, skipped
from gpuaudit.bench.transfer import cpu_only_reason, release
from gpuaudit.hw.torch_env import cuda_torch
from gpuaudit.model import Measurement

SUITE = "latency"
UNIT = "us"
NAMES = ("launch", "launch_graph", "roundtrip")
NOTES = {
    "launch": "host time per x.add_(1) over back-to-back launches (PyTorch dispatch included)",
    "launch_graph": "GPU time per kernel inside a replayed CUDA graph",
    "roundtrip": "4-byte pinned copy host→GPU→host plus stream synchronize, host clock",
}


def per_launch_us(seconds: float, launches: int) -> float:
    if launches <= 0:
        raise ValueError("no launches")
    return seconds * 1e6 / launches


@dataclass(frozen=True)
class Plan:
    warmup: int
    samples: int
    launches: int  # per `launch` sample
    graph_kernels: int
    roundtrips: int


def plan_for(ctx: BenchContext) -> Plan:
    return Plan(warmup=ctx.pick(1, 2, 3), samples=ctx.pick(7, 15, 25),
                launches=ctx.pick(500, 2000, 5000), graph_kernels=ctx.pick(100, 200, 200),
                roundtrips=ctx.pick(100, 500, 2000))


def _launch(torch: Any, idx: int, plan: Plan) -> tuple[list[float], bool]:
    x = torch.zeros(1, device=torch.device("cuda", idx))
    samples, done = [], 0
    for i in range(plan.warmup + plan.samples):
        torch.cuda.synchronize(idx)
        t0 = time.perf_counter()
        for _ in range(plan.launches):
            x.add_(1)
        torch.cuda.synchronize(idx)
        seconds = time.perf_counter() - t0
        done += plan.launches
        if i >= plan.warmup:
            samples.append(per_launch_us(seconds, plan.launches))
    return samples, int(x.item()) == done  # every launch ran (exact in fp32 below 2^24)


def _launch_graph(torch: Any, idx: int, plan: Plan) -> tuple[list[float], bool]:
    x = torch.zeros(1, device=torch.device("cuda", idx))
    main = torch.cuda.current_stream(idx)
    side = torch.cuda.Stream(device=x.device)
    side.wait_stream(main)
    with torch.cuda.stream(side):  # warm up off the default stream, as capture requires
        x.add_(1)
    main.wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # Name the stream: torch's default capture stream lives on whichever device first asked
    # for it, and capturing there records nothing for this GPU's kernels.
    with torch.cuda.graph(graph, stream=side):
        for _ in range(plan.graph_kernels):
            x.add_(1)
    samples, done = [], 1
    for i in range(plan.warmup + plan.samples):
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record(main)
        graph.replay()
        end.record(main)
        end.synchronize()
        done += plan.graph_kernels
        if i >= plan.warmup:
            samples.append(start.elapsed_time(end) * 1e3 / plan.graph_kernels)
    return samples, int(x.item()) == done


def _roundtrip(torch: Any, idx: int, plan: Plan) -> tuple[list[float], bool]:
    dev = torch.zeros(1, dtype=torch.int32, device=torch.device("cuda", idx))
    src = torch.zeros(1, dtype=torch.int32, pin_memory=True)
    back = torch.zeros(1, dtype=torch.int32, pin_memory=True)
    stream = torch.cuda.current_stream(idx)
    samples, ok = [], True
    for i in range(plan.warmup + plan.roundtrips):
        src[0] = i + 1  # safe: the previous round trip was synchronized
        t0 = time.perf_counter()
        dev.copy_(src, non_blocking=True)
        back.copy_(dev, non_blocking=True)
        stream.synchronize()
        seconds = time.perf_counter() - t0
        ok = ok and int(back[0]) == i + 1
        if i >= plan.warmup:
            samples.append(seconds * 1e6)
    return samples, ok


def run(ctx: BenchContext) -> Iterator[Measurement]:
    if not ctx.on_gpu:
        reason = cpu_only_reason()
        for name in NAMES:
            yield skipped(SUITE, name, UNIT, reason)
        return
    torch = cuda_torch()
    plan = plan_for(ctx)
    steps = (("launch", _launch), ("launch_graph", _launch_graph), ("roundtrip", _roundtrip))
    for dev, nvml in ctx.devices:
        ctx.step(f"launch latency and round trip on GPU {nvml}")
        for name, fn in steps:
            try:
                with torch.cuda.device(dev.cuda_index):
                    samples, ok = fn(torch, dev.cuda_index, plan)
            except RuntimeError as e:  # e.g. graph capture unsupported
                release(torch)
                yield skipped(SUITE, name, UNIT, reason_of(e), gpu_index=nvml)
                continue
            yield measure(SUITE, name, UNIT, samples, warmup=plan.warmup, gpu_index=nvml,
                          verified=ok, notes=(NOTES[name],))
