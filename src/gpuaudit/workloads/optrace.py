"""The profiler's operator stacks, read once for both views of a step: which unit each
kernel (or each counted operator) belongs to, and that unit's class.

A chrome trace as `torch.profiler` exports it holds, per host thread, the operators as
nested intervals (`cpu_op`, and `user_annotation` for `record_function` and the optimizer's
`Optimizer.step#…`), the runtime's launches (`cuda_runtime`/`cuda_driver`, with a
`correlation` id) and the device's kernels and copies (with the same id). So:

- a kernel → its launch (by correlation) → the operators open on the launching thread at
  that moment, outermost first;
- in the forward, the unit is the outermost operator of that stack, aten's or another
  library's (`torchvision::roi_align`, whose own kernels and aten calls are one unit);
- in the backward (`autograd::engine::evaluate_function: XBackward0`, on the autograd
  engine's thread), the unit is the forward unit that created the node: the forward operator
  with the node's `Sequence number`, and its outermost operator ancestor;
- inside `Optimizer.step#…`, the optimizer;
- the forward units of each step, in order, get their classes from `opclass.classify_units`
  (the unfused attention path is found among its neighbours), and the backward inherits them.

The dispatch tally (`workloads.tally`) reads its own step's trace the same way: each counted
operator runs inside a `record_function` marker, and the marker's stack gives its unit.
"""

from __future__ import annotations

import bisect
import json
import os
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpuaudit.workloads.opclass import (
    MATMUL_DISTANCES,
    UnitCall,
    canonical,
    classify_units,
    op_class,
)

STEP_MARK = "gpuaudit.step"
EVALUATE = "autograd::engine::evaluate_function"
OPTIMIZER = "Optimizer.step"
COMPILED = ("Torch-Compiled Region", "CompiledFunction", "## Call CompiledFxGraph")
# namespaces of operators that are torch's own machinery, not a library's operator
MACHINERY = {"aten", "autograd", "torch", "profiler", "prim", "prims", "inductor"}


@dataclass
class OpEvent:
    name: str
    tid: Any
    ts: float
    end: float
    args: dict[str, Any]
    parent: OpEvent | None = None

    @property
    def is_aten(self) -> bool:
        return self.name.startswith("aten::")

    @property
    def is_custom(self) -> bool:
        """An operator of another library (torchvision::roi_align, c10d's collectives, a
        torch.library op): one unit with whatever aten operators it calls."""
        ns, sep, _ = self.name.partition("::")
        return bool(sep) and ns not in MACHINERY

    @property
    def is_op(self) -> bool:
        return self.is_aten or self.is_custom


@dataclass(frozen=True)
class Attribution:
    """What launched a kernel or dispatched an operator: its unit's class and canonical
    name, whether it is the backward's, and the forward unit event (None for the optimizer,
    a backward node without a forward operator, or nothing at all)."""

    op_class: str
    unit: str
    backward: bool = False
    event: OpEvent | None = None


@dataclass
class OpTree:
    """Every host thread's operators, nested, with the forward units' classes per step."""

    by_tid: dict[Any, list[OpEvent]] = field(default_factory=dict)
    starts: dict[Any, list[float]] = field(default_factory=dict)
    forward_of_seq: dict[int, OpEvent] = field(default_factory=dict)
    unit_class: dict[int, str] = field(default_factory=dict)  # id(unit event) → class
    steps: list[OpEvent] = field(default_factory=list)  # the STEP_MARK annotations

    def enclosing(self, tid: Any, ts: float) -> OpEvent | None:
        """The innermost operator open on `tid` at `ts`."""
        starts = self.starts.get(tid)
        if not starts:
            return None
        i = bisect.bisect_right(starts, ts) - 1
        ev = self.by_tid[tid][i] if i >= 0 else None
        while ev is not None and ev.end < ts:
            ev = ev.parent
        return ev


def chain(ev: OpEvent | None) -> list[OpEvent]:
    """`ev` and its ancestors, outermost first."""
    out = []
    while ev is not None:
        out.append(ev)
        ev = ev.parent
    return out[::-1]


def _outermost_op(ev: OpEvent) -> OpEvent | None:
    return next((e for e in chain(ev) if e.is_op), None)


def exported(prof: Any) -> list[dict[str, Any]]:
    """A finished torch.profiler session's chrome trace events (the profiler writes them only
    to a file)."""
    fd, path = tempfile.mkstemp(suffix=".json", prefix="gpuaudit-trace-")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            return list(json.load(f).get("traceEvents", []))
    finally:
        os.unlink(path)


def build(events: Iterable[dict[str, Any]]) -> OpTree:
    """The operator tree of a chrome trace's host events (module docstring)."""
    tree = OpTree()
    raw: dict[Any, list[OpEvent]] = defaultdict(list)
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("cpu_op", "user_annotation"):
            continue
        ts = float(e.get("ts", 0.0))
        ev = OpEvent(str(e.get("name", "")), e.get("tid"), ts, ts + float(e.get("dur", 0.0)),
                     e.get("args") or {})
        raw[ev.tid].append(ev)
    for tid, evs in raw.items():
        evs.sort(key=lambda v: (v.ts, -v.end))
        stack: list[OpEvent] = []
        for ev in evs:
            while stack and stack[-1].end < ev.end - 1e-3:
                stack.pop()
            ev.parent = stack[-1] if stack else None
            stack.append(ev)
        tree.by_tid[tid] = evs
        tree.starts[tid] = [v.ts for v in evs]
    # An operator records the sequence number the next autograd node will take, so the ops
    # that create none (a buffer's `num_batches_tracked.add_(1)`, integer indices) share it
    # with the one that does, which comes last: the last forward op of a number is its node's.
    for evs in tree.by_tid.values():
        for ev in evs:
            if ev.name.startswith(STEP_MARK) and ev.parent is None:
                tree.steps.append(ev)
            seq = ev.args.get("Sequence number")
            if seq is None or not ev.is_op or _in_backward(ev):
                continue
            unit = _outermost_op(ev)
            if unit is not None:
                tree.forward_of_seq[int(seq)] = unit
    tree.steps.sort(key=lambda v: v.ts)
    _classify(tree)
    return tree


