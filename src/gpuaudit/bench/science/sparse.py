"""The 7-point operator of a 3-D grid, two ways:

- SpMV: the Laplacian on an n³ grid (zero boundaries) as a CSR matrix with int32 indices,
  y = A·x (cuSPARSE through torch on a GPU), GFLOP/s at 2 flops per stored value. Checked
  against numpy applying the same operator by array slicing in float64, over the whole vector.
- stencil: out = C0·u + C1·(sum of the 6 neighbours) on the grid's interior, Gpoint/s. On a
  GPU one Triton kernel (fused.py: one pass over memory, what the GPU can do), with CuPy's
  CUDA kernel beside it as the reference; torch slices (several passes) on the CPU, and on a
  GPU where Triton cannot run (the figure says why). Checked against numpy in float64 on two
  34³ corner blocks.
"""

from __future__ import annotations

import warnings
from typing import Any

from gpuaudit.bench.science.common import (
    TOLERANCE,
    Outcome,
    Where,
    fallback,
    first_fused,
    rel_error,
)
from gpuaudit.bench.science.roofline import poisson_nnz, spmv_bytes
from gpuaudit.model import Params

C0, C1 = 0.4, 0.1
BLOCK = 34

STENCIL_KERNEL = r"""
extern "C" __global__ void stencil7(const SCALAR* __restrict__ u, SCALAR* __restrict__ out,
                                    int n) {
    int x = blockIdx.x * blockDim.x + threadIdx.x + 1;
    int y = blockIdx.y * blockDim.y + threadIdx.y + 1;
    if (x >= n - 1 || y >= n - 1) return;
    long plane = (long)n * n;
    for (int z = 1; z < n - 1; z++) {
        long i = z * plane + (long)y * n + x;
        out[i] = COEF0 * u[i] + COEF1 * (u[i - 1] + u[i + 1] + u[i - n] + u[i + n]
                                         + u[i - plane] + u[i + plane]);
    }
}
"""


