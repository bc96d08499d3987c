"""The per-operator profile of one training mode, recorded for `gpuaudit predict`.

Three views of the same step, joined by operator class (gemm, attention, conv, elementwise,
optimizer, comm, copy):

- what the step asks for: every aten operator of one eager forward + backward + optimizer
  step seen through a `TorchDispatchMode`, with its FLOPs (torch's own formulas, those of
  `FlopCounterMode`) and its memory traffic (bytes of the tensors it reads plus those it
  writes; views move nothing), the matmul shapes, and the same traffic under the other
  precision family (fp32 ↔ 16-bit autocast) so that a precision change has its real bytes;
- what it took: kernel times per class from a short `torch.profiler` capture of the mode as it
  ran (compiled or not), with each matmul kernel's grid (blocks, blocks per SM: the waves);
- when: the forward, backward and optimizer phases on the device clock, the GPU's busy time,
  and the DDP buckets the gradients would form (for the all-reduce overlap).

On a CPU there are no kernels: the class times are the aten operators' own CPU times.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuaudit import kernelnames as kn
from gpuaudit.workloads import convs as cv
from gpuaudit.workloads import norms as bn

CLASSES = ("gemm", "attention", "conv", "elementwise", "optimizer", "comm", "copy")
TENSOR_CLASSES = ("gemm", "attention", "conv")  # bounded by matmul throughput
MEMORY_CLASSES = ("elementwise", "optimizer", "copy")  # bounded by memory bandwidth

_GEMM = {"mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "_int_mm", "addmv", "mv", "dot",
         "_addmm_activation"}
_ATTENTION = ("_scaled_dot_product", "_flash_attention", "_efficient_attention",
              "_cudnn_attention", "flex_attention")
_OPTIMIZER = ("_fused_adam", "_fused_sgd", "_fused_adagrad", "_foreach_")
# Ops that allocate without writing: no memory traffic.
_NO_TRAFFIC = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
               "lift_fresh", "resize_", "set_", "record_stream"}

DDP_BUCKET_BYTES = 25 * 2**20  # DistributedDataParallel's default bucket_cap_mb
DDP_FIRST_BUCKET_BYTES = 2**20  # torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES


def op_class(name: str) -> str:
    """The class of an aten operator, by its overload packet name ('aten.mm' or 'mm')."""
    ns, _, base = name.rpartition(".")
    base = base.removeprefix("aten::")
    if "c10d" in ns or "c10d" in name:
        return "comm"
    if base in _GEMM:
        return "gemm"
    if base.startswith(_ATTENTION):
        return "attention"
    if "convolution" in base or base.startswith(("_slow_conv", "slow_conv", "thnn_conv")):
        return "conv"
    if base.startswith(_OPTIMIZER):
        return "optimizer"
    return "elementwise"


def kernel_class(name: str) -> str:
    """The class of a CUDA kernel by its (demangled) name. The order is the meaning: cuDNN's
    fused attention says flash and fprop, its batch norm and attention helpers say cudnn, a
    convolution's engines say gemm (`gpuaudit.kernelnames`)."""
    if kn.is_comm(name):
        return "comm"
    if kn.is_attention(name) or kn.is_cudnn_attention_helper(name):
        return "attention"
    if kn.is_batch_norm(name):
        return "elementwise"  # batch norm (cuDNN's too): memory-bound, not a convolution
    if kn.is_conv(name) or kn.is_cudnn(name):
        return "conv"
    if kn.is_optimizer(name):
        return "optimizer"
    # cuBLAS's helpers too (split-K's reduction): their time is the matmul call's
    if kn.is_matmul(name) or kn.is_cublas(name):
        return "gemm"
    return "elementwise"


# --- what the step asks for: the dispatch view ----------------------------------------------


