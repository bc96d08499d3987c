"""Evaluating a parsed rule over in-memory series (`evaluate`), with Prometheus's semantics
(the package's docstring says which)."""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .syntax import (
    ARITHMETIC,
    COMPARISONS,
    NAME,
    SET_OPS,
    Binary,
    Call,
    EvalError,
    Labels,
    Matcher,
    Matrix,
    Neg,
    Node,
    Number,
    Points,
    Selector,
    Vector,
)

# --- evaluation --------------------------------------------------------------------------

# metric name → labels → (unix time, value) points, oldest first
History = Mapping[str, Mapping[Labels, Sequence[tuple[float, float]]]]


def evaluate(node: Node, t: float, now: Mapping[str, Vector], history: History) -> Vector:
    """What `node` gives at unix time `t`, as an instant vector (a scalar becomes one sample
    without labels, as Prometheus makes a rule's result). `now` holds the series fed at `t`
    by metric name; `history` the points, none after `t`, of each metric read over a range.
    EvalError when the data cannot be computed on."""
    return _vector(node, _Ctx(t, now, history))


@dataclass(frozen=True)
class _Ctx:
    t: float
    now: Mapping[str, Vector]
    history: History


def _matches(matchers: Sequence[Matcher], labels: Labels) -> bool:
    have = dict(labels)
    # A label a series lacks reads as "", as in Prometheus.
    return all(m.matches(have.get(m.label, "")) for m in matchers)


def _drop_name(labels: Labels) -> Labels:
    return tuple(kv for kv in labels if kv[0] != NAME)


def _select(sel: Selector, ctx: _Ctx) -> Vector:
    return [(lab, v) for lab, v in ctx.now.get(sel.name, ()) if _matches(sel.matchers, lab)]


_TIME = operator.itemgetter(0)


def _select_range(sel: Selector, ctx: _Ctx) -> Matrix:
    assert sel.range_s is not None
    start = ctx.t - sel.range_s
    out: Matrix = []
    for lab, points in ctx.history.get(sel.name, {}).items():
        if _matches(sel.matchers, lab):
            # Points are in time order and none is after t: skip those at or before start
            # (many, when the metric is also kept for a longer range).
            skip = bisect.bisect_right(points, start, key=_TIME)
            if skip < len(points):
                out.append((lab, list(itertools.islice(points, skip, None))))
    return out


def _extrapolated(points: Points, start: float, end: float, counter: bool,
                  per_second: bool) -> float | None:
    """Prometheus's extrapolatedRate (rate, increase, delta), line for line."""
    if len(points) < 2:
        return None
    first_t, first_v = points[0]
    last_t, last_v = points[-1]
    result = last_v - first_v
    if counter:
        prev = first_v
        for _, v in points[1:]:
            if v < prev:
                result += prev  # a counter reset: the count before it still happened
            prev = v
    sampled = last_t - first_t
    if sampled <= 0:
        return None
    to_start = first_t - start
    to_end = end - last_t
    average_step = sampled / (len(points) - 1)
    if counter and result > 0 and first_v >= 0:
        # A counter is never negative: extrapolate back no further than to its zero.
        to_start = min(to_start, sampled * (first_v / result))
    threshold = average_step * 1.1
    interval = sampled
    interval += to_start if to_start < threshold else average_step / 2
    interval += to_end if to_end < threshold else average_step / 2
    result *= interval / sampled
    return result / (end - start) if per_second else result


def _skipping_nan(pick: Callable[[list[float]], float]) -> Callable[[list[float]], float]:
    """`pick` over the values that are not NaN; NaN if that is all there is, as Prometheus's
    min_over_time and max_over_time do."""
    def over(values: list[float]) -> float:
        clean = list(itertools.filterfalse(math.isnan, values))
        return pick(clean) if clean else math.nan
    return over


def _changes(values: list[float]) -> float:
    return float(sum(1 for a, b in itertools.pairwise(values)
                     if not (a == b or (math.isnan(a) and math.isnan(b)))))


_OVER_TIME: dict[str, Callable[[list[float]], float]] = {
    "avg_over_time": lambda vs: math.fsum(vs) / len(vs),
    "min_over_time": _skipping_nan(min),
    "max_over_time": _skipping_nan(max),
    "sum_over_time": math.fsum,
    "count_over_time": lambda vs: float(len(vs)),
    "last_over_time": lambda vs: vs[-1],
    "changes": _changes,
    "resets": lambda vs: float(sum(1 for a, b in itertools.pairwise(vs) if b < a)),
}
# name → (counter, per second)
_RATES = {"increase": (True, False), "rate": (True, True), "delta": (False, False)}


def _call(node: Call, ctx: _Ctx) -> Vector | float:
    if node.func == "time":
        return ctx.t
    if node.func == "abs":
        return [(_drop_name(lab), abs(v)) for lab, v in _vector(node.args[0], ctx)]
    sel = node.args[0]
    assert isinstance(sel, Selector) and sel.range_s is not None
    out: Vector = []
    for lab, points in _select_range(sel, ctx):
        if node.func in _RATES:
            counter, per_second = _RATES[node.func]
            value = _extrapolated(points, ctx.t - sel.range_s, ctx.t, counter, per_second)
            if value is None:
                continue
        else:
            value = _OVER_TIME[node.func]([v for _, v in points])
        keep_name = node.func == "last_over_time"
        out.append((lab if keep_name else _drop_name(lab), value))
    return out


