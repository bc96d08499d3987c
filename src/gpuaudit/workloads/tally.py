"""What one eager training step asks for, operator by operator (the op profile's dispatch
view): every aten operator of a forward + backward + optimizer step seen through a
`TorchDispatchMode`, with its FLOPs (torch's own formulas, those of `FlopCounterMode`; the
CPU flash-attention kernels given the CUDA ones'; cuDNN's and oneDNN's RNNs their gates'
matmuls) and its memory traffic (bytes of the tensors it reads plus those it writes; views
move nothing; `empty` allocates without traffic), the matmul and attention shapes.

Each operator runs inside a profiler marker, so the step's own trace says which unit it
belongs to (`workloads.optrace`): its work is tallied per class and per unit group (class,
unit name), the classes the kernel view gives the same units. The forward's calls of the
timed classes are recorded too (`workloads.calls`), for timing them alone.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuaudit.workloads import optrace
from gpuaudit.workloads.calls import Call, match, recording
from gpuaudit.workloads.opclass import canonical, op_class

# Ops that allocate without writing, and `_unsafe_view` (a view whose schema does not say so:
# matmul's and einsum's reshapes of their results): no memory traffic.
_NO_TRAFFIC = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
               "lift_fresh", "resize_", "set_", "record_stream", "_unsafe_view"}
MARK = "ga#"
GroupKey = tuple[str, str]  # (class, unit name)


@dataclass
class OpTally:
    """FLOPs and bytes per class, per unit group and per operator name, the matmul and
    attention shapes, and the forward's recorded calls, of one step."""

    flops: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    bytes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    ops: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    op_bytes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    op_count: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    op_class: dict[str, str] = field(default_factory=dict)  # aten operator → its class
    # (class, m, n, k, batch, dtype bytes) → [count, flops]
    shapes: dict[tuple[str, int, int, int, int, int], list[int]] = field(
        default_factory=lambda: defaultdict(lambda: [0, 0]))
    gemm_dtype: str | None = None
    # (B, H, T, S, Q, causal) of attention forward calls → [count, forward FLOPs]
    attention: dict[tuple[int, int, int, int, int, bool], list[int]] = field(
        default_factory=lambda: defaultdict(lambda: [0, 0]))
    group_flops: dict[GroupKey, int] = field(default_factory=lambda: defaultdict(int))
    group_bytes: dict[GroupKey, int] = field(default_factory=lambda: defaultdict(int))
    group_calls: dict[GroupKey, int] = field(default_factory=lambda: defaultdict(int))
    group_strided: dict[GroupKey, int] = field(default_factory=lambda: defaultdict(int))
    # batch norm's bytes per unit group by the channels of each call (`batch_norm_channels`)
    group_channel_bytes: dict[GroupKey, dict[int, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    # bytes per class as each operator's own name classes it (not its unit's; forced regions
    # left out): how recordings made before the unit classes split the step
    by_name_bytes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    calls: list[Call] = field(default_factory=list)  # matched to their units (record_calls)
    unmatched_calls: int = 0

    @property
    def total_ops(self) -> int:
        return sum(self.ops.values())


def tensors(value: Any, torch: Any) -> Iterator[Any]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, list | tuple):
        for v in value:
            yield from tensors(v, torch)


def _nbytes(value: Any, torch: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors(value, torch))


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
        if base in ("_grouped_mm", "_scaled_grouped_mm", "_scaled_grouped_mm_v2"):
            return _grouped_shape(args[0], args[1], out)
        if base in ("convolution", "_convolution", "cudnn_convolution") and \
                isinstance(out, torch.Tensor) and out.dim() == 4:
            w = args[1]
            groups = int(args[8]) if len(args) > 8 else 1
            n_, c_out, ho, wo = out.shape
            return n_ * ho * wo, c_out // groups, w.shape[1] * w.shape[2] * w.shape[3], groups
    except (AttributeError, IndexError, TypeError):
        return None
    return None


def _grouped_shape(a: Any, b: Any, out: Any) -> tuple[int, int, int, int]:
    """A grouped GEMM as G GEMMs of one mean shape: 2-D × 3-D (the experts' forward) splits
    a's rows, 2-D × 2-D (their weight gradient) the contracted dimension, 3-D × 2-D b's
    columns; 3-D × 3-D is a batched matmul."""
    if a.dim() == 2 and b.dim() == 3:
        g = b.shape[0]
        return max(1, a.shape[0] // g), b.shape[2], a.shape[1], g
    if a.dim() == 2 and b.dim() == 2:
        g = out.shape[0]
        return a.shape[0], b.shape[1], max(1, a.shape[1] // g), g
    if a.dim() == 3 and b.dim() == 2:
        g = a.shape[0]
        return a.shape[1], max(1, b.shape[-1] // g), a.shape[2], g
    return a.shape[1], b.shape[2], a.shape[2], a.shape[0]


def attention_shape(name: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                    arg_names: Sequence[str] = ()
                    ) -> tuple[int, int, int, int, int, bool] | None:
    """(batch, heads, query length, key length, head size, causal) of an SDPA forward.
    `arg_names`: the op's schema's argument names, which place `is_causal` among its
    arguments; without them, by the op's name: flash (q, k, v, dropout_p, is_causal, …),
    efficient and cuDNN (q, k, v, attn_bias, compute_log_sumexp, dropout_p, is_causal, …).
    Read at the flash position, cuDNN's `compute_log_sumexp` (true in training) marked
    unmasked attention (CLIP's image tower) causal."""
    try:
        q, k = args[0], args[1]
        b, h, t, d = (int(x) for x in q.shape)
        kv = int(k.shape[2])
    except (AttributeError, IndexError, TypeError, ValueError):
        return None
    causal = kwargs.get("is_causal")
    if causal is None:
        if "is_causal" in arg_names:
            pos = list(arg_names).index("is_causal")
        else:
            pos = 6 if "efficient" in name or "cudnn" in name else 4
        causal = args[pos] if len(args) > pos else False
    return b, h, t, kv, d, bool(causal)


def rnn_flops(name: str, args: tuple[Any, ...], torch: Any) -> int:
    """The gates' matmul FLOPs of a cuDNN RNN call (`_cudnn_rnn`: input, weights, …, mode,
    hidden size, projection, layers, batch first, dropout, train, bidirectional) or a oneDNN
    layer (`mkldnn_rnn_layer`: input, w_ih, w_hh, …): 2 × T·B × gates·H × (input + H) per
    layer and direction; its backward twice that. FlopCounterMode counts neither."""
    try:
        if name.startswith("_cudnn_rnn"):
            x = args[0]
            mode, hidden, layers = int(args[6]), int(args[7]), int(args[9])
            bidir = bool(args[13])
            gates = {0: 1, 1: 1, 2: 4, 3: 3}.get(mode, 4)  # RNN relu/tanh, LSTM, GRU
            tokens = int(x.shape[0]) * int(x.shape[1]) if x.dim() == 3 else int(x.shape[0])
            feat = int(x.shape[-1])
            dirs = 2 if bidir else 1
            total = 0
            for layer in range(layers):
                inp = feat if layer == 0 else hidden * dirs
                total += 2 * tokens * gates * hidden * (inp + hidden) * dirs
        elif name.startswith("mkldnn_rnn_layer"):
            x, w_ih, w_hh = args[0], args[1], args[2]
            tokens = int(x.numel() // x.shape[-1])
            total = 2 * tokens * int(w_ih.shape[0]) * (int(w_ih.shape[1]) + int(w_hh.shape[1]))
        else:
            return 0
    except (AttributeError, IndexError, TypeError, ValueError):
        return 0
    return total * 2 if "backward" in name else total


@dataclass
class _Op:
    name: str
    flops: int
    moved: int
    shape: tuple[int, int, int, int] | None
    size: int
    dtype: str | None
    attention: tuple[int, int, int, int, int, bool] | None
    forced: str | None
    conv_unit: str | None = None  # a convolution's backward: the forward unit it belongs to
    strided: bool = False  # its kernels index element by element (`strided`)
    channels: int | None = None  # a batch norm's channels (`batch_norm_channels`)


def strided(args: tuple[Any, ...], out: Any, torch: Any) -> bool:
    """Whether an operator without FLOPs reads or writes its elements out of one dense
    layout: an input that is a slice, an expansion or a gap-strided view, one broadcast
    against its output, or inputs and output laid out differently (a transpose made
    contiguous). PyTorch loads such operands element by element, not vectorized, and their
    time does not follow their bytes across precisions: timed alone on an H100 at a
    decoder's shapes (validation/predict/strided_kernels.py), they took 0.61–1.05 of their
    fp32 time in bf16, where operands sharing one dense layout took 0.43–0.57. A reduction
    of dense inputs (an output smaller than them) is not marked: it accumulates in fp32
    whatever it reads."""
    ins = [t for t in tensors(args, torch) if t.numel() > 1]
    outs = [t for t in tensors(out, torch) if t.numel() > 1]
    if not ins or not outs:
        return False
    if not all(_dense(t) for t in ins):
        return True
    size = max(t.numel() for t in outs)
    if any(t.numel() < size for t in ins):
        return True  # broadcast into the output (a reduction's output is the smaller)
    layout = outs[0].stride()
    return any(t.stride() != layout for t in ins + outs if t.shape == outs[0].shape)


def _dense(t: Any) -> bool:
    """Whether a tensor's elements fill its storage span without gaps or repeats, in some
    order of its dimensions (contiguous, channels-last, a whole transpose): its strides,
    sorted, each the product of the sizes inside it."""
    step = 1
    for stride, size in sorted((st, sz) for st, sz in zip(t.stride(), t.shape, strict=True)
                               if sz > 1):
        if stride != step:
            return False
        step *= size
    return True


def batch_norm_channels(name: str, args: tuple[Any, ...], torch: Any) -> int | None:
    """The channels of a batch norm's call, forward or backward (its first tensor, the input
    or the gradient, is N × C × …): PyTorch's kernels reduce each channel in blocks of its
    own, serially over its N·H·W values, so its time follows the values a channel and the
    channels each in their own way (`predict.retarget`)."""
    if "batch_norm" not in name or not args or not isinstance(args[0], torch.Tensor) or \
            args[0].dim() < 2:
        return None
    return int(args[0].shape[1])


def _conv_unit(name: str, args: tuple[Any, ...], torch: Any) -> str | None:
    """The forward unit's name of a convolution's backward (`convolution_backward(grad,
    input, weight, bias_sizes, stride, padding, dilation, transposed, …)`)."""
    if not name.endswith("convolution_backward") or len(args) < 8:
        return None
    weight = args[2]
    if not isinstance(weight, torch.Tensor) or weight.dim() < 3:
        return None
    return f"conv{'_transpose' if args[7] else ''}{weight.dim() - 2}d"


def count_ops(fn: Callable[[], Any], force_class: Callable[[], str | None] | None = None,
              *, record_calls: bool = False,
              on_op: Callable[[], None] | None = None) -> OpTally:
    """Run `fn` (eager) and tally what each aten operator asks for, per the unit it belongs
    to (module docstring). `force_class()`, when it returns a class, overrides the
    operator's own (a region standing for another operator). `on_op()` is called after each
    operator (progress, a time limit: what it raises ends the count)."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry, shape_wrapper

    from gpuaudit.workloads.flops import missing_formulas
    from gpuaudit.workloads.timing import profiled

    extra = {k: shape_wrapper(v) for k, v in missing_formulas(torch).items()}
    formulas = {**flop_registry, **extra}
    seen: list[_Op] = []
    record = torch.autograd.profiler.record_function

    class Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            i = len(seen)
            with record(f"{MARK}{i}"):
                out = func(*args, **kwargs)
            if on_op is not None:
                on_op()
            packet = func.overloadpacket
            name = f"aten.{packet.__name__}" if "aten" in str(packet) else str(packet)
            moved = traffic(func, args, kwargs, out, torch)
            flop_fn = formulas.get(packet)
            flops = int(flop_fn(*args, **kwargs, out_val=out)) if flop_fn else \
                rnn_flops(packet.__name__, args, torch)
            forced = force_class() if force_class else None
            if moved == 0 and flops == 0:
                seen.append(_Op(name, 0, 0, None, 0, None, None, forced))
                return out
            first = next(tensors(args, torch), None)
            att = attention_shape(packet.__name__, args, kwargs,
                                  [a.name for a in func._schema.arguments]) \
                if "attention" in name and "backward" not in name else None
            seen.append(_Op(name, flops, moved, gemm_shape(name, args, out, torch),
                            first.element_size() if first is not None else 4,
                            str(first.dtype).removeprefix("torch.") if first is not None
                            else None, att, forced, _conv_unit(name, args, torch),
                            flops == 0 and strided(args, out, torch),
                            batch_norm_channels(name, args, torch)))
            return out

    calls: list[Call] = []
    recorder = recording(calls) if record_calls else contextlib.nullcontext()
    with profiled([ProfilerActivity.CPU], record_shapes=True) as prof, recorder, Counter():
        fn()
    tree = optrace.build(optrace.exported(prof))
    return _tally(tree, seen, calls if record_calls else None)


def _tally(tree: optrace.OpTree, seen: list[_Op], calls: list[Call] | None) -> OpTally:
    marks = {int(ev.name[len(MARK):]): ev for evs in tree.by_tid.values() for ev in evs
             if ev.name.startswith(MARK) and ev.name[len(MARK):].isdigit()}
    tally = OpTally()
    unit_flops: dict[int, int] = defaultdict(int)
    units_seen: set[int] = set()
    for i, op in enumerate(seen):
        at = optrace.attribute(tree, marks.get(i), own=op.name)
        cls = op.forced or at.op_class
        unit = at.unit if not op.forced else cls
        if op.conv_unit and at.backward and not op.forced and cls != "conv":
            # A convolution's backward charged to a memory-bound unit (seen on CUDA in fp32:
            # ResNet's convolutions' gradients under the ReLU after their batch norm): its
            # work is the convolution's, whatever node the trace put it under.
            cls, unit = "conv", op.conv_unit
        key = (cls, unit)
        if at.event is not None and not at.backward and id(at.event) not in units_seen:
            units_seen.add(id(at.event))
            tally.group_calls[key] += 1
        if op.flops == 0 and op.moved == 0:
            continue
        if at.event is not None:
            unit_flops[id(at.event)] += op.flops
        tally.flops[cls] += op.flops
        tally.bytes[cls] += op.moved
        tally.ops[cls] += 1
        tally.group_flops[key] += op.flops
        tally.group_bytes[key] += op.moved
        if op.strided:
            tally.group_strided[key] += op.moved
        if op.channels:
            tally.group_channel_bytes[key][op.channels] += op.moved
        tally.op_bytes[op.name] += op.moved
        tally.op_count[op.name] += 1
        tally.op_class.setdefault(op.name, cls)
        if not op.forced:
            tally.by_name_bytes[op_class(op.name)] += op.moved
        if cls in ("gemm", "conv", "attention") and op.flops and op.shape is not None:
            entry = tally.shapes[(cls, *op.shape, op.size)]
            entry[0] += 1
            entry[1] += op.flops
            if cls == "gemm" and tally.gemm_dtype is None:
                tally.gemm_dtype = op.dtype
        if op.attention is not None and op.flops:
            entry = tally.attention[op.attention]
            entry[0] += 1
            entry[1] += op.flops
    if calls is not None:
        units = [(canonical(u.name), tree.unit_class.get(id(u), "elementwise"),
                  optrace.dims(u), id(u)) for step in optrace.forward_units(tree)
                 for u in step]
        found = match(calls, units)
        for c in found.calls:
            c.flops = unit_flops.get(c.unit_key or -1, 0)
        tally.calls, tally.unmatched_calls = found.calls, found.unmatched
    return tally
