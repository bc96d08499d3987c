"""The step's matmul-bound, normalization and embedding calls as the user's code made them (a
`TorchFunctionMode`), kept as specs that `workloads.units` can replay alone: each call's
function, its arguments with every tensor replaced by its shape, dtype, strides and whether
it needed a gradient, and the integer tensors' values (indices, lengths: their values matter).

PyTorch's Python functions (`F.multi_head_attention_forward`, `F.layer_norm`…) check for a
mode first and hand themselves to it whole; the checks are switched off while the step is
recorded, so that their bodies run and the builtins they call (`linear`, `bmm`, `layer_norm`)
reach the mode one by one, as the profiler's operators do.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuaudit.workloads.opclass import canonical, unit_class

# The classes whose calls are kept for timing alone (matmul-bound; normalizations: their
# implementation changes with the precision; embeddings: their backward sorts the lookups,
# whose time follows the batch where the traffic counted, the tables' gradient, does not).
TIMED_CLASSES = ("gemm", "attention", "conv", "rnn", "norm", "embedding")
KEEP_VALUES = 1 << 20  # integer tensors up to this many elements keep their values
_GUARDS = ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic")
_DUNDER = {"__matmul__": "matmul", "__rmatmul__": "matmul"}


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: str  # "float32", "bfloat16", "int64", …
    stride: tuple[int, ...]
    requires_grad: bool
    values: Any = None  # a CPU copy of an integer or boolean tensor

    @property
    def floating(self) -> bool:
        return self.dtype.startswith(("float", "bfloat", "complex"))

    def text(self) -> str:
        short = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
        return f"{short.get(self.dtype, self.dtype)}[{','.join(map(str, self.shape))}]"


@dataclass
class Call:
    """One recorded call: `args`/`kwargs` with TensorSpecs in the tensors' places."""

    name: str  # canonical: "linear", "conv2d", "scaled_dot_product_attention", …
    func: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    op_class: str = ""  # the trace's, once matched (`match`)
    flops: int = 0  # forward + backward, the dispatch tally's, once matched
    count: int = 1
    unit_key: int | None = None  # the matched unit's (id of its trace event)
    # the strides of the gradient the step's backward brought to the call's output: a layer
    # may get it in another memory format than its output's (a convolution followed by a
    # permute to channels-last), and cuDNN then converts, or runs another kernel
    grad_stride: tuple[int, ...] | None = None

    def tensors(self) -> list[TensorSpec]:
        return list(_leaves((self.args, self.kwargs)))

    def signature(self) -> str:
        return " · ".join(t.text() for t in self.tensors())

    def key(self) -> tuple[Any, ...]:
        """What makes two calls the same to time: name, tensors and the other arguments."""
        return (self.name, _frozen(self.args), _frozen(self.kwargs), self.grad_stride)


def dense_strides(shape: tuple[int, ...], stride: tuple[int, ...]) -> tuple[int, ...]:
    """Dense strides for `shape` in the order of `stride` (its memory format kept; a dimension
    expanded there, stride 0, stays expanded). Of two dimensions of one stride, one of size 1
    is taken as the inner (a depthwise weight's [C, 1, k, k] keeps torch's strides)."""
    order = sorted(range(len(stride)), key=lambda i: (stride[i], shape[i] != 1))
    out = [0] * len(shape)
    step = 1
    for i in order:
        out[i] = step if stride[i] else 0
        step *= shape[i] if stride[i] else 1
    return tuple(out)


def _leaves(value: Any) -> Iterator[TensorSpec]:
    if isinstance(value, TensorSpec):
        yield value
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _leaves(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)


