"""The doctor's known-answer workloads as the H200 saw them (docs/device-runs/
2026-12-01-h200-1gpu-doctor.txt): four got the wrong first finding. Each test rebuilds that
job's profiler trace and telemetry from the recorded numbers (steps, kernel sizes, idle and
copy shares, NVML/GPM medians) and asserts the planted bottleneck comes first."""

from __future__ import annotations

import dataclasses

import pytest

from gpuaudit.diagnose import diagnose
from gpuaudit.diagnose.evidence import Signals
from gpuaudit.diagnose.gpustats import GpuStats
from gpuaudit.diagnose.hoststats import StepStats
from gpuaudit.diagnose.kineto import analyse

BF16_GEMM = "nvjet_tst_64x8_64x16_4x1_v_bz_TNN"  # Hopper cuBLASLt bf16, tensor cores


def _x(name, cat, ts, dur, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": 1,
            "args": args}


class Trace:
    """A profiler trace built launch by launch: `launch` puts a kernel on the GPU no earlier
    than the CPU's launch call and the previous kernel's end (one stream)."""

    def __init__(self) -> None:
        self.ev: list[dict] = []
        self.cpu = 0.0  # the CPU's clock
        self.gpu = 0.0  # when the stream is free
        self.corr = 0

    def launch(self, name: str, dur: float, *, cpu_us: float = 5.0, cat: str = "kernel",
               call: str = "cudaLaunchKernel", **args) -> None:
        self.corr += 1
        self.ev.append(_x(call, "cuda_runtime", self.cpu, cpu_us, correlation=self.corr))
        start = max(self.cpu + cpu_us, self.gpu)
        self.ev.append(_x(name, cat, start, dur, device=0, stream=7, correlation=self.corr,
                          **args))
        self.cpu += cpu_us
        self.gpu = start + dur

    def copy(self, name: str, dur: float, nbytes: int) -> None:
        """A copy from pageable memory: the call returns when the copy is done (the driver
        stages it through a pinned buffer), after the stream's earlier work."""
        self.corr += 1
        start = max(self.cpu + 2, self.gpu)
        self.ev.append(_x("cudaMemcpyAsync", "cuda_runtime", self.cpu, start + dur - self.cpu,
                          correlation=self.corr))
        self.ev.append(_x(name, "gpu_memcpy", start, dur, device=0, stream=7,
                          correlation=self.corr, bytes=nbytes))
        self.cpu = self.gpu = start + dur

    def host(self, us: float) -> None:
        self.cpu += us

    def sync(self) -> None:
        """`.item()`: the CPU blocks until the stream is free."""
        start, end = self.cpu, max(self.cpu, self.gpu) + 10
        self.ev.append(_x("aten::item", "cpu_op", start, end - start))
        self.ev.append(_x("cudaStreamSynchronize", "cuda_runtime", start, end - start))
        self.cpu = end

    def step(self, n: int, body) -> None:
        for i in range(n):
            t0 = self.cpu
            body()
            self.ev.append(_x(f"ProfilerStep#{i}", "user_annotation", t0, self.cpu - t0))

    def stats(self):
        return analyse({"traceEvents": self.ev})


def _gpu(**kw: object) -> GpuStats:
    base = dict(index=0, name="NVIDIA H200", samples=30, interval_s=0.5, gpm=True,
                pcie_gen=5, pcie_width=16, memory_total_bytes=150 << 30,
                memory_used_max_bytes=int(0.01 * (150 << 30)), active_fraction=1.0)
    base.update(kw)
    return GpuStats(**base)  # type: ignore[arg-type]


def codes(sig: Signals) -> list[str]:
    return [f.code for f in diagnose(sig)[0]]


def test_slow_loader_is_input_bound_not_launch_bound():
    # H200: step 0.3245 s of which 0.322 s waiting for the batch; a few short kernels; the
    # profiler saw host wait = 100 % of the GPU's span and ranked launch-bound first.
    t = Trace()

    def body():
        t.host(322_000)  # the loader
        for _ in range(12):
            t.launch(BF16_GEMM, 2.0)
    t.step(5, body)
    steps = StepStats(steps=60, median_s=0.3245, p10_s=0.32, p90_s=0.33,
                      data_wait_median_s=0.322)
    gpu = _gpu(utilization_pct=0.0, sm_activity_pct=0.0, active_fraction=0.1)
    got = codes(Signals(gpus=(gpu,), steps=steps, trace=t.stats()))
    assert got[0] == "input-bound" and "launch-bound" not in got
    # without the step markers' data wait the same trace is launch-bound (the old answer)
    assert codes(Signals(gpus=(gpu,), trace=t.stats()))[0] == "launch-bound"


