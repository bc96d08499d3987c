"""Device memory bandwidth: copy, read-only and write-only, with working sets far beyond L2.

Bytes counted are bytes read plus bytes written (a copy of N bytes moves 2N), the convention
the datasheet figure uses; nvbandwidth's device_local_copy counts N and reads half of this.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.stats import measure, reason_of, skipped
from gpuaudit.bench.timing import cpu_times_ms, cuda_times_ms, on_each, rate
from gpuaudit.hw.torch_env import CudaDevice, import_torch, why_no_cuda
from gpuaudit.model import Measurement

SUITE = "memory"
UNIT = "GB/s"
TESTS = ("copy", "read", "write")
GIB = 1 << 30


def _kernels(torch: Any, nbytes: int, device: str) -> dict[str, tuple[Callable[[], Any],
                                                                     int, Callable[[], bool]]]:
    """name → (the timed call, bytes it moves, a check of its result)."""
    n = nbytes // 4
    src = torch.rand(n, dtype=torch.float32, device=device) + 0.5  # never zeros
    dst = torch.empty_like(src)
    out = torch.empty((), dtype=torch.float32, device=device)
    expected_sum = src.sum(dtype=torch.float64).item()

    def copy() -> None:
        dst.copy_(src)

    def read() -> None:
        torch.sum(src, 0, out=out)

    def write() -> None:
        dst.fill_(1.25)

    return {
        "copy": (copy, 2 * nbytes, lambda: bool(torch.equal(dst, src))),
        "read": (read, nbytes, lambda: abs(out.item() - expected_sum) <= 1e-3 * expected_sum),
        "write": (write, nbytes, lambda: bool((dst == 1.25).all())),
    }


def run(ctx: BenchContext) -> Iterator[Measurement]:
    torch = import_torch()
    if not ctx.on_gpu:
        if torch is None:
            for name in TESTS:
                yield skipped(SUITE, name, UNIT, why_no_cuda())
            return
        yield from _run_cpu(ctx, torch)
        return
    assert torch is not None  # torch found the CUDA devices
    devices = [d for d, _ in ctx.devices]
    index = {d.cuda_index: i for d, i in ctx.devices}
    iters, warmup = ctx.pick(20, 50, 100), ctx.pick(3, 5, 10)

    def one(d: CudaDevice) -> dict[str, tuple[list[float], bool, int]]:
        # A working set of ≥ 16× L2 (≥ 1 GiB) per buffer, within a quarter of the free memory.
        free, _ = torch.cuda.mem_get_info(d.cuda_index)
        nbytes = max(16 * d.l2_cache_bytes, ctx.pick(1, 2, 4) * GIB)
        nbytes = min(nbytes, free // 4) // 4096 * 4096
        results = {}
        for name, (fn, moved, check) in _kernels(torch, nbytes, f"cuda:{d.cuda_index}").items():
            times = cuda_times_ms(fn, iters=iters, warmup=warmup)
            results[name] = (rate(moved, times), check(), nbytes)
        return results

    ctx.step(f"memory bandwidth on {len(devices)} GPU(s)")
    for d, result in zip(devices, on_each(devices, one), strict=True):
        i = index[d.cuda_index]
        spec = ctx.spec(i)
        if isinstance(result, BaseException):
            reason = reason_of(result)
            for name in TESTS:
                yield skipped(SUITE, name, UNIT, reason, gpu_index=i)
            continue
        for name, (samples, ok, nbytes) in result.items():
            yield measure(SUITE, name, UNIT, samples, warmup=warmup,
                          spec_value=spec.memory_bandwidth_gbps if spec else None, gpu_index=i,
                          params={"buffer_bytes": nbytes, "bytes_counted": "read+write",
                                  "device": "cuda"}, verified=ok)
    torch.cuda.empty_cache()


def _run_cpu(ctx: BenchContext, torch: Any) -> Iterator[Measurement]:
    """Host memory at a modest size: the path CI takes, and a figure for CPU-only hosts."""
    nbytes = ctx.pick(64, 256, 1024) << 20
    ctx.step("memory bandwidth on CPU")
    for name, (fn, moved, check) in _kernels(torch, nbytes, "cpu").items():
        times = cpu_times_ms(fn, iters=ctx.pick(5, 10, 20), warmup=1)
        yield measure(SUITE, name, UNIT, rate(moved, times), warmup=1,
                      params={"buffer_bytes": nbytes, "bytes_counted": "read+write",
                              "device": "cpu"}, verified=check())