def _arith(op: str, a: float, b: float) -> float:
    try:
        return ARITHMETIC[op](a, b)
    except ZeroDivisionError:
        if op == "/" and a != 0 and not math.isnan(a):
            return math.copysign(math.inf, a) * math.copysign(1.0, b)
        return math.nan
    except (OverflowError, ValueError):
        return math.inf if op == "^" and a > 0 else math.nan


def _signature(labels: Labels, node: Binary) -> Labels:
    if node.on is not None:
        return tuple(kv for kv in labels if kv[0] in node.on)
    return tuple(kv for kv in labels if kv[0] != NAME and kv[0] not in node.ignoring)


def _set_op(node: Binary, lhs: Vector, rhs: Vector) -> Vector:
    right = {_signature(lab, node) for lab, _ in rhs}
    if node.op == "and":
        return [(lab, v) for lab, v in lhs if _signature(lab, node) in right]
    if node.op == "unless":
        return [(lab, v) for lab, v in lhs if _signature(lab, node) not in right]
    left = {_signature(lab, node) for lab, _ in lhs}
    return lhs + [(lab, v) for lab, v in rhs if _signature(lab, node) not in left]


def _result_labels(labels: Labels, node: Binary, drop_name: bool) -> Labels:
    if drop_name:
        labels = _drop_name(labels)
    if node.on is not None:
        return tuple(kv for kv in labels if kv[0] in node.on)
    return tuple(kv for kv in labels if kv[0] not in node.ignoring)


def _vector_vector(node: Binary, lhs: Vector, rhs: Vector) -> Vector:
    right: dict[Labels, float] = {}
    for lab, v in rhs:
        sig = _signature(lab, node)
        if sig in right:
            raise EvalError(f"found duplicate series for the match group {dict(sig)} on the "
                            "right hand-side of the operation; many-to-many matching not "
                            "allowed")
        right[sig] = v
    comparison = node.op in COMPARISONS
    drop_name = not comparison or node.bool_mod
    matched: set[Labels] = set()
    out: Vector = []
    for lab, lv in lhs:
        sig = _signature(lab, node)
        if sig not in right:
            continue
        rv = right[sig]
        if comparison and not node.bool_mod:
            if not COMPARISONS[node.op](lv, rv):
                continue
            value = lv
        elif comparison:
            value = float(COMPARISONS[node.op](lv, rv))
        else:
            value = _arith(node.op, lv, rv)
        if sig in matched:
            raise EvalError("multiple matches for labels: many-to-one matching must be "
                            "explicit (group_left/group_right)")
        matched.add(sig)
        out.append((_result_labels(lab, node, drop_name), value))
    return out


def _vector_scalar(node: Binary, vec: Vector, scalar: float, scalar_left: bool) -> Vector:
    out: Vector = []
    for lab, v in vec:
        a, b = (scalar, v) if scalar_left else (v, scalar)
        if node.op in COMPARISONS:
            hit = COMPARISONS[node.op](a, b)
            if node.bool_mod:
                out.append((_drop_name(lab), float(hit)))
            elif hit:
                out.append((lab, v))  # the vector's value, whichever side it was on
        else:
            out.append((_drop_name(lab), _arith(node.op, a, b)))
    return out


def _eval_binary(node: Binary, ctx: _Ctx) -> Vector | float:
    lhs, rhs = _eval(node.lhs, ctx), _eval(node.rhs, ctx)
    if isinstance(lhs, float) and isinstance(rhs, float):
        if node.op in COMPARISONS:
            return float(COMPARISONS[node.op](lhs, rhs))
        return _arith(node.op, lhs, rhs)
    if isinstance(lhs, float):
        return _vector_scalar(node, rhs, lhs, scalar_left=True)  # type: ignore[arg-type]
    if isinstance(rhs, float):
        return _vector_scalar(node, lhs, rhs, scalar_left=False)
    if node.op in SET_OPS:
        return _set_op(node, lhs, rhs)
    return _vector_vector(node, lhs, rhs)


def _eval(node: Node, ctx: _Ctx) -> Vector | float:
    if isinstance(node, Number):
        return node.value
    if isinstance(node, Selector):
        return _select(node, ctx)
    if isinstance(node, Call):
        return _call(node, ctx)
    if isinstance(node, Neg):
        value = _eval(node.operand, ctx)
        if isinstance(value, float):
            return -value
        return [(_drop_name(lab), -v) for lab, v in value]
    return _eval_binary(node, ctx)


def _vector(node: Node, ctx: _Ctx) -> Vector:
    value = _eval(node, ctx)
    # Prometheus turns a scalar rule result into one sample without labels.
    return [((), value)] if isinstance(value, float) else value
