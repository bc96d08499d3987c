"""Batch norm in the op profile: its kernels' own device time, its layers' shapes, and those
layers timed alone in both precision families.

PyTorch runs batch norm with cuDNN unless the input is bf16 (`_batch_norm_impl_index`,
aten/src/ATen/native/Normalization.cpp), with its own kernels then; both run one thread block
per channel in NCHW, bound by their loads' latency rather than by bandwidth, each at its own
rate per element. A step recorded in one precision holds the time of one implementation only,
and the elementwise class, where batch norm's kernels are classed, keeps no kernel list. So the
recorder keeps, under the elementwise class's detail (`batch_norm`):

- its kernels' own time per step: cuDNN's `cudnn::bn_fw_*` / `bn_bw_*` (the H200 recordings of
  2026-12-01: `bn_fw_tr_1C11_kernel_NCHW`, `bn_bw_1C11_kernel_new`, `…_singleread`), PyTorch's
  `batch_norm_collect_statistics_kernel`, `batch_norm_transform_input_kernel`,
  `batch_norm_backward_kernel`, `batch_norm_backward_reduce/elemt_kernel` (and their
  `channels_last` kinds), and the TensorIterator kernels whose lambdas are batch norm's
  (`…batch_norm_elementwise…`, `…batch_norm_update_stats_and_invert…`); not inductor's fused
  `triton_*` kernels, which do other operators' work too. On a CPU: the batch-norm aten
  operators' own CPU time;
- the layers' input shapes, memory format and dtypes as the eager step ran them (and as the
  other precision family's step would), by traffic;
- its `NORM_SHAPES` biggest shapes timed alone, forward + backward in training mode, at those
  shapes, memory format and dtypes, under each precision family's autocast, as the matmul
  shapes are (`ops.time_shapes`): CUDA events, two warm-up calls, the median of as many calls
  as `NORM_BUDGET_MS` allows (3 to 25 each).
"""

from __future__ import annotations

import re
from contextlib import nullcontext
from typing import Any

from gpuaudit import kernelnames as kn
from gpuaudit.workloads.timing import median_call_ms

NORM_SHAPES = 6  # the layers' shapes with the most traffic (resnet50: 6 of its 12 hold 84 %)
NORM_BUDGET_MS = {True: 3000.0, False: 300.0}  # all shapes in both precisions; GPU, CPU
NORM_ROWS = 16  # kernels and shapes kept in the detail
_TOKEN = re.compile(r"[A-Za-z_]*(?:batch_?norm|bn_[fb]w)\w*", re.IGNORECASE)
# The activations' dtype a precision family feeds batch norm where the step's own tally does
# not say (autocast leaves batch norm alone: it takes the convolution's output as it is).
ACTIVATION = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}
KERNEL_FIELDS = ["name", "blocks", "count_per_step", "us_per_step"]
SHAPE_FIELDS = ["shape", "memory_format", "dtype", "weight_dtype", "count", "bytes"]
TIMED_FIELDS = ["shape", "memory_format", "precision", "dtype", "weight_dtype", "count", "ms"]

NormKey = tuple[tuple[int, ...], str, str, str]  # (shape, memory format, dtype, weight dtype)


def is_norm_kernel(name: str) -> bool:
    """Whether a CUDA kernel (by its demangled name) is batch norm's own (module docstring)."""
    return kn.is_batch_norm(name)


def norm_kernel_name(name: str) -> str:
    """A short name that keeps what makes the kernel batch norm's: the template's name, or the
    batch-norm lambda's within a TensorIterator kernel."""
    head = name.split("(")[0].split("<")[0].strip()
    head = head.rsplit(" ", 1)[-1]
    if any(k in head.lower() for k in kn.BATCH_NORM):
        return head[-60:]
    found = _TOKEN.search(name)
    return f"{head.rsplit('::', 1)[-1]}[{found.group(0) if found else '?'}]"[-80:]


def is_norm_op(name: str) -> bool:
    """A batch-norm aten operator (forward or backward) by its name."""
    return "batch_norm" in name


def is_norm_forward(name: str) -> bool:
    return is_norm_op(name) and "backward" not in name and "impl_index" not in name


def memory_format(x: Any, torch: Any) -> str:
    if x.dim() == 4 and not x.is_contiguous() and \
            x.is_contiguous(memory_format=torch.channels_last):
        return "channels_last"
    if x.dim() == 5 and not x.is_contiguous() and \
            x.is_contiguous(memory_format=torch.channels_last_3d):
        return "channels_last_3d"
    return "contiguous" if x.is_contiguous() else "strided"


def norm_key(args: tuple[Any, ...], torch: Any) -> NormKey | None:
    """(shape, memory format, dtype, weight dtype) of a batch-norm forward call."""
    x = args[0] if args else None
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        return None
    w = args[1] if len(args) > 1 and isinstance(args[1], torch.Tensor) else None
    wdt = str(w.dtype if w is not None else torch.float32).removeprefix("torch.")
    return (tuple(int(s) for s in x.shape), memory_format(x, torch),
            str(x.dtype).removeprefix("torch."), wdt)


