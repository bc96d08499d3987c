"""Host↔device copies from ordinary (pageable) host memory, as a user's code makes them:
`batch.to('cuda')` and `result.cpu()`, at the sizes people copy (a batch: a few MiB to a GiB).

Pageable memory cannot be read by the GPU's DMA engines: the driver copies it, chunk by chunk,
through a pinned bounce buffer, with a CPU memcpy on one side of every chunk. So the rate
depends on the host: its memcpy speed, whether the data is in the CPU's cache, whether its
pages exist yet. What we measure, and why:
- host→device: `x.to(device)` with x a batch whose pages exist and hold data (a loader wrote
  it), not in the CPU's cache: each copy reads the next slice of a `RING_BYTES` buffer filled
  once (copying the same small tensor again and again reads it from the CPU cache and runs up
  to twice as fast as a training loop's fresh batches);
- device→host: `y.cpu()`, which allocates new host memory each time: above glibc's mmap
  threshold (≤ 32 MiB) every call maps fresh pages and takes a page fault per page inside the
  copy; `d2h_pageable_reused` copies into a buffer kept from the previous call instead (what
  code that reuses its output buffer gets).
Each copy is timed on the host clock around the call and a synchronize.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuaudit.bench.stats import measure, median, reason_of, skipped
from gpuaudit.model import Measurement, Params
from gpuaudit.parse import human_bytes

SUITE = "transfer"
UNIT = "GB/s"
MIB = 1 << 20
GIB = 1 << 30
RING_BYTES = 512 * MIB  # more than any CPU's last-level cache: each copy reads fresh data
GUESS_GBPS = 8.0  # sizes the iteration counts before anything is measured


@dataclass(frozen=True)
class PageablePlan:
    headline: int  # the size of the h2d_pageable / d2h_pageable figures
    sizes: tuple[int, ...]  # the size sweep (the headline among them)
    seconds: float  # about this long per size and direction
    sweep_all_gpus: bool  # False: the sweep on the first GPU only (host-bound anyway)


def iterations(nbytes: int, seconds: float, lo: int = 3, hi: int = 40) -> int:
    """Copies of `nbytes` that take about `seconds` at a typical pageable rate."""
    return max(lo, min(hi, math.ceil(seconds * GUESS_GBPS * 1e9 / nbytes)))


def ring_offsets(nbytes: int, ring: int, count: int) -> list[int]:
    """Where the `count` successive copies of `nbytes` start in a ring buffer of `ring`
    bytes: consecutive slices, wrapping, so no copy reads what the previous one just read."""
    slots = max(1, ring // nbytes)
    return [(i % slots) * nbytes for i in range(count)]


def size_note(rates: Sequence[tuple[int, float]]) -> str:
    """'by size: 4 MiB 12.1, 64 MiB 9.8, 256 MiB 7.0 GB/s'."""
    return "by size: " + ", ".join(f"{human_bytes(n)} {r:.3g}" for n, r in rates) + " GB/s"


def _gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9


def _h2d(torch: Any, ring: Any, device: Any, nbytes: int, warmup: int, iters: int
         ) -> tuple[list[float], bool]:
    rates: list[float] = []
    last: Any = None
    src: Any = None
    for i, off in enumerate(ring_offsets(nbytes, ring.numel(), warmup + iters)):
        src = ring[off:off + nbytes]
        t0 = time.perf_counter()
        last = src.to(device)
        torch.cuda.synchronize(device)
        if i >= warmup:
            rates.append(_gbps(nbytes, time.perf_counter() - t0))
    step = max(1, nbytes // 4099)
    ok = bool(torch.equal(last[::step].cpu(), src[::step])) if last is not None else False
    return rates, ok


def _d2h(torch: Any, dev: Any, nbytes: int, warmup: int, iters: int, reuse: bool
         ) -> tuple[list[float], bool]:
    src = dev[:nbytes]
    out = torch.empty(nbytes, dtype=torch.uint8) if reuse else None
    rates: list[float] = []
    last: Any = None
    for i in range(warmup + iters):
        last = None  # the previous result is freed first, as a loop over batches frees it
        t0 = time.perf_counter()
        if out is not None:
            out.copy_(src)
            last = out
        else:
            last = src.to("cpu")
        torch.cuda.synchronize(src.device)
        if i >= warmup:
            rates.append(_gbps(nbytes, time.perf_counter() - t0))
    step = max(1, nbytes // 4099)
    return rates, bool(torch.equal(last[::step], src[::step].cpu()))


def measure_gpu(torch: Any, cuda_index: int, nvml: int, plan: PageablePlan, sweep: bool,
                spec: float | None, notes: tuple[str, ...], base: Params) -> list[Measurement]:
    """The pageable figures of one GPU: headline h2d/d2h (+ d2h reused), and with `sweep`
    the `_by_size` rows."""
    device = torch.device("cuda", cuda_index)
    sizes = plan.sizes if sweep else (plan.headline,)
    biggest = max(sizes)
    params = {**base, "host_memory": "pageable"}
    try:
        dev = torch.empty(biggest, dtype=torch.uint8, device=device).random_(0, 256)
        ring = torch.empty(max(RING_BYTES, biggest), dtype=torch.uint8)
        for off in range(0, ring.numel(), biggest):  # fills (and faults in) every page once
            n = min(biggest, ring.numel() - off)
            ring[off:off + n].copy_(dev[:n])
    except RuntimeError as e:  # out of (host or device) memory
        return [skipped(SUITE, name, UNIT, reason_of(e), gpu_index=nvml, params=params,
                        spec_value=spec)
                for name in ("h2d_pageable", "d2h_pageable", "d2h_pageable_reused")]
    out: list[Measurement] = []
    by_size: dict[str, list[tuple[int, float]]] = {"h2d": [], "d2h": []}
    for nbytes in sizes:
        iters = iterations(nbytes, plan.seconds)
        warm = 2 if nbytes < 64 * MIB else 1
        found = {"h2d": _h2d(torch, ring, device, nbytes, warm, iters),
                 "d2h": _d2h(torch, dev, nbytes, warm, iters, reuse=False)}
        for d, (rates, ok) in found.items():
            how = "x.to('cuda'), fresh data" if d == "h2d" else "y.cpu(), new host memory"
            p: Params = {**params, "bytes": nbytes, "method": how}
            by_size[d].append((nbytes, median(rates)))
            if sweep:
                out.append(measure(SUITE, f"{d}_pageable_by_size", UNIT, rates, warmup=warm,
                                   spec_value=spec, gpu_index=nvml, verified=ok, notes=notes,
                                   params={**p, "size_bytes": nbytes}))
            if nbytes == plan.headline:
                out.append(measure(SUITE, f"{d}_pageable", UNIT, rates, warmup=warm,
                                   spec_value=spec, gpu_index=nvml, verified=ok, params=p,
                                   notes=notes))
        if nbytes == plan.headline:
            rates, ok = _d2h(torch, dev, nbytes, warm, iters, reuse=True)
            out.append(measure(SUITE, "d2h_pageable_reused", UNIT, rates, warmup=warm,
                               spec_value=spec, gpu_index=nvml, verified=ok, notes=notes,
                               params={**params, "bytes": nbytes,
                                       "method": "out.copy_(y), host buffer reused"}))
    if sweep and len(sizes) > 1:  # the headline figures say how the rate moves with size
        out = [m.model_copy(update={"notes": (*m.notes, size_note(by_size[m.name[:3]]))})
               if m.name in ("h2d_pageable", "d2h_pageable") else m for m in out]
    del dev, ring
    return out
