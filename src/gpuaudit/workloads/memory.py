"""Out of memory: recognise it, say how much was needed, give the memory back."""

from __future__ import annotations

import contextlib
import gc
import re
from typing import Any

_TRIED = re.compile(r"[Tt]ried to allocate ([\d.]+) ?([KMGT]i?B)")
_CPU_TRIED = re.compile(r"you tried to allocate (\d+) bytes")
_UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
          "KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}  # torch prints binary units


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    name = type(exc).__name__
    text = str(exc)
    return name == "OutOfMemoryError" or "out of memory" in text.lower() or \
        "can't allocate memory" in text


def requested_bytes(message: str) -> int | None:
    """The allocation that failed, from torch's message (CUDA or CPU allocator)."""
    if m := _TRIED.search(message):
        return int(float(m.group(1)) * _UNITS[m.group(2)])
    if m := _CPU_TRIED.search(message):
        return int(m.group(1))
    return None


def oom_reason(message: str, *, in_use_bytes: int | None, total_bytes: int | None) -> str:
    """One line: the memory it needed at least (in use when it failed + the failed request)."""
    tried = requested_bytes(message)
    if in_use_bytes is None and tried is None:
        return "out of memory"
    need = (in_use_bytes or 0) + (tried or 0)
    text = f"out of memory: needs more than {need / 1e9:.1f} GB"
    parts = []
    if in_use_bytes is not None:
        parts.append(f"{in_use_bytes / 1e9:.1f} GB in use")
    if tried is not None:
        parts.append(f"{tried / 1e9:.1f} GB more requested")
    if total_bytes:
        parts.append(f"the GPU has {total_bytes / 1e9:.1f} GB")
    return f"{text} ({', '.join(parts)})"


def in_use(torch: Any, device: Any) -> int | None:
    if getattr(device, "type", str(device)) != "cuda":
        return None
    return int(torch.cuda.memory_allocated(device))


def release(torch: Any, device: Any) -> None:
    """Free what a finished (or failed) measurement left: Python garbage, compiled graphs
    and their CUDA-graph memory pools, the caching allocator's free blocks."""
    gc.collect()
    with contextlib.suppress(Exception):  # nothing compiled, or an older torch
        torch._dynamo.reset()
    gc.collect()
    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
