"""Monte Carlo and n-body: the simulations that draw random numbers or do arithmetic per pair.

- Monte Carlo: a European call priced under geometric Brownian motion, one standard normal
  per sample (torch's Philox generator on a GPU; CuPy's cupy.random is cuRAND), Gsample/s.
  Checked: the price lands within 4 standard errors of Black and Scholes' closed form.
- n-body: one step of an all-pairs gravitational system with softening (accelerations, then a
  kick and a drift), GFLOP/s at 20 flops per pair. On a GPU the accelerations come from one
  Triton kernel (fused.py), with CuPy's tiled CUDA kernel beside it as the reference; torch
  computes them in row blocks (a (rows, n, 3) difference tensor) on the CPU, and on a GPU
  where Triton cannot run (the figure says why). Checked: the accelerations of 256 bodies
  against numpy in float64.
"""

from __future__ import annotations

import math
from typing import Any

from gpuaudit.bench.science.common import Outcome, Where, fallback, first_fused, rel_error
from gpuaudit.bench.science.roofline import nbody_flops
from gpuaudit.model import Params

S0, STRIKE, RATE, SIGMA, YEARS = 100.0, 105.0, 0.05, 0.2, 1.0
MC_SIGMAS = 4.0
SOFTENING2 = 1e-2
DT = 1e-3
CHECK_BODIES = 256
# float32 sums of tens of thousands of terms: 1e-4 leaves room; float64 is held far tighter
NBODY_TOLERANCE = {"fp32": 1e-4, "fp64": 1e-10}

NBODY_KERNEL = r"""
extern "C" __global__ void accel(const SCALAR* __restrict__ body, SCALAR* __restrict__ acc,
                                 int n, SCALAR eps2) {
    __shared__ SCALAR tile[4 * TILE];
    int i = blockIdx.x * TILE + threadIdx.x;
    SCALAR px = 0, py = 0, pz = 0;
    if (i < n) { px = body[4 * i]; py = body[4 * i + 1]; pz = body[4 * i + 2]; }
    SCALAR ax = 0, ay = 0, az = 0;
    for (int start = 0; start < n; start += TILE) {
        int j = start + threadIdx.x;
        for (int k = 0; k < 4; k++) tile[4 * threadIdx.x + k] = j < n ? body[4 * j + k] : 0;
        __syncthreads();
        #pragma unroll 8
        for (int k = 0; k < TILE; k++) {
            SCALAR dx = tile[4 * k] - px, dy = tile[4 * k + 1] - py, dz = tile[4 * k + 2] - pz;
            SCALAR r2 = dx * dx + dy * dy + dz * dz + eps2;
            SCALAR inv = RSQRT(r2);
            SCALAR s = tile[4 * k + 3] * inv * inv * inv;
            ax += dx * s; ay += dy * s; az += dz * s;
        }
        __syncthreads();
    }
    if (i < n) { acc[3 * i] = ax; acc[3 * i + 1] = ay; acc[3 * i + 2] = az; }
}
"""
TILE = 256


def black_scholes_call() -> float:
    d1 = (math.log(S0 / STRIKE) + (RATE + SIGMA ** 2 / 2) * YEARS) / (SIGMA * math.sqrt(YEARS))
    d2 = d1 - SIGMA * math.sqrt(YEARS)

    def cdf(x: float) -> float:
        return 0.5 * (1 + math.erf(x / math.sqrt(2)))

    return S0 * cdf(d1) - STRIKE * math.exp(-RATE * YEARS) * cdf(d2)


def mc_verdict(total: float, total_sq: float, count: int) -> tuple[bool, str]:
    """Price and standard error from the payoff sums; within MC_SIGMAS standard errors?"""
    disc = math.exp(-RATE * YEARS)
    mean = total / count
    var = max(total_sq / count - mean * mean, 0.0)
    price, se = disc * mean, disc * math.sqrt(var / count)
    want = black_scholes_call()
    off = abs(price - want) / se if se > 0 else math.inf
    return off <= MC_SIGMAS, (f"price {price:.4f} over {count:,} samples against Black-"
                              f"Scholes {want:.4f}: {off:.2f} standard errors (≤ {MC_SIGMAS:g} "
                              "passes)")


