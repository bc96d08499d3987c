"""What the science kernels share: where they run (a CUDA device or the CPU), how they are
timed there, and what one run returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuaudit.bench.timing import cpu_times_ms, cuda_times_ms
from gpuaudit.model import Params


@dataclass(frozen=True)
class Where:
    """torch, and the device the kernels run on: 'cuda:N' or 'cpu'."""

    torch: Any
    device: str
    iters: int
    warmup: int

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    def times_ms(self, fn: Callable[[], Any]) -> list[float]:
        if self.cuda:
            with self.torch.cuda.device(self.device):
                return cuda_times_ms(fn, iters=self.iters, warmup=self.warmup)
        return cpu_times_ms(fn, iters=self.iters, warmup=self.warmup)

    def generator(self, seed: int) -> Any:
        return self.torch.Generator(device=self.device).manual_seed(seed)

    def dtype(self, precision: str, complex_: bool = False) -> Any:
        t = self.torch
        if complex_:
            return t.complex64 if precision == "fp32" else t.complex128
        return t.float32 if precision == "fp32" else t.float64


@dataclass(frozen=True)
class Outcome:
    """Per-iteration rates in the figure's unit, the check's verdict and what it compared."""

    rates: list[float]
    ok: bool
    check: str
    params: Params = field(default_factory=dict)


def rel_error(got: Any, want: Any) -> float:
    """‖got − want‖ / ‖want‖ in float64 (numpy arrays or torch tensors moved to numpy)."""
    import numpy as np

    g = np.asarray(got, dtype=np.complex128 if np.iscomplexobj(got) else np.float64)
    w = np.asarray(want, dtype=g.dtype)
    if not np.all(np.isfinite(g)):
        return float("inf")
    return float(np.linalg.norm(g - w) / np.linalg.norm(w))


# Bounds on ‖out − ref‖/‖ref‖ against a float64 reference (float32 arithmetic over these sizes
# lands far under 1e-3); FP64 kernels are held to rounding of their own precision.
TOLERANCE = {"fp32": 1e-5, "fp64": 1e-12}
