"""The suites by name: the one registry of what `gpuaudit bench` can run. Each suite module has
`run(ctx) -> Iterator[Measurement]`, imported only when run (they import torch), and yields
figures as it measures them so an interruption keeps them."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuaudit.bench.context import BenchContext
    from gpuaudit.model import Measurement

    SuiteFn = Callable[[BenchContext], Iterator[Measurement]]


@dataclass(frozen=True)
class Suite:
    name: str
    module: str  # has run(ctx)
    description: str
    # Run only when named (not in the default set nor in `gpuaudit run`'s quick profile).
    opt_in: bool = False
    # Modules with run_native(ctx): the reference tools run beside it under --with-native.
    native: tuple[str, ...] = ()
    # The module with preflight(ctx): bad input (a missing path, a silent peer) refused before
    # anything runs, so no measured figure is thrown away.
    preflight: str | None = None
    # Measures the host (CPUs, disks, NICs), not a GPU: a process on a GPU does not contend
    # with its figures, other processes on the CPUs do.
    host: bool = False


# Order is the order they run in: quick, informative suites first.
_ALL = (
    Suite("latency", "gpuaudit.bench.latency",
          "kernel launch latency and host↔device round trip"),
    Suite("matmul", "gpuaudit.bench.matmul",
          "max achievable TFLOP/s per precision (shape search, L2 flushed, checked)"),
    Suite("memory", "gpuaudit.bench.memory",
          "device memory bandwidth: copy, read, write (bytes read + written)"),
    Suite("transfer", "gpuaudit.bench.transfer",
          "host↔device, pinned and pageable, per GPU and all at once",
          native=("gpuaudit.bench.nvbandwidth", "gpuaudit.bench.dcgm")),
    Suite("p2p", "gpuaudit.bench.p2p",
          "GPU↔GPU bandwidth matrix and latency, against the topology"),
    Suite("collectives", "gpuaudit.bench.collectives",
          "all-reduce, all-gather, reduce-scatter, all-to-all, broadcast (algbw, busbw)",
          native=("gpuaudit.bench.nccl_tests",), preflight="gpuaudit.bench.nccl_tests"),
    Suite("train", "gpuaudit.workloads.suite_train",
          "reference models trained per precision and mode: samples/s, step-time "
          "percentiles, MFU, memory; data loading; DDP scaling (full)"),
    Suite("infer", "gpuaudit.workloads.suite_infer",
          "latency percentiles and throughput vs batch per precision, eager vs compiled vs "
          "CUDA graphs; max QPS under a p99 SLO with dynamic batching"),
    Suite("host", "gpuaudit.bench.feed.host",
          "host memory bandwidth (STREAM copy/triad per NUMA node), JPEG decode + augment",
          host=True),
    Suite("storage", "gpuaudit.bench.feed.storage",
          "sequential 1 MiB read/write and random 4 KiB reads under PATH, page cache bypassed",
          native=("gpuaudit.bench.feed.fio",), preflight="gpuaudit.bench.feed.storage",
          host=True),
    Suite("network", "gpuaudit.bench.feed.network",
          "NICs and RDMA devices; TCP throughput and latency to --peer",
          native=("gpuaudit.bench.feed.native_net",), preflight="gpuaudit.bench.feed.network",
          host=True),
    # They serve rendering and simulation users, and take longer than the 5 s that
    # `gpuaudit run`'s quick profile could give them (docs/bench-render-science.md).
    Suite("render", "gpuaudit.bench.render.suite",
          "headless OpenGL: pixel and texture fill, triangles, a deferred-shading scene at "
          "1080p and 4K, ray tracing; checked against reference images (when named)",
          opt_in=True, native=("gpuaudit.bench.render.native",)),
    Suite("science", "gpuaudit.bench.science.suite",
          "FP32 and FP64 FFT, SpMV, 3-D stencil, Monte Carlo, n-body against their roofs, "
          "beside CuPy and the CPU (when named)", opt_in=True),
)
SUITES: dict[str, Suite] = {s.name: s for s in _ALL}
OPT_IN = tuple(n for n, s in SUITES.items() if s.opt_in)
DEFAULT = tuple(n for n in SUITES if n not in OPT_IN)
HOST_SUITES = frozenset(n for n, s in SUITES.items() if s.host)


def suite(name: str) -> SuiteFn:
    run: SuiteFn = importlib.import_module(SUITES[name].module).run
    return run