def _in_backward(ev: OpEvent) -> bool:
    return any(e.name.startswith(EVALUATE) for e in chain(ev))


def _in_optimizer(ev: OpEvent) -> bool:
    return any(e.name.startswith(OPTIMIZER) for e in chain(ev))


def dims(ev: OpEvent) -> tuple[tuple[int, ...], ...] | None:
    """The shapes of an operator's inputs in order, () for one that is no tensor; a tensor
    list's (einsum's operands, cat's) each in its place."""
    dims = ev.args.get("Input Dims")
    if not isinstance(dims, list):
        return None
    out: list[tuple[int, ...]] = []
    for d in dims:
        if isinstance(d, list) and all(isinstance(x, int) for x in d):
            out.append(tuple(d))
        elif isinstance(d, list) and d and all(
                isinstance(t, list) and all(isinstance(x, int) for x in t) for t in d):
            out.extend(tuple(t) for t in d)
        else:
            out.append(())
    return tuple(out)


def forward_units(tree: OpTree) -> list[list[OpEvent]]:
    """Each step's forward units in order (one list for a trace without step marks)."""
    units = [ev for evs in tree.by_tid.values() for ev in evs
             if ev.is_op and _outermost_op(ev) is ev and not _in_backward(ev)
             and not _in_optimizer(ev)]
    units.sort(key=lambda v: v.ts)
    if not tree.steps:
        return [units]
    out: list[list[OpEvent]] = [[] for _ in tree.steps]
    starts = [s.ts for s in tree.steps]
    for ev in units:
        i = bisect.bisect_right(starts, ev.ts) - 1
        if i >= 0 and ev.ts <= tree.steps[i].end:
            out[i].append(ev)
    return out


# the composite units whose product `_matmul_product` reads: the matmul each runs as, and
# its operands' rank
_RUNS_AS = {"einsum": ("aten::bmm", 3), **dict.fromkeys(MATMUL_DISTANCES, ("aten::mm", 2))}


def _matmul_product(tree: OpTree, unit: OpEvent) -> tuple[int, ...] | None:
    """The last two dimensions of the product of the matmul a composite unit ran as: an
    einsum's first bmm (einsum contracts through bmm, the output's trailing dimensions its
    rows and columns; the profiler does not record the equation), a pairwise distance's mm
    (cdist's Euclidean path). None where it ran none."""
    if (runs_as := _RUNS_AS.get(canonical(unit.name))) is None:
        return None
    inner, rank = runs_as
    evs = tree.by_tid[unit.tid]
    for ev in evs[bisect.bisect_left(tree.starts[unit.tid], unit.ts):]:
        if ev.ts > unit.end:
            break
        if ev.name == inner:
            d = dims(ev)
            if d and len(d) >= 2 and len(d[0]) == rank and len(d[1]) == rank:
                return d[0][-2], d[1][-1]
            return None
    return None


def _classify(tree: OpTree) -> None:
    for units in forward_units(tree):
        calls = [UnitCall(canonical(u.name), dims(u), _matmul_product(tree, u)) for u in units]
        for u, cls in zip(units, classify_units(calls), strict=True):
            tree.unit_class[id(u)] = cls


def attribute(tree: OpTree, ev: OpEvent | None, own: str | None = None) -> Attribution:
    """The unit of whatever `ev` (the innermost operator open when it happened) belongs to;
    `own` names the operator itself where no unit holds it (the tally's dispatched op)."""
    stack = chain(ev)
    for i, e in enumerate(stack):
        if e.name.startswith(OPTIMIZER):
            inner = next((x for x in stack if x.is_aten), None)
            return Attribution("optimizer", canonical(inner.name) if inner else
                               (own or "step"), event=None)
        if e.name.startswith(EVALUATE):
            seq = e.args.get("Sequence number")
            fwd = tree.forward_of_seq.get(int(seq)) if seq is not None else None
            if fwd is not None:
                return Attribution(tree.unit_class.get(id(fwd), op_class(fwd.name)),
                                   canonical(fwd.name), backward=True, event=fwd)
            # a node no forward operator made (a Python autograd Function's backward, a
            # reentrant checkpoint's recomputation, AccumulateGrad): its unit, each of its
            # operators in its own class (a hand-written backward's mm is a GEMM)
            node = e.name.split(": ", 1)[-1].rsplit("::", 1)[-1]
            inner = next((x for x in stack[i + 1:] if x.is_op), None)
            cls = (op_class(inner.name) if inner is not None else
                   op_class(own) if own is not None else "elementwise")
            return Attribution(cls, _snake(node), backward=True)
        if e.is_op:  # a custom op's own kernels and its aten operators' are its unit's
            name = canonical(e.name)
            cls = tree.unit_class.get(id(e), op_class(e.name))
            return Attribution(cls, name, event=e)
    if any(e.name.startswith(COMPILED) for e in stack):
        return Attribution("elementwise", "compiled")
    if own is not None:
        return Attribution(op_class(own), canonical(own))
    return Attribution("unattributed", "unattributed")


def _snake(name: str) -> str:
    """A backward node's name as a unit name: "AccumulateGrad" → "accumulate_grad"."""
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and not name[i - 1].isupper():
            out.append("_")
        out.append(ch.lower())
    return "".join(out)
