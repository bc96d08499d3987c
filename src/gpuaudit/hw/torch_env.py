"""The torch side of the hardware: which CUDA devices there are and how they map to NVML.

torch is imported inside these functions only: `inspect`, `monitor` and `cost` never need it.
The safe environment and the early import in a thread live in `gpuaudit.torchload` (no
package imports of ours: it starts before the command line loads).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuaudit.torchload import SAFE_ENV, apply_safe_env, preload_torch


def import_torch() -> Any | None:
    """torch, or None when it is not installed."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def cuda_torch() -> Any:
    """torch, for code that runs only on the CUDA devices torch itself found (`cuda_devices`),
    where it is installed."""
    torch = import_torch()
    if torch is None:
        raise RuntimeError("torch is not installed: there is no CUDA device to run on")
    return torch


@dataclass(frozen=True)
class CudaDevice:
    cuda_index: int
    name: str
    uuid: str  # "GPU-…", as NVML reports it
    total_memory_bytes: int
    multiprocessor_count: int
    l2_cache_bytes: int
    capability: tuple[int, int]


def cuda_devices() -> list[CudaDevice]:
    """The CUDA devices torch can use (empty without torch or CUDA)."""
    apply_safe_env()
    torch = import_torch()
    if torch is None or not torch.cuda.is_available():
        return []
    found = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        uuid = str(getattr(p, "uuid", ""))
        found.append(CudaDevice(
            cuda_index=i,
            name=p.name,
            uuid=uuid if uuid.startswith("GPU-") else f"GPU-{uuid}",
            total_memory_bytes=p.total_memory,
            multiprocessor_count=p.multi_processor_count,
            l2_cache_bytes=getattr(p, "L2_cache_size", 0),
            capability=(p.major, p.minor),
        ))
    return found


def why_no_cuda() -> str:
    """One line saying why CUDA benchmarks cannot run here."""
    torch = import_torch()
    if torch is None:
        return "torch is not installed (pip install 'gpuaudit[torch]')"
    if not torch.cuda.is_available():
        if torch.version.cuda is None:
            return f"torch {torch.__version__} is a CPU-only build"
        return "no CUDA device is visible to torch"
    return "CUDA is available"


__all__ = ["SAFE_ENV", "CudaDevice", "apply_safe_env", "cuda_devices", "import_torch",
           "preload_torch", "why_no_cuda"]
