"""PromQL's syntax tree as the alert rules' subset has it: the nodes, the operators and
functions with their types, the errors, and the durations written in it."""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

Labels = tuple[tuple[str, str], ...]  # sorted by name; "__name__" holds the metric name
Vector = list[tuple[Labels, float]]
Points = list[tuple[float, float]]  # (unix time, value), oldest first
Matrix = list[tuple[Labels, Points]]

NAME = "__name__"


class ExprError(Exception):
    """A rule expression outside PromQL or outside the subset evaluated here; `pos` is the
    offset in the expression text."""

    def __init__(self, message: str, pos: int = 0) -> None:
        super().__init__(message)
        self.pos = pos


class EvalError(Exception):
    """An expression that parsed but cannot be computed on this data (e.g. two series match
    one on the other side)."""


# --- durations ---------------------------------------------------------------------------

_DURATION_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_ORDER = ("y", "w", "d", "h", "m", "s", "ms")
_UNIT_S = {"y": 365 * 86400.0, "w": 7 * 86400.0, "d": 86400.0, "h": 3600.0, "m": 60.0,
           "s": 1.0, "ms": 0.001}


def parse_duration(text: str) -> float:
    """Seconds in a Prometheus duration: units y w d h m s ms, largest first, each at most
    once ("1h30m"); "0" alone is zero."""
    if text == "0":
        return 0.0
    if not text:
        raise ValueError("empty duration")
    pos, total, last = 0, 0.0, -1
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        if m is None:
            raise ValueError(f"not a valid duration string: {text!r}")
        unit = _UNIT_ORDER.index(m[2])
        if unit <= last:
            raise ValueError(f"not a valid duration string: {text!r} (units must go from "
                             "largest to smallest, each once)")
        last = unit
        total += int(m[1]) * _UNIT_S[m[2]]
        pos = m.end()
    return total


# --- syntax tree -------------------------------------------------------------------------

@dataclass(frozen=True)
class Matcher:
    label: str
    op: str  # = != =~ !~
    value: str
    regex: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    def matches(self, value: str) -> bool:
        if self.op == "=":
            return value == self.value
        if self.op == "!=":
            return value != self.value
        assert self.regex is not None
        hit = self.regex.fullmatch(value) is not None
        return hit if self.op == "=~" else not hit


@dataclass(frozen=True)
class Number:
    value: float
    type = "scalar"


@dataclass(frozen=True)
class Selector:
    name: str
    matchers: tuple[Matcher, ...]
    range_s: float | None = None  # set: a range vector `name{...}[range]`

    @property
    def type(self) -> str:
        return "vector" if self.range_s is None else "matrix"


@dataclass(frozen=True)
class Call:
    func: str
    args: tuple[Node, ...]

    @property
    def type(self) -> str:
        return FUNCS[self.func][1]


@dataclass(frozen=True)
class Neg:
    operand: Node

    @property
    def type(self) -> str:
        return self.operand.type


@dataclass(frozen=True)
class Binary:
    op: str
    lhs: Node
    rhs: Node
    bool_mod: bool = False
    on: tuple[str, ...] | None = None  # on(...): match on these labels only
    ignoring: tuple[str, ...] = ()  # ignoring(...): match on all labels but these

    @property
    def type(self) -> str:
        return "scalar" if self.lhs.type == self.rhs.type == "scalar" else "vector"


Node = Number | Selector | Call | Neg | Binary

COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
}
ARITHMETIC: dict[str, Callable[[float, float], float]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "%": math.fmod, "^": math.pow,
}
SET_OPS = ("and", "or", "unless")
PRECEDENCE = {"or": 1, "and": 2, "unless": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3,
               ">=": 3, "+": 4, "-": 4, "*": 5, "/": 5, "%": 5, "^": 6}

RANGE_FUNCS = ("avg_over_time", "min_over_time", "max_over_time", "sum_over_time",
                "count_over_time", "last_over_time", "increase", "rate", "delta", "changes",
                "resets")
# name → (argument types, result type)
FUNCS: dict[str, tuple[tuple[str, ...], str]] = {
    **{f: (("matrix",), "vector") for f in RANGE_FUNCS},
    "abs": (("vector",), "vector"),
    "time": ((), "scalar"),
}
# PromQL's other names: recognised, so that the error says "not supported here" rather than
# "unknown" (a rule that works in Prometheus is not a typo).
OTHER_PROMQL_FUNCS = frozenset((
    "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil",
    "clamp", "clamp_max", "clamp_min", "cos", "cosh", "day_of_month", "day_of_week",
    "day_of_year", "days_in_month", "deg", "deriv", "double_exponential_smoothing", "exp",
    "floor", "histogram_avg", "histogram_count", "histogram_fraction", "histogram_quantile",
    "histogram_stddev", "histogram_stdvar", "histogram_sum", "holt_winters", "hour", "idelta",
    "info", "irate", "label_join", "label_replace", "ln", "log10", "log2", "mad_over_time",
    "minute", "month", "pi", "predict_linear", "present_over_time", "quantile_over_time",
    "rad", "round", "scalar", "sgn", "sin", "sinh", "sort", "sort_by_label",
    "sort_by_label_desc", "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time", "tan",
    "tanh", "timestamp", "vector", "year",
))
AGGREGATIONS = frozenset((
    "avg", "bottomk", "count", "count_values", "group", "limit_ratio", "limitk", "max", "min",
    "quantile", "stddev", "stdvar", "sum", "topk",
))
KEYWORDS = frozenset((
    "and", "or", "unless", "by", "without", "on", "ignoring", "bool", "offset", "group_left",
    "group_right",
))


def type_name(t: str) -> str:
    return {"matrix": "range vector", "vector": "instant vector"}.get(t, t)


def selectors(node: Node) -> Iterable[Selector]:
    if isinstance(node, Selector):
        yield node
    elif isinstance(node, Call):
        for arg in node.args:
            yield from selectors(arg)
    elif isinstance(node, Neg):
        yield from selectors(node.operand)
    elif isinstance(node, Binary):
        yield from selectors(node.lhs)
        yield from selectors(node.rhs)