@dataclass
class OpTally:
    """FLOPs and bytes per class, per operator name, and the matmul shapes, of one step."""

    flops: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    bytes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    ops: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    op_bytes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    op_count: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # (class, m, n, k, batch, dtype bytes) → [count, flops]
    shapes: dict[tuple[str, int, int, int, int, int], list[int]] = field(
        default_factory=lambda: defaultdict(lambda: [0, 0]))
    gemm_dtype: str | None = None
    # (B, H, T, S, Q, causal) of attention forward calls → [count, forward FLOPs]
    attention: dict[tuple[int, int, int, int, int, bool], list[int]] = field(
        default_factory=lambda: defaultdict(lambda: [0, 0]))
    # batch-norm forward calls: (shape, memory format, dtype, weight dtype) → [count, bytes]
    norms: dict[bn.NormKey, list[int]] = field(
        default_factory=lambda: defaultdict(lambda: [0, 0]))
    # convolution forward calls: (layer, dtype, weight dtype) → [count, FLOPs]
    convs: dict[cv.ConvKey, list[int]] = field(
        default_factory=lambda: defaultdict(lambda: [0, 0]))

    @property
    def total_ops(self) -> int:
        return sum(self.ops.values())


def _tensors(value: Any, torch: Any) -> Iterator[Any]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _tensors(v, torch)


def _nbytes(value: Any, torch: Any) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(value, torch))


def traffic(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any,
            torch: Any) -> int:
    """Bytes an operator moves: every tensor it reads, plus what it writes (outputs that are
    not views of an input, and the inputs it mutates). A view reads and writes nothing."""
    name = func.overloadpacket.__name__
    if name in _NO_TRAFFIC:
        return 0
    schema = func._schema
    returns = list(schema.returns)
    if returns and all(r.alias_info is not None and not r.alias_info.is_write
                       for r in returns):
        return 0  # a view (transpose, view, expand, unbind, detach…)
    read = _nbytes(args, torch) + _nbytes(list(kwargs.values()), torch)
    written = 0
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = args[i] if i < len(args) else kwargs.get(arg.name)
            written += _nbytes(value, torch)
    outs = out if isinstance(out, tuple | list) and len(returns) != 1 else (out,)
    for ret, value in zip(returns, outs, strict=False):
        if ret.alias_info is None:
            written += _nbytes(value, torch)
    return read + written


def gemm_shape(name: str, args: tuple[Any, ...], out: Any, torch: Any
               ) -> tuple[int, int, int, int] | None:
    """(m, n, k, batch) of a matmul; of a convolution, its implicit GEMM (m = N·Ho·Wo,
    n = Cout, k = Cin/groups·kh·kw, batch = groups)."""
    base = name.rpartition(".")[2]
    try:
        if base in ("mm", "_scaled_mm", "_int_mm"):
            a, b = args[0], args[1]
            return a.shape[0], b.shape[1], a.shape[1], 1
        if base in ("addmm", "_addmm_activation"):
            a, b = args[1], args[2]
            return a.shape[0], b.shape[1], a.shape[1], 1
        if base == "bmm":
            a, b = args[0], args[1]
            return a.shape[1], b.shape[2], a.shape[2], a.shape[0]
        if base == "baddbmm":
            a, b = args[1], args[2]
            return a.shape[1], b.shape[2], a.shape[2], a.shape[0]
        if base in ("convolution", "_convolution", "cudnn_convolution") and \
                isinstance(out, torch.Tensor) and out.dim() == 4:
            w = args[1]
            groups = int(args[8]) if len(args) > 8 else 1
            n_, c_out, ho, wo = out.shape
            return n_ * ho * wo, c_out // groups, w.shape[1] * w.shape[2] * w.shape[3], groups
    except (AttributeError, IndexError, TypeError):
        return None
    return None


def attention_shape(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
                    ) -> tuple[int, int, int, int, int, bool] | None:
    """(batch, heads, query length, key length, head size, causal) of an SDPA forward."""
    try:
        q, k = args[0], args[1]
        b, h, t, d = (int(x) for x in q.shape)
        kv = int(k.shape[2])
    except (AttributeError, IndexError, TypeError, ValueError):
        return None
    causal = kwargs.get("is_causal")
    if causal is None:
        # flash / cpu flash: (q, k, v, dropout_p, is_causal, …); efficient: (q, k, v,
        # attn_bias, compute_log_sumexp, dropout_p, is_causal, …)
        pos = 6 if "efficient" in name else 4
        causal = args[pos] if len(args) > pos else False
    return b, h, t, kv, d, bool(causal)


