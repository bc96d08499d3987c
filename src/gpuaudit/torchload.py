"""torch's import started in a thread, before anything else is loaded (standard library only:
`gpuaudit.cli.entry` calls it before the command line's own modules load), and the moments
its phases ended.

`gpuaudit run` and `bench` wait for this import before anything is timed; the sooner it
starts, the sooner they can. `gpuaudit.hw.torch_env` re-exports what is here.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from collections.abc import Iterable

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


# Suites whose first step imports torch._dynamo (with sympy and inductor, 2-3 s): every
# torch.optim optimizer does, and so do FlopCounterMode and torch.compile.
_DYNAMO_SUITES = frozenset({"train", "infer"})
_preloading: threading.Thread | None = None
# phase → time.time() when the preload thread ended it ("started", "torch", "cuda", "dynamo"):
# where the wait for torch goes (validation/bench/step_times.py reports it)
PHASES: dict[str, float] = {}


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
        PHASES["started"] = time.time()
        try:
            import torch

            PHASES["torch"] = time.time()
            torch.cuda.device_count()  # the driver's start, off the main thread too
            PHASES["cuda"] = time.time()
            if dynamo:
                import torch._dynamo

                PHASES["dynamo"] = time.time()
        except Exception:
            pass

    _preloading = threading.Thread(target=load, name="gpuaudit-torch-import", daemon=True)
    _preloading.start()
    return _preloading


def wait_preloaded() -> None:
    """Wait for the import `preload_torch` started, if one did. Before the user's module is
    imported: a module that calls `torch.compile` at import (a decorated function) imports
    torch._dynamo on the main thread while this thread may be importing it, and Python's
    module locks, taken in another order by each, raise `_DeadlockError`."""
    if _preloading is not None:
        _preloading.join()
