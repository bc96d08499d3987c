"""What the science kernels share: where they run (a CUDA device or the CPU), how they are
timed there, and what one run returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from gpuaudit.bench.stats import reason_of
from gpuaudit.bench.timing import cpu_times_ms, cuda_times_ms
from gpuaudit.model import Params

# timed launches each tiling of a Triton kernel gets (after one warm-up, which compiles it)
TRIAL_ITERS = 3


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

    def trial(self) -> Where:
        """A shorter timing of the same place: for choosing between tilings of a kernel."""
        return replace(self, iters=TRIAL_ITERS, warmup=1)

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


def fused_kernels(w: Any) -> tuple[Any | None, str]:
    """Our Triton kernels (fused.py) where they can run, or None and why they cannot: on the
    CPU, without a reason (torch's way is the method there, not a fallback)."""
    if not w.cuda:
        return None, ""
    try:
        from gpuaudit.bench.science import fused
    except Exception as exc:  # not installed, or a Triton that fails on import here
        return None, f"Triton not importable ({reason_of(exc)}): torch ran instead"
    return fused, ""


def first_fused(w: Any, launch: Callable[[Any], Any]) -> tuple[Any | None, Any, str]:
    """(our Triton kernels, what `launch(kernels)` returned, "") when they run here, or (None,
    None, why not). `launch` holds the kernel's first launches: Triton compiles it then, so a
    compiler that fails on this GPU shows here, and the figure falls back to torch saying so."""
    fused, why = fused_kernels(w)
    if fused is None:
        return None, None, why
    try:
        return fused, launch(fused), ""
    except Exception as exc:
        return None, None, f"the Triton kernel failed ({reason_of(exc)}): torch ran instead"


def fallback(why: str) -> Params:
    """The note a torch figure carries when it stands in for the Triton kernel."""
    return {"fallback": why} if why else {}