def count_ops(fn: Callable[[], Any], force_class: Callable[[], str | None] | None = None
              ) -> OpTally:
    """Run `fn` (eager) and tally what each aten operator asks for. `force_class()`, when
    it returns a class, overrides the operator's own (a region standing for another op)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry, shape_wrapper

    from gpuaudit.workloads.flops import _cpu_attention_formulas

    # The extra formulas take shapes, as FlopCounterMode's custom_mapping does.
    extra = {k: shape_wrapper(v) for k, v in _cpu_attention_formulas(torch).items()}
    formulas = {**flop_registry, **extra}
    tally = OpTally()

    class Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = func.overloadpacket
            name = f"aten.{packet.__name__}" if "aten" in str(packet) else str(packet)
            cls = (force_class() if force_class else None) or op_class(name)
            moved = traffic(func, args, kwargs, out, torch)
            flop_fn = formulas.get(packet)
            flops = int(flop_fn(*args, **kwargs, out_val=out)) if flop_fn else 0
            if moved == 0 and flops == 0:
                return out
            tally.flops[cls] += flops
            tally.bytes[cls] += moved
            tally.ops[cls] += 1
            tally.op_bytes[name] += moved
            tally.op_count[name] += 1
            if cls in ("gemm", "conv") and flops:
                shape = gemm_shape(name, args, out, torch)
                first = next(_tensors(args, torch), None)
                size = first.element_size() if first is not None else 4
                if shape is not None:
                    entry = tally.shapes[(cls, *shape, size)]
                    entry[0] += 1
                    entry[1] += flops
                if cls == "gemm" and first is not None and tally.gemm_dtype is None:
                    tally.gemm_dtype = str(first.dtype).removeprefix("torch.")
            if cls == "attention" and flops and "backward" not in name:
                key = attention_shape(packet.__name__, args, kwargs)
                if key is not None:
                    entry = tally.attention[key]
                    entry[0] += 1
                    entry[1] += flops
            if cls == "conv" and flops and cv.is_conv_forward(name):
                conv = cv.conv_key(args, torch)
                if conv is not None:
                    tally.convs[conv][0] += 1
                    tally.convs[conv][1] += flops
            if cls == "elementwise" and bn.is_norm_forward(name):
                norm = bn.norm_key(args, torch)
                if norm is not None:
                    tally.norms[norm][0] += 1
                    tally.norms[norm][1] += moved
            return out

    with Counter():
        fn()
    return tally


# --- what it took: the kernel view ---------------------------------------------------------


@dataclass
class KernelTally:
    """Device time per class over the profiled steps (per step), with the matmul kernels'
    grids and the GPU's busy time."""

    steps: int
    us: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    count: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # (short name, blocks, blocks per SM) → [count, total µs]
    grids: dict[tuple[str, int, float], list[float]] = field(
        default_factory=lambda: defaultdict(lambda: [0, 0.0]))
    busy_us: float = 0.0  # union of kernel intervals
    span_us: float = 0.0  # first kernel start to last kernel end
    source: str = "cuda kernels"
    # batch norm's own kernels (elementwise): (short name, blocks) → [count, total µs]
    norm_kernels: dict[tuple[str, int], list[float]] = field(
        default_factory=lambda: defaultdict(lambda: [0, 0.0]))

    def per_step_ms(self, cls: str) -> float:
        return self.us.get(cls, 0.0) / self.steps / 1e3


