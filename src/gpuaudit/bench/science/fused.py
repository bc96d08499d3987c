"""The stencil and the n-body accelerations as one Triton kernel each: what the GPU gives
these kernels, where torch's way (several passes over memory for the stencil; a (rows, n, 3)
difference tensor for n-body) would describe our code rather than the GPU.

Imported only where the kernels run on a CUDA device (common.fused_kernels): importing it
imports Triton, which ships with PyTorch's CUDA builds. The tests run the same kernels on
CPU tensors through Triton's interpreter (TRITON_INTERPRET=1, read when the module is
imported). The callers pass the coefficients, so that this module imports none of theirs.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import triton
import triton.language as tl

# Each kernel comes in a few tilings, all compiled and timed on the GPU at hand before the
# figure (fastest): the best tiling differs between GPUs, and a guess would make the figure
# describe the guess. With Triton 3.9 every one compiles for sm_80, sm_89, sm_90 and sm_100
# without spilling registers.
#
# Stencil: (BY rows of BX points in a z-plane, BZ planes up z a program, warps). A program
# marches up z holding the planes below and above in registers, so the grid is read from
# memory about once; the side neighbours come from the caches.
STENCIL_TILINGS: tuple[tuple[int, int, int, int], ...] = (
    (8, 64, 32, 4), (4, 128, 32, 4), (8, 64, 32, 8), (8, 128, 32, 8))
# n-body: (BI bodies a program, the others BJ at a time, warps). The partial sums stay a
# BI×BJ block until the end (one reduction, not one a tile). Under 128 registers a thread on
# sm_90 (two programs an SM at 8 warps); FP64 takes smaller blocks, twice the registers a value.
NBODY_TILINGS: dict[str, tuple[tuple[int, int, int], ...]] = {
    "fp32": ((128, 32, 8), (64, 64, 8), (128, 16, 8)),
    "fp64": ((64, 16, 8), (32, 32, 8), (32, 16, 4))}
# Launch options of both: multiply-adds fused, as nvcc does for the CuPy kernels (said
# explicitly: Triton 3.9 warns when it is left to its default, which is to change).
OPTIONS = {"enable_fp_fusion": True}
VERSION = triton.__version__
T = TypeVar("T")


def stencil_implementation(tiling: tuple[int, ...]) -> str:
    by, bx, bz, warps = tiling
    return (f"one Triton kernel ({by}×{bx}-point tiles, {bz} z-planes a program, {warps} "
            f"warps: the fastest of {len(STENCIL_TILINGS)} tilings here)")


def nbody_implementation(precision: str, tiling: tuple[int, ...]) -> str:
    bi, bj, warps = tiling
    inv = "1/sqrt" if precision == "fp64" else "rsqrt"
    return (f"one Triton kernel ({bi} bodies a program, tiles of {bj}, {warps} warps, {inv}: "
            f"the fastest of {len(NBODY_TILINGS[precision])} tilings here)")


def fastest(tilings: Sequence[T], launch: Callable[[T], Any],
            times_ms: Callable[[Callable[[], Any]], list[float]]) -> tuple[T, str]:
    """The tiling whose launches time fastest (median), and each one's time: one the compiler
    refuses is left out, and said; when all are refused, the last refusal is raised."""
    timed: list[tuple[float, int]] = []
    said: list[str] = []
    error: Exception | None = None
    for i, tiling in enumerate(tilings):
        name = "×".join(map(str, tiling))
        try:
            ms = statistics.median(times_ms(lambda t=tiling: launch(t)))
        except Exception as exc:  # this tiling does not compile or launch on this GPU
            error = exc
            said.append(f"{name}: failed ({type(exc).__name__})")
            continue
        timed.append((ms, i))
        said.append(f"{name}: {ms:.4g} ms")
    if not timed:
        assert error is not None
        raise error
    return tilings[min(timed)[1]], "; ".join(said)


@triton.jit
def _stencil7(u, out, n, C0: tl.constexpr, C1: tl.constexpr, BX: tl.constexpr,
              BY: tl.constexpr, BZ: tl.constexpr):
    x = 1 + tl.program_id(0) * BX + tl.arange(0, BX)
    y = 1 + tl.program_id(1) * BY + tl.arange(0, BY)
    z0 = 1 + tl.program_id(2) * BZ
    inside = (y[:, None] < n - 1) & (x[None, :] < n - 1)  # the interior only, as torch's
    offs = y[:, None] * n + x[None, :]
    plane = n.to(tl.int64) * n  # z · n² in 64 bits: past 2³¹ on grids over 1290³
    below = tl.load(u + (z0 - 1) * plane + offs, mask=inside)
    here = tl.load(u + z0 * plane + offs, mask=inside)
    for z in range(z0, tl.minimum(z0 + BZ, n - 1)):
        p = u + z * plane + offs
        above = tl.load(p + plane, mask=inside)
        side = (tl.load(p - n, mask=inside) + tl.load(p + n, mask=inside)
                + tl.load(p - 1, mask=inside) + tl.load(p + 1, mask=inside))
        tl.store(out + z * plane + offs, C0 * here + C1 * (below + above + side), mask=inside)
        below = here
        here = above


@triton.jit
def _accel(body, acc, n, EPS2: tl.constexpr, FP64: tl.constexpr, BI: tl.constexpr,
           BJ: tl.constexpr):
    i = tl.program_id(0) * BI + tl.arange(0, BI)
    mine = i < n
    px = tl.load(body + 4 * i, mask=mine, other=0.0)
    py = tl.load(body + 4 * i + 1, mask=mine, other=0.0)
    pz = tl.load(body + 4 * i + 2, mask=mine, other=0.0)
    ax = tl.zeros([BI, BJ], dtype=px.dtype)
    ay = tl.zeros([BI, BJ], dtype=px.dtype)
    az = tl.zeros([BI, BJ], dtype=px.dtype)
    for start in range(0, n, BJ):
        j = start + tl.arange(0, BJ)
        real = j < n
        # bodies past n weigh nothing: they add 0 (as the CUDA kernel's zero-filled tile)
        qx = tl.load(body + 4 * j, mask=real, other=0.0)
        qy = tl.load(body + 4 * j + 1, mask=real, other=0.0)
        qz = tl.load(body + 4 * j + 2, mask=real, other=0.0)
        m = tl.load(body + 4 * j + 3, mask=real, other=0.0)
        dx = qx[None, :] - px[:, None]
        dy = qy[None, :] - py[:, None]
        dz = qz[None, :] - pz[:, None]
        r2 = dx * dx + dy * dy + dz * dz + EPS2
        # FP64: IEEE sqrt and division (rsqrt's FP64 path is approximate); FP32: rsqrt
        inv = 1.0 / tl.sqrt(r2) if FP64 else tl.rsqrt(r2)
        s = m[None, :] * inv * inv * inv
        ax += dx * s
        ay += dy * s
        az += dz * s
    tl.store(acc + 3 * i, tl.sum(ax, axis=1), mask=mine)
    tl.store(acc + 3 * i + 1, tl.sum(ay, axis=1), mask=mine)
    tl.store(acc + 3 * i + 2, tl.sum(az, axis=1), mask=mine)


def _on(t: Any) -> Any:
    """Triton launches on the current device: make it the tensor's (GPU 1 of a box, say)."""
    if t.is_cuda:
        import torch

        return torch.cuda.device(t.device)
    return contextlib.nullcontext()