def _frozen(value: Any) -> Any:
    if isinstance(value, TensorSpec):
        return ("T", value.shape, value.dtype, value.stride, value.requires_grad)
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def spec_of(value: Any, torch: Any, values: bool = True) -> Any:
    """`value` with each tensor a TensorSpec (`values`: integer tensors keep their values)."""
    if isinstance(value, torch.Tensor):
        keep = None
        if values and not value.is_floating_point() and not value.is_complex() and \
                value.numel() <= KEEP_VALUES and value.device.type != "meta":
            keep = value.detach().to("cpu", copy=True)
        return TensorSpec(tuple(int(s) for s in value.shape),
                          str(value.dtype).removeprefix("torch."),
                          tuple(int(s) for s in value.stride()), bool(value.requires_grad),
                          keep)
    if isinstance(value, list | tuple):
        return type(value)(spec_of(v, torch, values) for v in value)
    if isinstance(value, dict):
        return {k: spec_of(v, torch, values) for k, v in value.items()}
    return value


def call_name(func: Any) -> str:
    name = getattr(func, "__name__", "") or ""
    return _DUNDER.get(name, canonical(name))


@contextlib.contextmanager
def recording(calls: list[Call], only: frozenset[str] = frozenset()) -> Iterator[None]:
    """Record the forward's calls of the timed classes into `calls` (module docstring).
    `only`: just the calls of these names, their shapes alone (no integer tensor's values
    copied, no gradient hooked), so a count of the step's operators taken meanwhile sees
    only the step's own."""
    import torch
    import torch.overrides as ov
    from torch.overrides import TorchFunctionMode

    class Recorder(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            name = call_name(func)
            if only:
                if name in only and torch.is_grad_enabled():
                    calls.append(Call(name, func, spec_of(args, torch, False),
                                      spec_of(kwargs, torch, False)))
                return func(*args, **kwargs)
            if not (torch.is_grad_enabled() and unit_class(name) in TIMED_CLASSES):
                return func(*args, **kwargs)
            call = Call(name, func, spec_of(args, torch), spec_of(kwargs, torch))
            calls.append(call)
            out = func(*args, **kwargs)
            first = first_tensor(out, torch)
            if first is not None and first.requires_grad:
                first.register_hook(functools.partial(_keep_grad_stride, call))
            return out

    originals = {g: getattr(ov, g) for g in _GUARDS}
    patched: list[tuple[Any, str, Any]] = []
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not mod_name.startswith("torch"):
            continue
        space = getattr(mod, "__dict__", {})
        for g, fn in originals.items():
            if space.get(g) is fn:
                patched.append((mod, g, fn))
                setattr(mod, g, _never)
    try:
        with Recorder():
            yield
    finally:
        for mod, g, fn in patched:
            setattr(mod, g, fn)


def _never(*_args: Any, **_kwargs: Any) -> bool:
    return False


def _keep_grad_stride(call: Call, grad: Any) -> None:
    call.grad_stride = tuple(int(s) for s in grad.stride())


def first_tensor(out: Any, torch: Any) -> Any:
    """A call's first tensor output (an RNN's output before its states), or None."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, list | tuple):
        for v in out:
            found = first_tensor(v, torch)
            if found is not None:
                return found
    return None


@dataclass
class Matched:
    """The recorded calls matched to the trace's forward units of their name, in order."""

    calls: list[Call] = field(default_factory=list)
    unmatched: int = 0


Unit = tuple[str, str, tuple[tuple[int, ...], ...] | None, int]


def match(calls: list[Call], units: list[Unit]) -> Matched:
    """Each call paired with the next forward unit of its name (`units`: (name, class,
    input dims, key) in order) whose first tensor input has the call's first tensor's shape
    (einsum's follow its equation); the unit's class and key become the call's."""
    by_name: dict[str, list[tuple[str, tuple[tuple[int, ...], ...] | None, int]]] = {}
    for name, cls, dims, key in units:
        by_name.setdefault(name, []).append((cls, dims, key))
    pos: dict[str, int] = {}
    out = Matched()
    for c in calls:
        queue = by_name.get(c.name, [])
        i = pos.get(c.name, 0)
        first = next(iter(c.tensors()), None)
        while i < len(queue):
            cls, dims, key = queue[i]
            i += 1
            shape = next((d for d in dims if d), ()) if dims is not None else None
            if shape is None or first is None or shape == first.shape:
                c.op_class, c.unit_key = cls, key
                out.calls.append(c)
                break
        else:
            out.unmatched += 1
        pos[c.name] = i
    return out