def _union_us(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -math.inf
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def _short(name: str) -> str:
    return name.split("(")[0].split("<")[0][-60:]


def parse_trace(events: Iterable[dict[str, Any]], steps: int) -> KernelTally:
    """Kernel and copy events of a chrome trace (torch.profiler's export) into a tally."""
    tally = KernelTally(steps=max(1, steps))
    spans: list[tuple[float, float]] = []
    for ev in events:
        if ev.get("ph") != "X":
            continue
        cat = str(ev.get("cat", "")).lower()
        if cat == "kernel":
            cls = kernel_class(str(ev.get("name", "")))
        elif cat in ("gpu_memcpy", "gpu_memset"):
            cls = "copy"
        else:
            continue
        dur = float(ev.get("dur", 0.0))
        start = float(ev.get("ts", 0.0))
        tally.us[cls] += dur
        tally.count[cls] += 1
        spans.append((start, start + dur))
        if cat != "kernel":
            continue
        args = ev.get("args") or {}
        grid = args.get("grid") or [0]
        blocks = int(math.prod(int(g) for g in grid)) if grid else 0
        name = str(ev.get("name", ""))
        if cls == "elementwise" and bn.is_norm_kernel(name):
            norm = tally.norm_kernels[(bn.norm_kernel_name(name), blocks)]
            norm[0] += 1
            norm[1] += dur
        if cls in TENSOR_CLASSES:
            per_sm = float(args.get("blocks per SM") or 0.0)
            entry = tally.grids[(_short(name), blocks, round(per_sm, 3))]
            entry[0] += 1
            entry[1] += dur
    if spans:
        tally.busy_us = _union_us(spans)
        tally.span_us = max(e for _, e in spans) - min(s for s, _ in spans)
    return tally


def profile_kernels(torch: Any, device: Any, fn: Callable[[], Any], steps: int) -> KernelTally:
    """`steps` calls of `fn` under torch.profiler: CUDA kernels on a GPU, the aten operators'
    own CPU time on a CPU."""
    from torch.profiler import ProfilerActivity, profile

    from gpuaudit.workloads.timing import is_cuda, sync

    cuda = is_cuda(device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync(torch, device)
    with profile(activities=acts) as prof:
        for _ in range(steps):
            fn()
        sync(torch, device)
    if cuda:
        fd, path = tempfile.mkstemp(suffix=".json", prefix="gpuaudit-trace-")
        os.close(fd)
        try:
            prof.export_chrome_trace(path)
            with open(path) as f:
                events = json.load(f).get("traceEvents", [])
        finally:
            os.unlink(path)
        return parse_trace(events, steps)
    tally = KernelTally(steps=max(1, steps), source="cpu operators (self time)")
    for avg in prof.key_averages():
        key = str(avg.key)
        if not key.startswith("aten::"):
            continue
        cls = op_class(key)
        us = float(getattr(avg, "self_cpu_time_total", 0.0))
        tally.us[cls] += us
        tally.count[cls] += int(avg.count)
        if bn.is_norm_op(key) and us > 0:
            tally.norm_kernels[(key, 0)] = [int(avg.count), us]
    tally.busy_us = sum(tally.us.values())
    tally.span_us = tally.busy_us
    return tally


# --- matmul and attention rates at the workload's own shapes ---------------------------------

TIMED_SHAPES = 16  # the shapes with the most FLOPs; they hold nearly all of a model's


def _timed(torch: Any, device: Any, fn: Callable[[], Any], iters: int) -> float:
    """Seconds per call, median of `iters` after two warm-ups."""
    import statistics
    import time

    from gpuaudit.workloads.timing import is_cuda, sync

    for _ in range(2):
        fn()
    if is_cuda(device):
        times = []
        for _ in range(iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        return statistics.median(times)
    out = []
    for _ in range(iters):
        sync(torch, device)
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def time_shapes(torch: Any, device: Any, tally: OpTally, precisions: Iterable[str],
                iters: int = 5) -> list[list[Any]]:
    """The workload's biggest matmul shapes and its attention, timed alone on this device in
    each precision: [kind, m|B, n|H, k|T, batch|S, -|Q, causal, precision, TFLOP/s]. This
    is the machine's matmul rate per precision and shape the predictions start from."""
    from gpuaudit.workloads.precision import float32_matmuls

    dtypes = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
              "fp16": torch.float16}
    gemms = sorted(((k, v) for k, v in tally.shapes.items() if k[0] == "gemm"),
                   key=lambda kv: kv[1][1], reverse=True)[:TIMED_SHAPES]
    rows: list[list[Any]] = []
    for p in precisions:
        if p not in dtypes:
            continue
        dt = dtypes[p]
        with float32_matmuls(torch, tf32=p == "tf32"):
            for (_, m, n, k, batch, _size), _ in gemms:
                try:
                    a = torch.randn(batch, m, k, device=device, dtype=dt)
                    b = torch.randn(batch, k, n, device=device, dtype=dt)
                    fn = (lambda a=a, b=b: torch.bmm(a, b)) if batch > 1 else \
                        (lambda a=a[0], b=b[0]: torch.mm(a, b))
                    sec = _timed(torch, device, fn, iters)
                except RuntimeError:
                    continue
                finally:
                    a = b = None
                rows.append(["gemm", m, n, k, batch, 0, False, p,
                             round(2.0 * batch * m * n * k / sec / 1e12, 4)])
            for (b_, h, t, s, d, causal), _ in sorted(tally.attention.items(),
                                                       key=lambda kv: kv[1][1],
                                                       reverse=True)[:2]:
                rate = _time_attention(torch, device, (b_, h, t, s, d), causal, dt, iters)
                if rate is not None:
                    rows.append(["attention", b_, h, t, s, d, causal, p, round(rate, 4)])
    return rows


def _time_attention(torch: Any, device: Any, shape: tuple[int, int, int, int, int],
                    causal: bool, dtype: Any, iters: int) -> float | None:
    """Forward + backward of scaled_dot_product_attention at this shape, in TFLOP/s as
    FlopCounterMode counts them (forward 4·B·H·T·S·Q, backward 2.5 × that)."""
    import torch.nn.functional as F

    b, h, t, s, d = shape
    try:
        q = torch.randn(b, h, t, d, device=device, dtype=dtype, requires_grad=True)
        k = torch.randn(b, h, s, d, device=device, dtype=dtype, requires_grad=True)
        v = torch.randn(b, h, s, d, device=device, dtype=dtype, requires_grad=True)
        g = torch.randn(b, h, t, d, device=device, dtype=dtype)

        def step() -> None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            out.backward(g)

        sec = _timed(torch, device, step, iters)
    except RuntimeError:
        return None
    return 3.5 * 4.0 * b * h * t * s * d / sec / 1e12


# --- when: phases and DDP buckets ------------------------------------------------------------


def phase_times_ms(torch: Any, device: Any, trainer: Any, steps: int) -> dict[str, float]:
    """Median forward, backward and optimizer time of `steps` steps, on the device clock
    (CUDA events between the phases, no sync inside a step) or the host's on a CPU."""
    import statistics
    import time

    from gpuaudit.workloads.timing import is_cuda, sync

    cuda = is_cuda(device)
    rows: list[dict[str, float]] = []
    for _ in range(steps):
        marks: list[tuple[str, Any]] = []

        def mark(phase: str, marks: list[tuple[str, Any]] = marks) -> None:
            if cuda:
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                marks.append((phase, ev))
            else:
                marks.append((phase, time.perf_counter()))

        sync(torch, device)
        mark("start")
        trainer.step(mark=mark)
        sync(torch, device)
        row = {}
        for (_, a), (phase, b) in itertools.pairwise(marks):
            row[phase] = a.elapsed_time(b) if cuda else (b - a) * 1e3
        rows.append(row)
    phases = {k for r in rows for k in r}
    return {k: statistics.median(r.get(k, 0.0) for r in rows) for k in sorted(phases)}


def ddp_buckets(params: Iterable[Any], *, cap: int = DDP_BUCKET_BYTES,
                first: int = DDP_FIRST_BUCKET_BYTES) -> list[tuple[int, float]]:
    """The gradient buckets DistributedDataParallel would all-reduce, in the order they are
    ready: parameters in reverse registration order (DDP's own order, close to the order the
    backward produces gradients), a bucket closing when it holds `cap` bytes (the first one
    `first`); each as (bytes, the fraction of the backward done when its last gradient is
    ready), that fraction taken as the share of gradient bytes produced by then. A parameter
    shared by two modules (tied embeddings) counts once, at its registration place."""
    seen: set[int] = set()
    sizes = []
    for p in params:
        if id(p) in seen or not getattr(p, "requires_grad", False):
            continue
        seen.add(id(p))
        sizes.append(p.numel() * p.element_size())
    sizes.reverse()
    total = sum(sizes) or 1
    buckets: list[tuple[int, float]] = []
    current, done, limit = 0, 0, first
    for size in sizes:
        current += size
        done += size
        if current >= limit:
            buckets.append((current, done / total))
            current, limit = 0, cap
    if current:
        buckets.append((current, done / total))
    return buckets


# --- the profile and its measurements --------------------------------------------------------


@dataclass
class OpProfile:
    precision: str
    tally: OpTally
    kernels: KernelTally
    phases_ms: dict[str, float]
    buckets: list[tuple[int, float]]
    grad_bytes: int
    params: int
    alt_precision: str | None = None
    alt_bytes: dict[str, int] = field(default_factory=dict)
    timed: list[list[Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    norm_timed: list[list[Any]] = field(default_factory=list)  # norms.time_norms' rows
    norm_not_timed: str | None = None  # why batch norm's layers were not timed
    conv_timed: list[list[Any]] = field(default_factory=list)  # convs.time_convs' rows
    conv_not_timed: str | None = None  # why the convolution layers were not timed


def alt_precision(precision: str) -> str:
    """The other precision family whose traffic is recorded too: fp32 ↔ 16-bit autocast."""
    return "bf16" if precision in ("fp32", "tf32") else "fp32"


def capture(trainer: Any, *, steps: int = 3) -> OpProfile:
    """The whole profile of a ready, warmed-up Trainer (module docstring)."""
    import torch

    from gpuaudit.workloads.precision import autocast_dtype, float32_matmuls

    device = trainer.device
    mode = trainer.mode

    def one_eager_step(precision: str) -> Callable[[], None]:
        amp = autocast_dtype(torch, precision)

        def run() -> None:
            ctx = (torch.autocast(device.type, dtype=amp) if amp is not None
                   else contextlib.nullcontext())
            with ctx:
                loss = trainer.net(*trainer.inputs, trainer.target)
            loss.backward()
            trainer.opt.step()
            trainer.opt.zero_grad(set_to_none=True)
        return run

    notes: list[str] = []
    tally = count_ops(one_eager_step(mode.precision))
    alt = alt_precision(mode.precision)
    alt_bytes: dict[str, int] = {}
    alt_tally: OpTally | None = None
    try:
        with float32_matmuls(torch, tf32=alt != "fp32"):
            alt_tally = count_ops(one_eager_step(alt))
            alt_bytes = dict(alt_tally.bytes)
    except RuntimeError as exc:  # e.g. bf16 autocast unsupported here
        notes.append(f"no {alt} traffic: {str(exc).splitlines()[0][:80]}")
        alt = None  # type: ignore[assignment]
    kernels = profile_kernels(torch, device, trainer.step, steps)
    phases = phase_times_ms(torch, device, trainer, steps)
    timed = time_shapes(torch, device, tally, [mode.precision] + ([alt] if alt else []))
    def timed_alone(layers: str, time_them: Callable[..., list[list[Any]]],
                    compiled: str) -> tuple[list[list[Any]], str | None]:
        """The step's `layers` (a tally field) timed alone in its precision family and the
        other one's; or why not (a compiled step)."""
        own = getattr(tally, layers)
        if not own:
            return [], None
        if mode.compile:
            return [], compiled
        families = {mode.precision: dict(own)}
        if alt and alt_tally is not None:
            families[alt] = dict(getattr(alt_tally, layers))
        return time_them(torch, device, families), None

    norm_timed, not_timed = timed_alone(
        "norms", bn.time_norms,
        "compiled: the step runs batch norm fused into inductor's own kernels")
    conv_timed, conv_not_timed = timed_alone(
        "convs", cv.time_convs,
        "compiled: inductor chooses the step's layouts and fusions itself")
    params = list(trainer.net.parameters())
    unique = {id(p): p for p in params if p.requires_grad}
    grad_bytes = sum(p.numel() * p.element_size() for p in unique.values())
    return OpProfile(precision=mode.precision, tally=tally, kernels=kernels,
                     phases_ms=phases, buckets=ddp_buckets(params), grad_bytes=grad_bytes,
                     params=sum(p.numel() for p in unique.values()), alt_precision=alt,
                     alt_bytes=alt_bytes, timed=timed, notes=notes, norm_timed=norm_timed,
                     norm_not_timed=not_timed, conv_timed=conv_timed,
                     conv_not_timed=conv_not_timed)


def _top(items: Iterable[tuple[Any, ...]], key: Callable[[Any], float], n: int
         ) -> list[Any]:
    return sorted(items, key=key, reverse=True)[:n]


def class_detail(prof: OpProfile, cls: str) -> str:
    """The per-class detail kept as one JSON string param: the operators by traffic, and for
    matmul classes their shapes and kernel grids (the biggest first)."""
    t = prof.tally
    ops = [[name, t.op_bytes[name], t.op_count[name]] for name in t.op_bytes
           if op_class(name) == cls]
    detail: dict[str, Any] = {"ops": _top(ops, lambda r: r[1], 40)}
    if cls in ("gemm", "conv"):
        shapes = [[*k[1:], v[0], v[1]] for k, v in t.shapes.items() if k[0] == cls]
        detail["shapes"] = _top(shapes, lambda r: r[6], 48)
        detail["shape_fields"] = ["m", "n", "k", "batch", "dtype_bytes", "count", "flops"]
    if cls in ("gemm", "attention"):
        detail["timed"] = [r for r in prof.timed if r[0] == cls]
        detail["timed_fields"] = ["kind", "m|B", "n|H", "k|T", "batch|S", "Q", "causal",
                                  "precision", "tflops"]
    if cls == "attention":
        detail["shapes"] = [[*k, v[0], v[1]] for k, v in prof.tally.attention.items()]
        detail["shape_fields"] = ["B", "H", "T", "S", "Q", "causal", "count", "forward_flops"]
    if cls == "conv" and (conv := cv.detail(t.convs, prof.conv_timed, prof.conv_not_timed)):
        detail["timed_convs"] = conv
    if cls == "elementwise":
        k = prof.kernels
        norm = bn.detail(t.norms, k.norm_kernels, k.steps, prof.norm_timed, k.source,
                         prof.norm_not_timed)
        if norm is not None:
            detail["batch_norm"] = norm
    if cls in TENSOR_CLASSES:
        steps = prof.kernels.steps
        grids = [[name, blocks, per_sm, round(v[0] / steps, 3), round(v[1] / steps, 3)]
                 for (name, blocks, per_sm), v in prof.kernels.grids.items()
                 if kernel_class(name) == cls]
        detail["kernels"] = _top(grids, lambda r: r[4], 48)
        detail["kernel_fields"] = ["name", "blocks", "blocks_per_sm", "count_per_step",
                                   "us_per_step"]
    return json.dumps(detail, separators=(",", ":"))


def measurements(prof: OpProfile, *, model: str, mode_id: str, base: dict[str, Any],
                 gpu_index: int | None, step_ms: float) -> Iterator[Any]:
    """`<model>/<mode>/op/<class>` (ms per step, FLOPs, bytes, kernels, detail) for every
    class that did something, then `<model>/<mode>/op/step` (phases, busy time, idle time,
    gradient bytes and DDP buckets)."""
    from gpuaudit.workloads.records import TRAIN, single

    k, t = prof.kernels, prof.tally
    seen = [c for c in CLASSES if k.us.get(c) or t.flops.get(c) or t.bytes.get(c)]
    for cls in seen:
        ms = k.per_step_ms(cls)
        yield single(TRAIN, f"{model}/{mode_id}/op/{cls}", "ms", ms, gpu_index=gpu_index,
                     statistic=f"mean of {k.steps} profiled steps",
                     notes=(f"{k.source}; FLOPs and bytes from one eager step's aten "
                            "operators",),
                     params={**base, "op_class": cls, "flops_per_step": int(t.flops[cls]),
                             "bytes_per_step": int(t.bytes[cls]),
                             "ops_per_step": int(t.ops[cls]),
                             "kernels_per_step": round(k.count.get(cls, 0) / k.steps, 2),
                             "alt_precision": prof.alt_precision,
                             "alt_bytes_per_step": prof.alt_bytes.get(cls),
                             "gemm_dtype": t.gemm_dtype if cls == "gemm" else None,
                             "detail": class_detail(prof, cls)})
    busy = k.busy_us / k.steps / 1e3
    buckets = ";".join(f"{b}@{f:.4f}" for b, f in prof.buckets)
    yield single(TRAIN, f"{model}/{mode_id}/op/step", "ms", k.span_us / k.steps / 1e3,
                 gpu_index=gpu_index, statistic=f"mean of {k.steps} profiled steps",
                 notes=("device span of the profiled steps; the timed step is step_time",
                        *prof.notes),
                 params={**base, "busy_ms": round(busy, 4), "step_ms": round(step_ms, 4),
                         "idle_ms": round(max(0.0, step_ms - busy), 4),
                         "forward_ms": round(prof.phases_ms.get("forward", 0.0), 4),
                         "backward_ms": round(prof.phases_ms.get("backward", 0.0), 4),
                         "optimizer_ms": round(prof.phases_ms.get("optimizer", 0.0), 4),
                         "grad_bytes": prof.grad_bytes, "param_count": prof.params,
                         "ops_per_step": t.total_ops, "ddp_buckets": buckets,
                         "kernel_source": k.source, "profiled_steps": k.steps})