def test_tiny_batch_is_batch_too_small_first():
    # H200: step 1.5 ms, median kernel 2.6 µs, GPU idle 93 % of its span, SM activity 3.3 %,
    # memory 1 % used; ~40 kernels a step, mostly small GEMMs (batch 8 through 1024-wide
    # layers). Found: launch-bound only.
    t = Trace()

    def body():
        for _ in range(24):
            t.launch(BF16_GEMM, 2.6, cpu_us=25.0)
        for _ in range(16):
            t.launch("void at::native::vectorized_elementwise_kernel<4>", 1.5, cpu_us=25.0)
        t.host(500)
    t.step(5, body)
    gpu = _gpu(utilization_pct=9.0, sm_activity_pct=3.3, sm_occupancy_pct=1.0)
    diag, changes = diagnose(Signals(gpus=(gpu,), trace=t.stats()))
    assert [f.code for f in diag][:2] == ["batch-too-small", "launch-bound"]
    assert diag[0].share == pytest.approx(0.967) and diag[0].confidence == "high"
    assert "larger batch" in changes[0].action or "larger batch" in changes[1].action


def test_item_every_step_is_host_syncs_first():
    # A step whose GPU work (0.5 ms) outlasts its launches (40 × 5 µs): queued ahead it keeps
    # the GPU busy, but `.item()` drains the queue each step and the GPU then waits for the
    # next step's first launches. The H200 run reported the CPU's blocked time (1 %) as the
    # sync's whole cost; the idle it makes is the cost.
    t = Trace()

    def body():
        t.host(150)  # Python before the first launch
        for _ in range(40):
            t.launch(BF16_GEMM, 12.5)
        t.sync()
    t.step(6, body)
    st = t.stats()
    (d,) = st.devices
    # by hand: per step the GPU runs 500 µs and waits 165 µs (sync return 10 µs, 150 µs of
    # Python, the first launch 5 µs); 5 such gaps over a span of 5 × 665 + 500 µs
    assert d.share(d.sync_idle_us) == pytest.approx(825 / 3825)
    diag, changes = diagnose(Signals(gpus=(_gpu(utilization_pct=75.0, sm_activity_pct=70.0),),
                                     trace=st))
    assert diag[0].code == "host-syncs" and diag[0].share == pytest.approx(825 / 3825, abs=1e-3)
    assert "launch-bound" not in [f.code for f in diag]
    assert changes[0].finding == "host-syncs" and "every N steps" in changes[0].action


def test_pageable_copies_are_copy_bound_from_the_trace():
    # H200: 128 MiB pageable host→device copy each step, NVML utilization 43.5 %, SM activity
    # 35 %: the telemetry test (utilization − SM ≥ 10 points or utilization ≥ 50 %) missed
    # it; the trace showed 60 % of the GPU's span in non-compute time.
    t = Trace()
    mib128 = 128 << 20

    def body():
        t.copy("Memcpy HtoD (Pageable -> Device)", 17_000, mib128)
        for _ in range(6):
            t.launch(BF16_GEMM, 1_800)
    t.step(5, body)
    gpu = _gpu(utilization_pct=43.5, sm_activity_pct=35.0, pcie_rx_bytes_per_s=4.6e9,
               pcie_tx_bytes_per_s=1e7)
    diag, changes = diagnose(Signals(gpus=(gpu,), trace=t.stats()))
    # by hand: copies 5 × 17 ms; GEMMs of steps 0-3 and the first of step 4 fall in the
    # profiled window (4 × 10.8 + 1.8 ms); span 2 µs … 130,027 µs → 85,000 / 130,025
    assert diag[0].code == "copy-bound" and diag[0].share == pytest.approx(0.6537, abs=1e-3)
    assert "pageable" in diag[0].message and "7.9 GB/s" in diag[0].message
    pinned = next(c for c in changes if "pinned" in c.action)
    assert "pin_memory=True" in pinned.settings and pinned.gain_high > 1.5
    # the telemetry alone does not see it (the H200 numbers)
    assert "copy-bound" not in codes(Signals(gpus=(gpu,)))


def test_planted_answers_leave_the_healthy_control_alone():
    # healthy on the H200: GPU idle 9.6 % of its span, ~1,000 kernels a step
    t = Trace()

    def body():
        for _ in range(300):
            t.launch(BF16_GEMM, 150.0)
        t.host(4_000)
    t.step(3, body)
    gpu = _gpu(utilization_pct=100.0, sm_activity_pct=87.5, tensor_activity_pct=27.5,
               memory_used_max_bytes=int(0.13 * (150 << 30)))
    assert codes(Signals(gpus=(gpu,), trace=t.stats())) == []
    assert dataclasses.is_dataclass(t.stats())