def montecarlo(w: Where, chunk: int, precision: str) -> Outcome:
    torch = w.torch
    g = w.generator(5)
    dtype = w.dtype(precision)
    sums = torch.zeros(2, dtype=torch.float64, device=w.device)
    drift = (RATE - SIGMA ** 2 / 2) * YEARS
    vol = SIGMA * math.sqrt(YEARS)
    runs = [0]

    def step() -> None:
        z = torch.randn(chunk, dtype=dtype, device=w.device, generator=g)
        pay = torch.clamp(S0 * torch.exp(drift + vol * z) - STRIKE, min=0.0)
        sums[0] += pay.sum(dtype=torch.float64)
        sums[1] += (pay * pay).sum(dtype=torch.float64)
        runs[0] += 1

    times = w.times_ms(step)
    rates = [chunk / (t / 1e3) / 1e9 for t in times if t > 0]
    total, total_sq = (float(v) for v in sums.cpu())
    ok, check = mc_verdict(total, total_sq, runs[0] * chunk)
    return Outcome(rates, ok, check, {"samples_per_launch": chunk, "option": "European call",
                                      "generator": "torch Philox" if w.cuda else
                                      "torch (CPU)"})


def cupy_montecarlo(w: Where, cupy: Any, chunk: int, precision: str) -> Outcome:
    dtype = cupy.float32 if precision == "fp32" else cupy.float64
    rs = cupy.random.RandomState(seed=5)  # cuRAND's XORWOW generator
    drift = (RATE - SIGMA ** 2 / 2) * YEARS
    vol = SIGMA * math.sqrt(YEARS)
    sums = cupy.zeros(2, dtype=cupy.float64)
    runs = [0]

    def step() -> None:
        z = rs.standard_normal(chunk, dtype=dtype)
        pay = cupy.maximum(S0 * cupy.exp(drift + vol * z) - STRIKE, 0)
        sums[0] += pay.sum(dtype=cupy.float64)
        sums[1] += (pay * pay).sum(dtype=cupy.float64)
        runs[0] += 1

    times = w.times_ms(step)
    rates = [chunk / (t / 1e3) / 1e9 for t in times if t > 0]
    total, total_sq = (float(v) for v in cupy.asnumpy(sums))
    ok, check = mc_verdict(total, total_sq, runs[0] * chunk)
    return Outcome(rates, ok, check, {"samples_per_launch": chunk, "option": "European call",
                                      "generator": "cuRAND XORWOW (cupy.random)"})


def bodies(w: Where, n: int, precision: str) -> Any:
    """(n, 4): positions in a unit cube and masses summing to about 1, from a fixed seed."""
    torch = w.torch
    g = w.generator(6)
    b = torch.rand((n, 4), dtype=w.dtype(precision), device=w.device, generator=g)
    b[:, 3] = (0.5 + b[:, 3]) / n
    return b


def accel_torch(b: Any, rows: int) -> Any:
    """All-pairs accelerations in blocks of `rows` bodies (a (rows, n, 3) difference tensor)."""
    import torch

    pos, mass = b[:, :3], b[:, 3]
    out = []
    for start in range(0, b.shape[0], rows):
        d = pos[None, :, :] - pos[start:start + rows, None, :]
        r2 = (d * d).sum(-1) + SOFTENING2
        inv = r2.rsqrt()
        s = mass[None, :] * inv * inv * inv
        out.append((d * s[..., None]).sum(1))
    return torch.cat(out)


def accel_numpy(b: Any, which: Any) -> Any:
    import numpy as np

    b = np.asarray(b, dtype=np.float64)
    d = b[None, :, :3] - b[which, None, :3]
    r2 = (d * d).sum(-1) + SOFTENING2
    s = b[None, :, 3] * r2 ** -1.5
    return (d * s[..., None]).sum(1)


