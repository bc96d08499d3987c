"""What each science kernel must do and the roof it can reach on a GPU, from the spec catalog.
Pure arithmetic: the tests check it with exact values.

Conventions (stated beside every figure):
- FFT: 5·N·log2(N) floating-point operations for a complex transform of N points in all
  (FFTW's convention, whatever the algorithm really does); the fewest bytes are the array read
  once and written once, 2·N·(8 or 16) bytes. Roof: min(peak, bandwidth × flop/byte).
- SpMV (CSR, int32 indices): 2 flops per stored value; bytes = values and column indices once,
  row pointers once, x once (the 7-point matrix reuses it from cache) and y written once. Roof:
  bandwidth × flop/byte.
- 3-D 7-point stencil: a grid read once and written once, 2·(4 or 8) bytes per point. Roof:
  bandwidth ÷ bytes per point, in Gpoint/s.
- Monte Carlo: each sample's normal written once by the generator and read once by the payoff,
  2·(4 or 8) bytes. Roof: bandwidth ÷ bytes per sample, in Gsample/s.
- n-body: 20 flops per pair interaction (GPU Gems 3, ch. 31's count). Roof: the peak of the
  precision (non-tensor FP32 or FP64).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuaudit.specs import GpuSpec

ELEMENT_BYTES = {"fp32": 4, "fp64": 8}
INDEX_BYTES = 4  # int32 CSR indices
NBODY_FLOPS_PER_PAIR = 20


@dataclass(frozen=True)
class Roof:
    value: float | None  # in the figure's unit; None with `basis` saying why
    basis: str


def fft_flops(points: int) -> float:
    return 5.0 * points * math.log2(points)


def fft_bytes(points: int, precision: str) -> int:
    return 2 * points * 2 * ELEMENT_BYTES[precision]  # complex: two reals per point


def spmv_bytes(rows: int, nnz: int, precision: str) -> int:
    v = ELEMENT_BYTES[precision]
    return nnz * (v + INDEX_BYTES) + (rows + 1) * INDEX_BYTES + 2 * rows * v


def poisson_nnz(n: int) -> int:
    """Stored values of the 7-point Laplacian on an n³ grid with zero (Dirichlet) boundaries:
    each point, and each neighbour pair counted from both sides."""
    return n ** 3 + 6 * n * n * (n - 1)


def stencil_bytes(points: int, precision: str) -> int:
    return 2 * points * ELEMENT_BYTES[precision]


def nbody_flops(bodies: int) -> float:
    return float(NBODY_FLOPS_PER_PAIR) * bodies * bodies


def _bandwidth(spec: GpuSpec | None) -> tuple[float | None, str]:
    if spec is None:
        return None, "no GPU spec (CPU, or a GPU not in the catalog)"
    return spec.memory_bandwidth_gbps, f"{spec.memory_bandwidth_gbps:g} GB/s datasheet bandwidth"


def peak(spec: GpuSpec | None, precision: str) -> tuple[float | None, str]:
    """The precision's non-tensor peak, GFLOP/s."""
    if spec is None:
        return None, "no GPU spec (CPU, or a GPU not in the catalog)"
    value = spec.peak(precision)
    if value is None:
        return None, (f"NVIDIA publishes no {precision.upper()} peak for the {spec.name} "
                      "(graphics-class parts run FP64 at 1/32 or 1/64 of FP32)")
    return value * 1e3, f"{value:g} TFLOP/s {precision.upper()} datasheet peak"


def fft_roof(spec: GpuSpec | None, precision: str, points: int) -> Roof:
    """GFLOP/s: the lower of the compute peak and bandwidth × arithmetic intensity."""
    bw, bw_basis = _bandwidth(spec)
    top, top_basis = peak(spec, precision)
    if bw is None:
        return Roof(None, bw_basis)
    intensity = fft_flops(points) / fft_bytes(points, precision)
    memory = bw * intensity
    if top is not None and top < memory:
        return Roof(top, f"{top_basis} (compute-bound: {intensity:.3g} flop/byte)")
    return Roof(memory, f"{bw_basis} × {intensity:.3g} flop/byte (one read + one write of "
                        "the array)")


def spmv_roof(spec: GpuSpec | None, precision: str, rows: int, nnz: int) -> Roof:
    bw, basis = _bandwidth(spec)
    if bw is None:
        return Roof(None, basis)
    intensity = 2 * nnz / spmv_bytes(rows, nnz, precision)
    return Roof(bw * intensity, f"{basis} × {intensity:.4g} flop/byte")


def per_element_roof(spec: GpuSpec | None, precision: str, what: str) -> Roof:
    """Stencil points or Monte Carlo samples per second (G/s): bandwidth ÷ 2 elements."""
    bw, basis = _bandwidth(spec)
    if bw is None:
        return Roof(None, basis)
    b = 2 * ELEMENT_BYTES[precision]
    return Roof(bw / b, f"{basis} ÷ {b} bytes per {what}")


def nbody_roof(spec: GpuSpec | None, precision: str) -> Roof:
    top, basis = peak(spec, precision)
    return Roof(top, basis)


def ratio_roof(r64: Roof, r32: Roof) -> Roof:
    """The FP64 ÷ FP32 ratio the roofs allow (0.5 for memory-bound kernels, which move twice
    the bytes; the peaks' ratio for compute-bound ones)."""
    if r64.value is None or r32.value is None:
        return Roof(None, r64.basis if r64.value is None else r32.basis)
    return Roof(r64.value / r32.value, "the FP64 roof ÷ the FP32 roof")
