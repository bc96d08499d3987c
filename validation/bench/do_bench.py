"""On a GPU machine: our benchmark figures beside reference figures from other tools.

python validation/bench/do_bench.py OUT_DIR [suite ...]
Writes OUT_DIR/fidelity.json and prints a side-by-side table. References:
  matmul   torch.mm at our best shape, timed by triton.testing.do_bench (median, its own
           L2 flush), and at 8192³
  memory   cudaMemcpy device→device of 4 GiB through CuPy, CUDA events, median of 20,
           counted as read + write
  transfer cudaMemcpy of 1 GiB pinned host memory through CuPy, median of 20
  p2p      cudaMemcpyPeer of 1 GiB through CuPy, peer access on, median of 20
(collectives are compared with nccl-tests by `gpuaudit bench collectives --with-native`)
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

from gpuaudit.bench.runner import run_bench
from gpuaudit.hw.torch_env import apply_safe_env


def ref_matmul(precision: str, shape: tuple[int, int, int]) -> float:
    import torch
    import triton.testing

    m, n, k = shape
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    if precision == "fp8":
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")

        def fn():
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    elif precision == "int8":
        a = torch.randint(-8, 8, (m, k), dtype=torch.int8, device="cuda")
        b = torch.randint(-8, 8, (n, k), dtype=torch.int8, device="cuda").t()

        def fn():
            return torch._int_mm(a, b)
    else:
        dtype = {"fp64": torch.float64, "fp32": torch.float32, "tf32": torch.float32,
                 "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(n, k, device="cuda", dtype=dtype).t()

        def fn():
            return torch.mm(a, b)
    ms = triton.testing.do_bench(fn, warmup=100, rep=500, return_mode="median")
    return 2 * m * n * k / (ms / 1e3) / 1e12


def _cupy_times_ms(fn, iters: int = 20, warmup: int = 3) -> list[float]:
    import cupy

    for _ in range(warmup):
        fn()
    out = []
    for _ in range(iters):
        s, e = cupy.cuda.Event(), cupy.cuda.Event()
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(cupy.cuda.get_elapsed_time(s, e))
    return out


def ref_memcpy_d2d(device: int, nbytes: int = 4 << 30) -> float:
    import cupy

    with cupy.cuda.Device(device):
        src = cupy.random.random(nbytes // 8)
        dst = cupy.empty_like(src)
        kind = cupy.cuda.runtime.memcpyDeviceToDevice
        times = _cupy_times_ms(lambda: cupy.cuda.runtime.memcpyAsync(
            dst.data.ptr, src.data.ptr, nbytes, kind, 0))
        assert bool((dst == src).all())
        return 2 * nbytes / (statistics.median(times) / 1e3) / 1e9


def ref_memcpy_host(device: int, to_device: bool, nbytes: int = 1 << 30) -> float:
    import cupy
    import numpy

    with cupy.cuda.Device(device):
        pinned = cupy.cuda.alloc_pinned_memory(nbytes)
        host = numpy.frombuffer(pinned, dtype=numpy.uint8, count=nbytes)
        host[:] = 7
        dev = cupy.empty(nbytes, dtype=cupy.uint8)
        rt = cupy.cuda.runtime
        if to_device:
            fn = lambda: rt.memcpyAsync(dev.data.ptr, host.ctypes.data, nbytes,  # noqa: E731
                                        rt.memcpyHostToDevice, 0)
        else:
            fn = lambda: rt.memcpyAsync(host.ctypes.data, dev.data.ptr, nbytes,  # noqa: E731
                                        rt.memcpyDeviceToHost, 0)
        return nbytes / (statistics.median(_cupy_times_ms(fn)) / 1e3) / 1e9


def ref_p2p(src: int, dst: int, nbytes: int = 1 << 30) -> float:
    """cudaMemcpyPeer of 1 GiB with peer access on, CUDA events on the source device."""
    import cupy

    rt = cupy.cuda.runtime
    for a, b in ((src, dst), (dst, src)):
        with cupy.cuda.Device(a), contextlib.suppress(rt.CUDARuntimeError):
            rt.deviceEnablePeerAccess(b)  # raises when already enabled
    with cupy.cuda.Device(dst):
        d = cupy.empty(nbytes, dtype=cupy.uint8)
    with cupy.cuda.Device(src):
        s = cupy.full(nbytes, 7, dtype=cupy.uint8)
        times = _cupy_times_ms(lambda: rt.memcpyPeerAsync(d.data.ptr, dst, s.data.ptr, src,
                                                          nbytes, 0))
    return nbytes / (statistics.median(times) / 1e3) / 1e9


def main(out_dir: str, suites: list[str]) -> None:
    apply_safe_env()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    run = run_bench(suites, step=lambda s: print(f"[{time.perf_counter() - t0:6.1f}s] {s}",
                                                 flush=True))
    wall = time.perf_counter() - t0
    (out / "bench_run.json").write_text(run.model_dump_json(indent=1))
    rows = []
    for m in run.measurements:
        ref, how = None, ""
        if m.value is None:
            rows.append((m.suite, m.name, m.gpu_index, None, None, "", m.skipped_reason))
            continue
        try:
            if m.suite == "matmul" and m.name.endswith("_burst"):
                how = "compare with mamf-finder at the same shape (peers.txt)"
            elif m.suite == "matmul" and m.params.get("device") == "cuda":
                shape = (m.params["m"], m.params["n"], m.params["k"])
                ref, how = ref_matmul(m.name, shape), "torch.mm do_bench at our shape"
                rows.append((m.suite, m.name + "@8192³", m.gpu_index, None,
                             ref_matmul(m.name, (8192, 8192, 8192)), "do_bench 8192³", ""))
            elif m.suite == "memory" and m.name == "copy" and m.params.get("device") == "cuda":
                ref, how = ref_memcpy_d2d(m.gpu_index or 0), "cupy memcpy D2D 4 GiB"
            elif m.suite == "p2p" and m.name == "p2p_unidir":
                ref = ref_p2p(int(m.params["src"]), int(m.params["dst"]))
                how = "cupy memcpyPeer 1 GiB"
            elif m.suite == "transfer" and m.name in ("h2d_pinned", "d2h_pinned"):
                ref = ref_memcpy_host(m.gpu_index or 0, m.name.startswith("h2d"))
                how = "cupy memcpy pinned 1 GiB"
        except Exception as exc:
            how = f"reference failed: {exc}"
        at = {k: v for k, v in m.params.items() if k in ("m", "n", "k", "size_bytes", "src", "dst")}
        rows.append((m.suite, m.name, m.gpu_index, m.value, ref, how, f"{m.unit} {at}"))
    (out / "fidelity.json").write_text(json.dumps({"wall_s": wall, "rows": rows}, indent=1))
    print(f"\nbench wall time (in-process, torch already imported: no): {wall:.1f} s")
    print(f"{'suite':10} {'test':22} {'gpu':>3} {'ours':>10} {'ref':>10} {'ours/ref':>8}  how")
    for suite, name, gpu, ours, ref, how, extra in rows:
        ratio = f"{ours / ref:8.3f}" if ours and ref else "        "
        o = f"{ours:10.4g}" if ours is not None else "   skipped"
        r = f"{ref:10.4g}" if ref is not None else "          "
        g = "" if gpu is None else gpu
        print(f"{suite:10} {name:22} {g:>3} {o} {r} {ratio}  {how} {extra}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
