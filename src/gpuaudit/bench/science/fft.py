"""3-D complex FFT (cuFFT through torch.fft on a GPU; pocketfft on the CPU), GFLOP/s by the
5·N·log2(N) convention. Checked: FP32 against the FP64 transform of the same input on the same
device; FP64 against numpy's transform of a 32³ input run through the same path, and by a
round trip (inverse of the forward) at the timed size."""

from __future__ import annotations

from typing import Any

from gpuaudit.bench.science.common import TOLERANCE, Outcome, Where, rel_error
from gpuaudit.bench.science.roofline import fft_flops

SMALL = 32


def run(w: Where, n: int, precision: str) -> Outcome:
    torch = w.torch
    x = torch.randn((n, n, n), dtype=w.dtype(precision, complex_=True), device=w.device,
                    generator=w.generator(1))
    times = w.times_ms(lambda: torch.fft.fftn(x))
    points = n ** 3
    rates = [fft_flops(points) / (t / 1e3) / 1e9 for t in times if t > 0]
    ok, check = verify(w, x, precision)
    return Outcome(rates, ok, check, {"shape": f"{n}x{n}x{n}", "points": points,
                                      "library": "cuFFT (torch.fft)" if w.cuda else
                                      "pocketfft (torch.fft, CPU)"})


def verify(w: Where, x: Any, precision: str) -> tuple[bool, str]:
    import numpy as np

    torch = w.torch
    y = torch.fft.fftn(x)
    bound = TOLERANCE[precision]
    if precision == "fp32":
        ref = torch.fft.fftn(x.to(torch.complex128))
        err = float(torch.linalg.vector_norm(y.to(torch.complex128) - ref)
                    / torch.linalg.vector_norm(ref))
        return err < bound, (f"against the FP64 transform of the same input: relative error "
                             f"{err:.2e} (< {bound:g} passes)")
    small = torch.randn((SMALL,) * 3, dtype=torch.complex128, device=w.device,
                        generator=w.generator(2))
    err_np = rel_error(torch.fft.fftn(small).cpu().numpy(), np.fft.fftn(small.cpu().numpy()))
    back = torch.fft.ifftn(y)
    err_rt = float(torch.linalg.vector_norm(back - x) / torch.linalg.vector_norm(x))
    ok = err_np < bound and err_rt < bound
    return ok, (f"against numpy on a {SMALL}³ input: {err_np:.2e}; round trip at the timed "
                f"size: {err_rt:.2e} (< {bound:g} passes)")


def cupy_run(w: Where, cupy: Any, n: int, precision: str) -> Outcome:
    """The same transform through CuPy's cupy.fft (cuFFT), checked against torch's result."""
    torch = w.torch
    x = torch.randn((n, n, n), dtype=w.dtype(precision, complex_=True), device=w.device,
                    generator=w.generator(1))
    cx = cupy.from_dlpack(x)
    times = w.times_ms(lambda: cupy.fft.fftn(cx))
    points = n ** 3
    rates = [fft_flops(points) / (t / 1e3) / 1e9 for t in times if t > 0]
    got = torch.from_dlpack(cupy.fft.fftn(cx))
    want = torch.fft.fftn(x)
    err = float(torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want))
    bound = TOLERANCE[precision]
    return Outcome(rates, err < bound, f"against torch.fft's result: relative error {err:.2e}"
                   f" (< {bound:g} passes)", {"shape": f"{n}x{n}x{n}", "points": points,
                                              "library": "cuFFT (cupy.fft)"})
