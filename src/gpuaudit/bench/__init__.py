"""Micro benchmarks: is this server delivering what I pay for, part by part?

`run_bench` runs the suites (matmul, memory, transfer, p2p, collectives, latency) and returns a
Run of Measurements with the straggler and result-check findings."""

from gpuaudit.bench.context import BenchContext, Profile
from gpuaudit.bench.runner import run_bench
from gpuaudit.bench.suites import SUITES

__all__ = ["SUITES", "BenchContext", "Profile", "run_bench"]