def poisson_csr(w: Where, n: int, precision: str) -> tuple[Any, Any, Any]:
    """(crow, col, values) of the 7-point Laplacian (6 on the diagonal, −1 to each neighbour)
    on an n³ grid, row-major (x fastest), built on the device."""
    torch = w.torch
    dev = w.device
    idx = torch.arange(n ** 3, device=dev, dtype=torch.int64)
    x, y, z = idx % n, (idx // n) % n, idx // (n * n)
    rows, cols, vals = [], [], []
    # offsets in increasing column order, so that a stable sort by row leaves columns sorted
    for dz, dy, dx in ((-1, 0, 0), (0, -1, 0), (0, 0, -1), (0, 0, 0), (0, 0, 1), (0, 1, 0),
                       (1, 0, 0)):
        ok = ((x + dx >= 0) & (x + dx < n) & (y + dy >= 0) & (y + dy < n) & (z + dz >= 0)
              & (z + dz < n))
        r = idx[ok]
        rows.append(r)
        cols.append(r + dx + dy * n + dz * n * n)
        vals.append(torch.full(r.shape, 6.0 if (dx, dy, dz) == (0, 0, 0) else -1.0,
                               dtype=w.dtype(precision), device=dev))
    row = torch.cat(rows)
    order = torch.sort(row, stable=True).indices
    col = torch.cat(cols)[order].to(torch.int32)
    val = torch.cat(vals)[order]
    counts = torch.bincount(row, minlength=n ** 3)
    crow = torch.zeros(n ** 3 + 1, dtype=torch.int64, device=dev)
    crow[1:] = torch.cumsum(counts, 0)
    return crow.to(torch.int32), col, val


def poisson_numpy(x: Any, n: int) -> Any:
    """The same operator applied to the flat vector x by slicing, float64."""
    import numpy as np

    u = np.asarray(x, dtype=np.float64).reshape(n, n, n)
    y = 6 * u
    y[1:] -= u[:-1]
    y[:-1] -= u[1:]
    y[:, 1:] -= u[:, :-1]
    y[:, :-1] -= u[:, 1:]
    y[:, :, 1:] -= u[:, :, :-1]
    y[:, :, :-1] -= u[:, :, 1:]
    return y.reshape(-1)


def spmv(w: Where, n: int, precision: str) -> Outcome:
    torch = w.torch
    crow, col, val = poisson_csr(w, n, precision)
    rows = n ** 3
    with warnings.catch_warnings():  # "CSR support is in beta": said once per process
        warnings.simplefilter("ignore", UserWarning)
        a = torch.sparse_csr_tensor(crow, col, val, (rows, rows), check_invariants=False)
    x = torch.randn(rows, dtype=w.dtype(precision), device=w.device, generator=w.generator(3))
    times = w.times_ms(lambda: torch.mv(a, x))
    nnz = poisson_nnz(n)
    rates = [2 * nnz / (t / 1e3) / 1e9 for t in times if t > 0]
    err = rel_error(torch.mv(a, x).cpu().numpy(), poisson_numpy(x.cpu().numpy(), n))
    bound = TOLERANCE[precision]
    ratio = spmv_bytes(rows, nnz, precision) / (2 * nnz)  # bytes per flop
    return Outcome(rates, err < bound, f"against numpy applying the operator by slicing "
                   f"(float64): relative error {err:.2e} (< {bound:g} passes)",
                   {"grid": f"{n}^3", "rows": rows, "nnz": nnz, "index": "int32",
                    "bytes_per_flop": round(ratio, 4),
                    "library": "cuSPARSE (torch.mv)" if w.cuda else "torch.mv (CPU)"})


def cupy_spmv(w: Where, cupy: Any, n: int, precision: str) -> Outcome:
    from cupyx.scipy import sparse

    torch = w.torch
    crow, col, val = poisson_csr(w, n, precision)
    rows = n ** 3
    a = sparse.csr_matrix((cupy.from_dlpack(val), cupy.from_dlpack(col),
                           cupy.from_dlpack(crow)), shape=(rows, rows))
    x = torch.randn(rows, dtype=w.dtype(precision), device=w.device, generator=w.generator(3))
    cx = cupy.from_dlpack(x)
    times = w.times_ms(lambda: a @ cx)
    nnz = poisson_nnz(n)
    rates = [2 * nnz / (t / 1e3) / 1e9 for t in times if t > 0]
    err = rel_error(cupy.asnumpy(a @ cx), poisson_numpy(x.cpu().numpy(), n))
    bound = TOLERANCE[precision]
    return Outcome(rates, err < bound, f"against numpy (float64): relative error {err:.2e} "
                   f"(< {bound:g} passes)", {"grid": f"{n}^3", "rows": rows, "nnz": nnz,
                                             "library": "cuSPARSE (cupyx.scipy.sparse)"})


def stencil_torch(u: Any, out: Any) -> None:
    c = u[1:-1, 1:-1, 1:-1]
    s = (u[:-2, 1:-1, 1:-1] + u[2:, 1:-1, 1:-1] + u[1:-1, :-2, 1:-1] + u[1:-1, 2:, 1:-1]
         + u[1:-1, 1:-1, :-2] + u[1:-1, 1:-1, 2:])
    out[1:-1, 1:-1, 1:-1] = C0 * c + C1 * s


def stencil_numpy(block: Any) -> Any:
    """The interior of a block, float64."""
    import numpy as np

    u = np.asarray(block, dtype=np.float64)
    return C0 * u[1:-1, 1:-1, 1:-1] + C1 * (
        u[:-2, 1:-1, 1:-1] + u[2:, 1:-1, 1:-1] + u[1:-1, :-2, 1:-1] + u[1:-1, 2:, 1:-1]
        + u[1:-1, 1:-1, :-2] + u[1:-1, 1:-1, 2:])


def _check_stencil(u: Any, out: Any, n: int, precision: str) -> tuple[bool, str]:
    """Two corner blocks of the output against numpy on the same inputs."""
    b = min(BLOCK, n)
    errs = []
    for s in (slice(0, b), slice(n - b, n)):
        want = stencil_numpy(u[s, s, s].cpu().numpy())
        got = out[s, s, s][1:-1, 1:-1, 1:-1].cpu().numpy()
        errs.append(rel_error(got, want))
    bound = TOLERANCE[precision]
    err = max(errs)
    return err < bound, (f"two {b}³ corner blocks against numpy (float64): relative error "
                         f"{err:.2e} (< {bound:g} passes)")


def stencil(w: Where, n: int, precision: str) -> Outcome:
    """One Triton kernel on a GPU (torch slices where Triton cannot run, saying why); torch
    slices on the CPU."""
    torch = w.torch
    u = torch.randn((n, n, n), dtype=w.dtype(precision), device=w.device,
                    generator=w.generator(4))
    out = torch.empty_like(u)
    fused, picked, why = first_fused(w, lambda k: k.fastest(
        k.STENCIL_TILINGS, lambda t: k.stencil7(u, out, C0, C1, t), w.trial().times_ms))
    if fused is not None:
        tiling, tried = picked
        times = w.times_ms(lambda: fused.stencil7(u, out, C0, C1, tiling))
        how: Params = {"tool": "triton", "implementation": fused.stencil_implementation(tiling),
                       "tilings_ms": tried, "triton": fused.VERSION}
    else:
        times = w.times_ms(lambda: stencil_torch(u, out))
        how = {"implementation": "torch slices (several passes)", **fallback(why)}
    points = (n - 2) ** 3
    rates = [points / (t / 1e3) / 1e9 for t in times if t > 0]
    ok, check = _check_stencil(u, out, n, precision)
    return Outcome(rates, ok, check, {"grid": f"{n}^3", "points": points, **how})


def cupy_stencil(w: Where, cupy: Any, n: int, precision: str) -> Outcome:
    torch = w.torch
    ctype = "float" if precision == "fp32" else "double"
    source = (STENCIL_KERNEL.replace("SCALAR", ctype).replace("COEF0", f"({ctype}){C0!r}")
              .replace("COEF1", f"({ctype}){C1!r}"))
    kernel = cupy.RawKernel(source, "stencil7")
    u = torch.randn((n, n, n), dtype=w.dtype(precision), device=w.device,
                    generator=w.generator(4))
    out = torch.empty_like(u)
    cu, cout = cupy.from_dlpack(u), cupy.from_dlpack(out)
    block = (32, 8, 1)
    grid = (-(-(n - 2) // block[0]), -(-(n - 2) // block[1]), 1)
    times = w.times_ms(lambda: kernel(grid, block, (cu, cout, cupy.int32(n))))
    points = (n - 2) ** 3
    rates = [points / (t / 1e3) / 1e9 for t in times if t > 0]
    ok, check = _check_stencil(u, out, n, precision)
    return Outcome(rates, ok, check, {"grid": f"{n}^3", "points": points,
                                      "implementation": "one CUDA kernel (cupy.RawKernel)"})