def stencil7(u: Any, out: Any, c0: float, c1: float,
             tiling: tuple[int, ...] = STENCIL_TILINGS[0]) -> None:
    """out = c0·u + c1·(the 6 neighbours) on the interior of the contiguous n³ grid u; the
    boundary of out is left as it was."""
    n = u.shape[0]
    assert u.is_contiguous() and out.is_contiguous() and u.shape == out.shape == (n, n, n)
    if n < 3:
        return
    by, bx, bz, warps = tiling
    grid = (triton.cdiv(n - 2, bx), triton.cdiv(n - 2, by), triton.cdiv(n - 2, bz))
    with _on(u):
        _stencil7[grid](u, out, n, C0=c0, C1=c1, BX=bx, BY=by, BZ=bz, num_warps=warps,
                        **OPTIONS)


def accel(body: Any, eps2: float, out: Any = None, tiling: tuple[int, ...] | None = None) -> Any:
    """All-pairs accelerations (n, 3) of the contiguous (n, 4) bodies (x, y, z, mass), with
    softening eps2, into `out` (made when None)."""
    import torch

    n = body.shape[0]
    assert body.is_contiguous() and body.shape == (n, 4)
    if out is None:
        out = torch.empty((n, 3), dtype=body.dtype, device=body.device)
    fp64 = body.dtype == torch.float64
    bi, bj, warps = tiling or NBODY_TILINGS["fp64" if fp64 else "fp32"][0]
    with _on(body):
        _accel[(triton.cdiv(n, bi),)](body, out, n, EPS2=eps2, FP64=fp64, BI=bi, BJ=bj,
                                      num_warps=warps, **OPTIONS)
    return out
