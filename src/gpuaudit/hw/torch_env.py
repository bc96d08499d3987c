"""The torch side of the hardware: which CUDA devices there are and how they map to NVML.

torch is imported inside these functions only: `inspect`, `monitor` and `cost` never need it.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# Multicast (NVLS) off unless the user asked for it: on shared hosts a program using it can put
# the GPUs out of service, and it only matters above 4 GPUs.
SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def apply_safe_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) with the safe defaults filled in where unset.

    Also orders CUDA devices by PCI bus id, as NVML does, so indices agree."""
    target = os.environ if env is None else env
    for key, value in {**SAFE_ENV, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}.items():
        target.setdefault(key, value)
    return dict(target)


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


# Suites whose first step imports torch._dynamo (with sympy and inductor, 2-3 s): every
# torch.optim optimizer does, and so do FlopCounterMode and torch.compile.
_DYNAMO_SUITES = frozenset({"train", "infer"})
_preloading: threading.Thread | None = None


def preload_torch(suites: Iterable[str] = ()) -> threading.Thread | None:
    """Start importing torch (and torch._dynamo when one of `suites` needs it) in a thread,
    so the import overlaps the work that reads the machine through NVML; None when torch is
    not installed. Callers join the thread before timing anything: an import beside a timed
    kernel would hold the GIL between its launches. Started once per process."""
    global _preloading
    if _preloading is not None:
        return _preloading
    if importlib.util.find_spec("torch") is None:
        return None
    dynamo = bool(_DYNAMO_SUITES & set(suites))

    def load() -> None:
        apply_safe_env()
        try:
            import torch

            torch.cuda.device_count()  # the driver's start, off the main thread too
            if dynamo:
                import torch._dynamo
        except Exception:
            pass

    _preloading = threading.Thread(target=load, name="gpuaudit-torch-import", daemon=True)
    _preloading.start()
    return _preloading


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