# --- timing the layers alone -----------------------------------------------------------------


def _time_one(torch: Any, device: Any, key: NormKey, amp: Any, budget_s: float) -> float:
    """Forward + backward (input, weight and bias gradients) of one batch-norm layer in
    training mode, fp32 running statistics as nn.BatchNorm keeps them."""
    import torch.nn.functional as F

    shape, fmt, dtype, wdtype = key
    dt, wdt = getattr(torch, dtype), getattr(torch, wdtype)
    c = shape[1]
    x = torch.randn(shape, device=device, dtype=dt)
    if fmt in ("channels_last", "channels_last_3d"):
        x = x.contiguous(memory_format=getattr(torch, fmt))
    x.requires_grad_(True)
    w = torch.ones(c, device=device, dtype=wdt, requires_grad=True)
    b = torch.zeros(c, device=device, dtype=wdt, requires_grad=True)
    mean = torch.zeros(c, device=device, dtype=torch.float32)
    var = torch.ones(c, device=device, dtype=torch.float32)
    g = torch.randn_like(x)

    def step() -> None:
        ctx = torch.autocast(device.type, dtype=amp) if amp is not None else nullcontext()
        with ctx:
            y = F.batch_norm(x, mean, var, w, b, training=True, momentum=0.1, eps=1e-5)
        torch.autograd.grad(y, (x, w, b), g)

    return median_call_ms(torch, device, step, budget_s)


def time_norms(torch: Any, device: Any, families: dict[str, dict[NormKey, list[int]]], *,
               shapes: int = NORM_SHAPES, budget_ms: float | None = None) -> list[list[Any]]:
    """The first family's `shapes` biggest batch-norm shapes, timed alone in every precision
    family of `families` (precision → its step's tally of batch-norm calls): per shape and
    precision [shape, memory format, precision, dtype, weight dtype, count per step, ms]. The
    dtypes are those the precision's own step fed the layer of that shape and memory format
    (`ACTIVATION` and float32 weights where its tally lacks it). Shapes that cannot run here
    (out of memory, a dtype without kernels) are left out."""
    from gpuaudit.workloads.precision import autocast_dtype
    from gpuaudit.workloads.timing import biggest_first, is_cuda

    budget = (budget_ms if budget_ms is not None else NORM_BUDGET_MS[is_cuda(device)]) / 1e3
    top, each = biggest_first(families, shapes, budget)
    rows: list[list[Any]] = []
    for precision, tally in families.items():
        seen = {(k[0], k[1]): k for k in tally}
        amp = autocast_dtype(torch, precision)
        for (shape, fmt, _, _), (count, _) in top:
            key = seen.get((shape, fmt), (shape, fmt, ACTIVATION.get(precision, "float32"),
                                          "float32"))
            try:
                ms = _time_one(torch, device, key, amp, each)
            except (RuntimeError, TypeError, AttributeError):
                continue
            rows.append([list(shape), fmt, precision, key[2], key[3], count, round(ms, 6)])
    return rows


# --- the detail ------------------------------------------------------------------------------


def detail(norms: dict[NormKey, list[int]], kernels: dict[tuple[str, int], list[float]],
           steps: int, timed: list[list[Any]], source: str, not_timed: str | None
           ) -> dict[str, Any] | None:
    """The elementwise class's `batch_norm` entry (module docstring); None when the step ran
    no batch norm. `kernels`: (short name, blocks) → [count, µs] over `steps` steps."""
    if not norms and not kernels:
        return None
    us = sum(v[1] for v in kernels.values()) / steps
    rows = [[name, blocks, round(v[0] / steps, 3), round(v[1] / steps, 3)]
            for (name, blocks), v in kernels.items()]
    shape_rows = [[list(k[0]), k[1], k[2], k[3], v[0], v[1]] for k, v in norms.items()]
    total = sum(v[1] for v in norms.values())
    timed_keys = {(tuple(r[0]), r[1]) for r in timed}
    covered = sum(v[1] for k, v in norms.items() if (k[0], k[1]) in timed_keys)
    out: dict[str, Any] = {
        "us_per_step": round(us, 3), "source": source,
        "kernels": sorted(rows, key=lambda r: r[3], reverse=True)[:NORM_ROWS],
        "kernel_fields": KERNEL_FIELDS,
        "shapes": [r for r in sorted(shape_rows, key=lambda r: r[5], reverse=True)][:NORM_ROWS],
        "shape_fields": SHAPE_FIELDS, "forward_bytes": total,
        "timed": timed, "timed_fields": TIMED_FIELDS,
        "timed_traffic_share": round(covered / total, 4) if total else 0.0,
    }
    if not_timed:
        out["not_timed"] = not_timed
    return out