def _check_nbody(b: Any, acc: Any, precision: str) -> tuple[bool, str]:
    import numpy as np

    n = b.shape[0]
    which = np.unique(np.linspace(0, n - 1, min(CHECK_BODIES, n)).astype(np.int64))
    err = rel_error(acc.cpu().numpy()[which], accel_numpy(b.cpu().numpy(), which))
    bound = NBODY_TOLERANCE[precision]
    return err < bound, (f"accelerations of {len(which)} bodies against numpy (float64): "
                         f"relative error {err:.2e} (< {bound:g} passes)")


def nbody(w: Where, n: int, precision: str) -> Outcome:
    """Accelerations by one Triton kernel on a GPU (torch in row blocks where Triton cannot
    run, saying why; and on the CPU), then the kick and the drift through torch."""
    b = bodies(w, n, precision)
    vel = w.torch.zeros((n, 3), dtype=b.dtype, device=w.device)
    rows = max(1, min(n, (1 << 27) // (n * 3)))  # keep each block's tensors near 1 GiB
    start = b.clone()
    acc = w.torch.empty((n, 3), dtype=b.dtype, device=w.device)
    # the tilings are tried on the starting bodies (not moved: the accelerations only)
    fused, picked, why = first_fused(w, lambda k: k.fastest(
        k.NBODY_TILINGS[precision], lambda t: k.accel(start, SOFTENING2, acc, t),
        w.trial().times_ms))
    if fused is not None:
        tiling, tried = picked
        first = fused.accel(start, SOFTENING2, tiling=tiling)  # what the check compares

        def accel() -> Any:
            return fused.accel(b, SOFTENING2, acc, tiling)

        how: Params = {"tool": "triton",
                       "implementation": fused.nbody_implementation(precision, tiling),
                       "tilings_ms": tried, "triton": fused.VERSION}
    else:
        def accel() -> Any:
            return accel_torch(b, rows)

        how = {"implementation": f"torch, blocks of {rows} bodies", **fallback(why)}

    def step() -> None:
        vel.add_(accel(), alpha=DT)
        b[:, :3].add_(vel, alpha=DT)

    times = w.times_ms(step)
    ok, check = _check_nbody(start, first if fused is not None else accel_torch(start, rows),
                             precision)
    rates = [nbody_flops(n) / (t / 1e3) / 1e9 for t in times if t > 0]
    return Outcome(rates, ok, check, {"bodies": n, "flops_per_pair": 20, **how})


def cupy_nbody(w: Where, cupy: Any, n: int, precision: str) -> Outcome:
    ctype = "float" if precision == "fp32" else "double"
    source = (NBODY_KERNEL.replace("SCALAR", ctype).replace("RSQRT", "rsqrtf" if ctype ==
                                                             "float" else "rsqrt")
              .replace("TILE", str(TILE)))
    kernel = cupy.RawKernel(source, "accel")
    b = bodies(w, n, precision)
    cb = cupy.from_dlpack(b)
    acc = cupy.empty((n, 3), dtype=cb.dtype)
    eps = cupy.float32(SOFTENING2) if ctype == "float" else cupy.float64(SOFTENING2)
    vel = cupy.zeros((n, 3), dtype=cb.dtype)
    start = b.clone()
    grid = (-(-n // TILE),)

    def step() -> None:
        kernel(grid, (TILE,), (cb, acc, cupy.int32(n), eps))
        vel[...] += acc * DT
        cb[:, :3] += vel * DT

    first = cupy.empty_like(acc)
    kernel(grid, (TILE,), (cupy.from_dlpack(start), first, cupy.int32(n), eps))
    ok, check = _check_nbody(start, w.torch.from_dlpack(first), precision)
    times = w.times_ms(step)
    rates = [nbody_flops(n) / (t / 1e3) / 1e9 for t in times if t > 0]
    return Outcome(rates, ok, check, {"bodies": n, "flops_per_pair": 20,
                                      "implementation": f"one tiled CUDA kernel ({TILE} "
                                                        "bodies a tile, cupy.RawKernel)"})
