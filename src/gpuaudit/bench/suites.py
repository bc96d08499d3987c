"""The suites by name. Each is `run(ctx) -> Iterator[Measurement]`, imported only when run
(they import torch), and yields figures as it measures them so an interruption keeps them."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator

from gpuaudit.bench.context import BenchContext
from gpuaudit.model import Measurement

SuiteFn = Callable[[BenchContext], Iterator[Measurement]]

# Order is the order they run in: quick, informative suites first.
SUITES: dict[str, str] = {
    "latency": "gpuaudit.bench.latency",
    "matmul": "gpuaudit.bench.matmul",
    "memory": "gpuaudit.bench.memory",
    "transfer": "gpuaudit.bench.transfer",
    "p2p": "gpuaudit.bench.p2p",
    "collectives": "gpuaudit.bench.collectives",
    "train": "gpuaudit.workloads.suite_train",
    "infer": "gpuaudit.workloads.suite_infer",
    "host": "gpuaudit.bench.feed.host",
    "storage": "gpuaudit.bench.feed.storage",
    "network": "gpuaudit.bench.feed.network",
    "render": "gpuaudit.bench.render.suite",
    "science": "gpuaudit.bench.science.suite",
}
# Run only when named: they serve rendering and simulation users, and take longer than the
# 5 s that `gpuaudit run`'s quick profile could give them (docs/bench-render-science.md).
OPT_IN = ("render", "science")
DEFAULT = tuple(n for n in SUITES if n not in OPT_IN)

DESCRIPTIONS = {
    "latency": "kernel launch latency and host↔device round trip",
    "matmul": "max achievable TFLOP/s per precision (shape search, L2 flushed, checked)",
    "memory": "device memory bandwidth: copy, read, write (bytes read + written)",
    "transfer": "host↔device, pinned and pageable, per GPU and all at once",
    "p2p": "GPU↔GPU bandwidth matrix and latency, against the topology",
    "collectives": "all-reduce, all-gather, reduce-scatter, all-to-all, broadcast (algbw, busbw)",
    "train": "reference models trained per precision and mode: samples/s, step-time "
             "percentiles, MFU, memory; data loading; DDP scaling (full)",
    "infer": "latency percentiles and throughput vs batch per precision, eager vs compiled vs "
             "CUDA graphs; max QPS under a p99 SLO with dynamic batching",
    "host": "host memory bandwidth (STREAM copy/triad per NUMA node), JPEG decode + augment",
    "storage": "sequential 1 MiB read/write and random 4 KiB reads under PATH, page cache "
               "bypassed",
    "network": "NICs and RDMA devices; TCP throughput and latency to --peer",
    "render": "headless OpenGL: pixel and texture fill, triangles, a deferred-shading scene "
              "at 1080p and 4K, ray tracing; checked against reference images (when named)",
    "science": "FP32 and FP64 FFT, SpMV, 3-D stencil, Monte Carlo, n-body against their "
               "roofs, beside CuPy and the CPU (when named)",
}


def suite(name: str) -> SuiteFn:
    return importlib.import_module(SUITES[name]).run
