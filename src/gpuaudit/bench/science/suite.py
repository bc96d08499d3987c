"""`gpuaudit bench science`: what a GPU gives simulation codes, in FP32 and FP64.

A 3-D FFT (GFLOP/s), a sparse matrix-vector product (GFLOP/s), a 3-D 7-point stencil
(Gpoint/s), Monte Carlo option pricing (Gsample/s) and an n-body step (GFLOP/s), each in
FP32 and FP64, on the first chosen GPU (through torch; the stencil and n-body as one Triton
kernel each, fused.py, torch's way where Triton cannot run), each beside its roof (roofline.py
states the conventions), with CuPy's library or kernel doing the same work in the same call
as the reference and the CPU doing it at a small size; the FP64 ÷ FP32 ratio of each beside
the ratio the roofs allow (graphics-class GPUs run FP64 at 1/32 or 1/64 of FP32). Every
result is checked against a float64 or closed-form reference (the kernel modules say how).
Without a GPU the kernels run on the CPU at small sizes, with the same checks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.science import fft, particles, roofline, sparse
from gpuaudit.bench.science.common import Outcome, Where
from gpuaudit.bench.stats import measure, pct_of, reason_of, skipped
from gpuaudit.hw.torch_env import import_torch, why_no_cuda
from gpuaudit.model import Measurement, Params
from gpuaudit.specs import GpuSpec

SUITE = "science"
PRECISIONS = ("fp32", "fp64")
CPU_ITERS, CPU_WARMUP = 5, 2


@dataclass(frozen=True)
class Kernel:
    name: str
    unit: str
    run: Callable[[Where, int, str], Outcome]
    cupy: Callable[[Where, Any, int, str], Outcome]
    roof: Callable[[GpuSpec | None, str, int], roofline.Roof]
    convention: str
    gpu_size: tuple[int, int, int]  # quick, standard, full
    cpu_size: int


KERNELS = (
    Kernel("fft3d", "GFLOP/s", fft.run, fft.cupy_run,
           lambda s, p, n: roofline.fft_roof(s, p, n ** 3),
           "5·N·log2(N) flop per complex transform of N points; fewest bytes: one read and "
           "one write", (256, 512, 512), 32),
    Kernel("spmv", "GFLOP/s", sparse.spmv, sparse.cupy_spmv,
           lambda s, p, n: roofline.spmv_roof(s, p, n ** 3, roofline.poisson_nnz(n)),
           "2 flop per stored value; bytes: values, int32 indices, row pointers, x and y once",
           (192, 256, 320), 20),
    Kernel("stencil7", "Gpoint/s", sparse.stencil, sparse.cupy_stencil,
           lambda s, p, n: roofline.per_element_roof(s, p, "point"),
           "interior points updated per second; fewest bytes: the grid read and written once",
           (384, 512, 640), 48),
    Kernel("montecarlo", "Gsample/s", particles.montecarlo, particles.cupy_montecarlo,
           lambda s, p, n: roofline.per_element_roof(s, p, "sample"),
           "samples per second; bytes: each normal written once and read once",
           (1 << 25, 1 << 26, 1 << 27), 1 << 18),
    Kernel("nbody", "GFLOP/s", particles.nbody, particles.cupy_nbody,
           lambda s, p, n: roofline.nbody_roof(s, p),
           "20 flop per pair interaction (GPU Gems 3, ch. 31), n² pairs a step",
           (32768, 65536, 131072), 512),
)


def _cupy() -> tuple[Any | None, str]:
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except ImportError:
        return None, "CuPy not installed (pip install cupy-cuda12x or cupy-cuda13x)"
    except Exception as exc:
        return None, f"CuPy cannot reach the GPU: {reason_of(exc)}"
    return cupy, ""


def run(ctx: BenchContext) -> Iterator[Measurement]:
    torch = import_torch()
    if torch is None:
        for k in KERNELS:
            for p in PRECISIONS:
                yield skipped(SUITE, f"{k.name}_{p}", k.unit, "torch not installed (pip "
                              "install 'gpuaudit[torch]')")
        return
    gpu = ctx.on_gpu
    index = ctx.devices[0][1] if gpu else None
    spec = ctx.spec(index) if index is not None else None
    main = (Where(torch, f"cuda:{ctx.devices[0][0].cuda_index}", ctx.pick(10, 20, 40),
                  ctx.pick(3, 5, 5)) if gpu else Where(torch, "cpu", CPU_ITERS, CPU_WARMUP))
    cpu = Where(torch, "cpu", CPU_ITERS, CPU_WARMUP)
    cupy, no_cupy = _cupy() if gpu else (None, "no GPU: " + why_no_cuda())
    for k in KERNELS:
        size = ctx.pick(*k.gpu_size) if gpu else k.cpu_size
        main_figs: dict[str, Measurement] = {}
        for p in PRECISIONS:
            roof = k.roof(spec, p, size)
            where = f"GPU {index}" if gpu else "the CPU"
            ctx.step(f"science: {k.name} {p.upper()} on {where}")
            m = _figure(k, f"{k.name}_{p}", p, partial(k.run, main, size, p), roof, index,
                        {"device": "cuda" if gpu else "cpu",
                         "tool": "torch" if gpu else None})
            main_figs[p] = m
            yield m
            if gpu:
                ctx.step(f"science: {k.name} {p.upper()} through CuPy")
                if cupy is None:
                    yield skipped(SUITE, f"{k.name}_{p}_cupy", k.unit, no_cupy,
                                  gpu_index=index, params={"tool": "cupy"})
                else:
                    yield _figure(k, f"{k.name}_{p}_cupy", p,
                                  partial(k.cupy, main, cupy, size, p), roof, index,
                                  {"tool": "cupy"})
                ctx.step(f"science: {k.name} {p.upper()} on the CPU (reference)")
                yield _figure(k, f"{k.name}_{p}_cpu", p,
                              partial(k.run, cpu, k.cpu_size, p), None, None,
                              {"device": "cpu", "tool": "torch (CPU)"})
        yield ratio(k, main_figs, spec, size)


def _figure(k: Kernel, name: str, precision: str, fn: Callable[[], Outcome],
            roof: roofline.Roof | None, gpu_index: int | None, params: Params) -> Measurement:
    base: Params = {**{key: v for key, v in params.items() if v is not None},
                    "precision": precision, "convention": k.convention}
    if roof is not None:
        base["roof_basis"] = roof.basis
    try:
        out = fn()
    except Exception as exc:
        return skipped(SUITE, name, k.unit, reason_of(exc), gpu_index=gpu_index, params=base)
    return measure(SUITE, name, k.unit, out.rates, warmup=1, gpu_index=gpu_index,
                   spec_value=roof.value if roof else None,
                   params={**base, **out.params, "check": out.check}, verified=out.ok)


def ratio(k: Kernel, figs: dict[str, Measurement], spec: GpuSpec | None,
          size: int) -> Measurement:
    """FP64 ÷ FP32 of the kernel's main figures, beside what the roofs allow."""
    name = f"{k.name}_fp64_vs_fp32"
    m32, m64 = figs.get("fp32"), figs.get("fp64")
    index = m32.gpu_index if m32 else None
    if m32 is None or m64 is None or not m32.value or m64.value is None:
        return skipped(SUITE, name, "×", "an FP32 or FP64 figure is missing", gpu_index=index)
    roof = roofline.ratio_roof(k.roof(spec, "fp64", size), k.roof(spec, "fp32", size))
    value = m64.value / m32.value
    return Measurement(suite=SUITE, name=name, unit="×", value=value,
                       statistic="median FP64 ÷ median FP32", samples=(value,),
                       spec_value=roof.value, pct_of_spec=pct_of(value, roof.value),
                       gpu_index=index, params={"roof_basis": roof.basis,
                                                "device": m32.params.get("device")})
