"""How fast another GPU renders or simulates, relative to the GPU a timing was taken on, from
the spec catalog's rates. Each answer carries its basis (the ratio of which figures) or the
reason there is none. Pure functions of the catalog.

- Rasterised frames (game engines, Eevee-style renderers, our reference scene): a frame may
  be bound by shading arithmetic, texturing or memory, so the speed-up is the smallest of the
  ratios of graphics FP32 (FP32 peak × the share of SMs that run graphics: 4 of 132 on an
  H200), texture fill (texture units that run graphics × boost clock) and memory bandwidth,
  over the figures both GPUs publish.
- Path-traced frames (Cycles, Octane, Redshift and the like, on CUDA or OptiX): FP32 peak
  (all SMs: a path tracer runs as compute), × an assumed speed-up for GPUs with RT cores
  (`rt_speedup`, default 2) over those without.
- Simulation kernels: the two-roof model of bench science's conventions: units of work per
  second = min(peak ÷ flops per unit, bandwidth ÷ bytes per unit), in the job's precision.
  Where NVIDIA publishes no FP64 peak (graphics-class parts), FP64 is taken as 1/64 of FP32
  (the Ampere GA10x and Ada whitepapers' ratio for those chips), and the basis says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuaudit.specs.catalog import GpuSpec
from gpuaudit.specs.graphics import graphics_share, texel_rate

ELEMENT_BYTES = {"fp32": 4, "fp64": 8}
INDEX_BYTES = 4  # int32 CSR indices, as bench science counts them

DEFAULT_RT_SPEEDUP = 2.0
FP64_SHARE_UNPUBLISHED = 1 / 64
SCENES = ("raster", "path-traced")


@dataclass(frozen=True)
class KernelWork:
    """Work per unit of a simulation kernel: flops and the fewest bytes moved."""

    unit: str
    flops: float
    bytes_fp32: float

    def bytes(self, precision: str) -> float:
        return self.bytes_fp32 * ELEMENT_BYTES[precision] / 4


# Per unit, as bench science counts them. FFT per point of a 256³ transform (5·log2 N flop,
# 16 bytes of complex FP32 read and written); SpMV per stored value of the 7-point matrix
# (value + index, plus the vectors' share); stencil per point; Monte Carlo per sample (an
# exponential and a few multiply-adds: about 20 flop, an estimate); n-body per pair.
KERNELS = {
    "fft": KernelWork("point", 5 * 24, 16),
    "spmv": KernelWork("stored value", 2, 4 + INDEX_BYTES * 8 / 7 + 2 * 4 / 7),
    "stencil": KernelWork("point", 8, 8),
    "montecarlo": KernelWork("sample", 20, 8),
    "nbody": KernelWork("pair", 20, 0),
}


@dataclass(frozen=True)
class Speed:
    value: float | None  # in the model's unit; None with `basis` saying why
    basis: str


def _peak(spec: GpuSpec, precision: str) -> tuple[float, str]:
    """TFLOP/s of the non-tensor units in `precision`, and how it was got."""
    value = spec.peak(precision)
    if value is not None:
        return value, f"{value:g} TFLOP/s {precision.upper()}"
    fp32 = spec.peak("fp32")
    assert fp32 is not None  # every catalog entry has an FP32 peak (a test says so)
    return fp32 * FP64_SHARE_UNPUBLISHED, (f"FP64 taken as 1/64 of {fp32:g} TFLOP/s FP32 "
                                           "(no published FP64 peak)")


def raster_figures(spec: GpuSpec) -> dict[str, tuple[float, str]]:
    """What a rasterised frame may be bound by: name → (value, label)."""
    share, why = graphics_share(spec)
    fp32 = spec.peak("fp32") or 0.0
    out = {"bandwidth": (spec.memory_bandwidth_gbps, f"{spec.memory_bandwidth_gbps:g} GB/s")}
    if share > 0:
        out["graphics FP32"] = (fp32 * share, f"{fp32 * share:.3g} TFLOP/s"
                                + (f" ({why})" if why else ""))
    tex = texel_rate(spec)
    if tex.value is not None:
        out["texture fill"] = (tex.value, f"{tex.value:.4g} GTexel/s")
    return out


def raster_ratio(spec: GpuSpec, base: GpuSpec) -> Speed:
    """This GPU's rasterised frame rate ÷ the base GPU's: the smallest ratio of the figures
    both publish."""
    mine, theirs = raster_figures(spec), raster_figures(base)
    shared = [k for k in mine if k in theirs]
    if "graphics FP32" not in shared:
        return Speed(None, f"the share of the {spec.name}'s SMs that run graphics is unknown")
    ratios = {k: mine[k][0] / theirs[k][0] for k in shared}
    bound = min(ratios, key=lambda k: ratios[k])
    return Speed(ratios[bound], f"rasterised: × {ratios[bound]:.3g} by {bound} ("
                                f"{mine[bound][1]} against the {base.name}'s {theirs[bound][1]}"
                                "; the smallest of " + ", ".join(
                                    f"{k} × {v:.3g}" for k, v in ratios.items()) + ")")


def path_speed(spec: GpuSpec, rt_speedup: float) -> tuple[float, str]:
    fp32 = spec.peak("fp32") or 0.0
    if spec.rt_cores:
        return fp32 * rt_speedup, (f"{fp32:g} TFLOP/s FP32 × {rt_speedup:g} for its "
                                   f"{spec.rt_cores} RT cores")
    label = "no RT cores" if spec.rt_cores == 0 else "no published RT core count: none assumed"
    return fp32, f"{fp32:g} TFLOP/s FP32 ({label})"


def path_ratio(spec: GpuSpec, base: GpuSpec, rt_speedup: float = DEFAULT_RT_SPEEDUP) -> Speed:
    mine, m_basis = path_speed(spec, rt_speedup)
    theirs, t_basis = path_speed(base, rt_speedup)
    ratio = mine / theirs
    return Speed(ratio, f"path-traced: × {ratio:.3g} ({m_basis}, against the {base.name}'s "
                        f"{t_basis})")


def sim_rate(spec: GpuSpec, kernel: str, precision: str) -> Speed:
    """Units of the kernel's work per second (the two-roof model)."""
    work = KERNELS[kernel]
    peak, p_basis = _peak(spec, precision)
    compute = peak * 1e12 / work.flops
    nbytes = work.bytes(precision)
    if nbytes == 0:
        return Speed(compute, f"compute-bound: {p_basis}")
    memory = spec.memory_bandwidth_gbps * 1e9 / nbytes
    if compute < memory:
        return Speed(compute, f"compute-bound: {p_basis}")
    return Speed(memory, f"memory-bound: {spec.memory_bandwidth_gbps:g} GB/s")


def sim_ratio(spec: GpuSpec, base: GpuSpec, kernel: str, precision: str) -> Speed:
    mine, theirs = sim_rate(spec, kernel, precision), sim_rate(base, kernel, precision)
    assert mine.value is not None and theirs.value is not None
    ratio = mine.value / theirs.value
    return Speed(ratio, f"{kernel} {precision.upper()}: × {ratio:.3g} ({mine.basis}, against "
                        f"the {base.name}'s {theirs.basis})")
