"""Alert rules in Prometheus's rule-file format, evaluated in-process (`gpuaudit monitor --rules`).

The same file goes to a real Prometheus unchanged. Without one, this module loads it and
evaluates a documented subset of PromQL (docs/monitor-rules.md) over the series our exporter
exposes (`metrics.series`), with Prometheus's `for:` / `keep_firing_for:` semantics, so a rule
behaves the same wherever it runs.

Semantics kept from Prometheus (2.42 and 3.x), so that a rule tested here means the same there:
- An instant selector sees the series fed at this evaluation only: a series the sampler no
  longer yields is gone at once, as Prometheus's staleness markers make it after a scrape.
- A range selector `[d]` sees the samples in (t-d, t] (left-open, as in Prometheus 3; 2.x also
  took a sample exactly at t-d).
- rate/increase/delta extrapolate to the window's edges exactly as Prometheus does.
- `for:` counts from the first evaluation that returned the label set; an evaluation that
  does not return it drops a pending alert and resolves a firing one.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path

import yaml

from gpuaudit.errors import BadInputError
from gpuaudit.model import Alert

from .metrics import Series, metric_names

Labels = tuple[tuple[str, str], ...]  # sorted by name; "__name__" holds the metric name
Vector = list[tuple[Labels, float]]
Points = list[tuple[float, float]]  # (unix time, value), oldest first
Matrix = list[tuple[Labels, Points]]

NAME = "__name__"
SHIPPED_RULES = "alerts.yml"


def shipped_rules_path() -> Path:
    """gpuaudit's own rule file (`gpuaudit/data/alerts.yml`)."""
    return Path(str(resources.files("gpuaudit") / "data" / SHIPPED_RULES))


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


# --- expressions: lexer ------------------------------------------------------------------

class ExprError(Exception):
    """A rule expression outside PromQL or outside the subset evaluated here; `pos` is the
    offset in the expression text."""

    def __init__(self, message: str, pos: int = 0) -> None:
        super().__init__(message)
        self.pos = pos


class EvalError(Exception):
    """An expression that parsed but cannot be computed on this data (e.g. two series match
    one on the other side)."""


@dataclass(frozen=True)
class _Tok:
    kind: str  # num, str, ident, range, op, eof
    text: str
    pos: int
    num: float = 0.0


_NUMBER = re.compile(r"0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_OPS = ("==", "!=", "<=", ">=", "=~", "!~", "+", "-", "*", "/", "%", "^", "<", ">", "=",
        "(", ")", "{", "}", ",")
_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "r": "\r"}


def _lex_string(src: str, pos: int) -> tuple[str, int]:
    quote, out, i = src[pos], [], pos + 1
    while i < len(src):
        c = src[i]
        if c == quote:
            return "".join(out), i + 1
        if c == "\\" and quote != "`":
            nxt = src[i + 1:i + 2]
            if nxt not in _ESCAPES:
                raise ExprError(f"unknown escape sequence '\\{nxt}' in string", i)
            out.append(_ESCAPES[nxt])
            i += 2
            continue
        if c == "\n" and quote != "`":
            break
        out.append(c)
        i += 1
    raise ExprError("unterminated string", pos)


def _lex(src: str) -> list[_Tok]:
    toks: list[_Tok] = []
    i = 0
    while i < len(src):
        c = src[i]
        if c.isspace():
            i += 1
        elif c == "#":
            end = src.find("\n", i)
            i = len(src) if end < 0 else end
        elif c in "\"'`":
            text, end = _lex_string(src, i)
            toks.append(_Tok("str", text, i))
            i = end
        elif c == "[":
            end = src.find("]", i)
            if end < 0:
                raise ExprError("unclosed '['", i)
            toks.append(_Tok("range", src[i + 1:end].strip(), i))
            i = end + 1
        elif (m := _NUMBER.match(src, i)) and (c.isdigit() or c == "."):
            text = m.group()
            value = float(int(text, 16)) if text[:2].lower() == "0x" else float(text)
            toks.append(_Tok("num", text, i, value))
            i = m.end()
        elif m := _IDENT.match(src, i):
            text = m.group()
            if text.lower() in ("inf", "nan"):
                toks.append(_Tok("num", text, i, float(text.lower())))
            else:
                toks.append(_Tok("ident", text, i))
            i = m.end()
        else:
            op = next((o for o in _OPS if src.startswith(o, i)), None)
            if op is None:
                what = "'@' modifier" if c == "@" else f"character {c!r}"
                raise ExprError(f"unexpected {what}", i)
            toks.append(_Tok("op", op, i))
            i += len(op)
    toks.append(_Tok("eof", "", len(src)))
    return toks


# --- expressions: syntax tree ------------------------------------------------------------

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
        return _FUNCS[self.func][1]


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

_COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")
_ARITHMETIC = ("+", "-", "*", "/", "%", "^")
_SET_OPS = ("and", "or", "unless")
_PRECEDENCE = {"or": 1, "and": 2, "unless": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3,
               ">=": 3, "+": 4, "-": 4, "*": 5, "/": 5, "%": 5, "^": 6}

_RANGE_FUNCS = ("avg_over_time", "min_over_time", "max_over_time", "sum_over_time",
                "count_over_time", "last_over_time", "increase", "rate", "delta", "changes",
                "resets")
# name → (argument types, result type)
_FUNCS: dict[str, tuple[tuple[str, ...], str]] = {
    **{f: (("matrix",), "vector") for f in _RANGE_FUNCS},
    "abs": (("vector",), "vector"),
    "time": ((), "scalar"),
}
# PromQL's other names: recognised, so that the error says "not supported here" rather than
# "unknown" (a rule that works in Prometheus is not a typo).
_OTHER_PROMQL_FUNCS = frozenset((
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
_AGGREGATIONS = frozenset((
    "avg", "bottomk", "count", "count_values", "group", "limit_ratio", "limitk", "max", "min",
    "quantile", "stddev", "stdvar", "sum", "topk",
))
_KEYWORDS = frozenset((
    "and", "or", "unless", "by", "without", "on", "ignoring", "bool", "offset", "group_left",
    "group_right",
))


def _type_name(t: str) -> str:
    return {"matrix": "range vector", "vector": "instant vector"}.get(t, t)


# --- expressions: parser -----------------------------------------------------------------

class _Parser:
    def __init__(self, src: str) -> None:
        self.toks = _lex(src)
        self.i = 0

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def is_op(self, text: str) -> bool:
        tok = self.peek()
        return tok.kind == "op" and tok.text == text

    def is_word(self, *words: str) -> bool:
        tok = self.peek()
        return tok.kind == "ident" and tok.text.lower() in words

    def expect(self, text: str) -> _Tok:
        tok = self.take()
        if tok.kind != "op" or tok.text != text:
            raise ExprError(f"expected '{text}', found {_describe(tok)}", tok.pos)
        return tok

    def parse(self) -> Node:
        node = self.expr(0)
        tok = self.peek()
        if tok.kind != "eof":
            raise ExprError(f"unexpected {_describe(tok)}", tok.pos)
        return node

    def binop(self) -> str | None:
        tok = self.peek()
        if tok.kind == "op" and tok.text in _PRECEDENCE:
            return tok.text
        if tok.kind == "ident" and tok.text.lower() in _SET_OPS:
            return tok.text.lower()
        return None

    def expr(self, min_prec: int) -> Node:
        lhs = self.unary()
        while (op := self.binop()) is not None and _PRECEDENCE[op] >= min_prec:
            pos = self.take().pos
            bool_mod, on, ignoring = self.modifiers(op)
            # ^ is right-associative, everything else left-associative.
            rhs = self.expr(_PRECEDENCE[op] + (0 if op == "^" else 1))
            lhs = _binary(op, lhs, rhs, bool_mod, on, ignoring, pos)
        return lhs

    def unary(self) -> Node:
        if self.is_op("-") or self.is_op("+"):
            sign = self.take().text
            # Unary minus binds less tightly than ^: -2^2 is -4, as in PromQL.
            operand = self.expr(_PRECEDENCE["^"])
            if operand.type == "matrix":
                raise ExprError("unary minus needs a scalar or an instant vector", self.peek().pos)
            if sign == "+":
                return operand
            return Number(-operand.value) if isinstance(operand, Number) else Neg(operand)
        return self.primary()

    def modifiers(self, op: str) -> tuple[bool, tuple[str, ...] | None, tuple[str, ...]]:
        bool_mod, on, ignoring = False, None, ()
        if self.is_word("bool"):
            tok = self.take()
            if op not in _COMPARISONS:
                raise ExprError("bool modifier can only be used on comparison operators",
                                tok.pos)
            bool_mod = True
        if self.is_word("on", "ignoring"):
            which = self.take().text.lower()
            labels = self.label_list()
            if which == "on":
                on = labels
            else:
                ignoring = labels
        if self.is_word("group_left", "group_right"):
            raise ExprError("group_left/group_right (many-to-one matching) is not supported "
                            "in-process", self.peek().pos)
        return bool_mod, on, ignoring

    def label_list(self) -> tuple[str, ...]:
        self.expect("(")
        labels: list[str] = []
        while not self.is_op(")"):
            tok = self.take()
            if tok.kind != "ident":
                raise ExprError(f"expected a label name, found {_describe(tok)}", tok.pos)
            labels.append(tok.text)
            if not self.is_op(")"):
                self.expect(",")
        self.take()
        return tuple(labels)

    def primary(self) -> Node:
        tok = self.take()
        if tok.kind == "num":
            return Number(tok.num)
        if tok.kind == "op" and tok.text == "(":
            node = self.expr(0)
            self.expect(")")
            if self.peek().kind == "range":
                raise ExprError("subqueries (a range after an expression) are not supported "
                                "in-process", self.peek().pos)
            return node
        if tok.kind == "ident":
            word = tok.text.lower()
            if tok.text in _AGGREGATIONS:
                raise ExprError(f"aggregation '{tok.text}' is not supported in-process "
                                "(see docs/monitor-rules.md)", tok.pos)
            if word in _KEYWORDS:
                raise ExprError(f"unexpected keyword '{tok.text}'", tok.pos)
            if self.is_op("("):
                return self.call(tok)
            return self.selector(tok)
        if tok.kind == "op" and tok.text == "{":
            raise ExprError("a selector needs a metric name here (write name{...})", tok.pos)
        if tok.kind == "str":
            raise ExprError("a string is not an expression here", tok.pos)
        raise ExprError(f"unexpected {_describe(tok)}", tok.pos)

    def call(self, tok: _Tok) -> Node:
        name = tok.text
        if name not in _FUNCS:
            if name in _OTHER_PROMQL_FUNCS:
                raise ExprError(f"function '{name}' is not supported in-process "
                                "(see docs/monitor-rules.md)", tok.pos)
            raise ExprError(f"unknown function '{name}'", tok.pos)
        self.expect("(")
        args: list[Node] = []
        while not self.is_op(")"):
            args.append(self.expr(0))
            if not self.is_op(")"):
                self.expect(",")
        self.take()
        want = _FUNCS[name][0]
        if len(args) != len(want):
            raise ExprError(f"function '{name}' takes {len(want)} argument(s), got {len(args)}",
                            tok.pos)
        for arg, t in zip(args, want, strict=True):
            if arg.type != t:
                raise ExprError(f"function '{name}' needs a {_type_name(t)}, got a "
                                f"{_type_name(arg.type)}", tok.pos)
        return Call(name, tuple(args))

    def selector(self, tok: _Tok) -> Node:
        matchers: list[Matcher] = []
        if self.is_op("{"):
            self.take()
            while not self.is_op("}"):
                matchers.append(self.matcher())
                if not self.is_op("}"):
                    self.expect(",")
            self.take()
        range_s = None
        if self.peek().kind == "range":
            rng = self.take()
            if ":" in rng.text:
                raise ExprError("subqueries ([range:step]) are not supported in-process",
                                rng.pos)
            try:
                range_s = parse_duration(rng.text)
            except ValueError as exc:
                raise ExprError(f"bad range [{rng.text}]: {exc}", rng.pos) from None
            if range_s <= 0:
                raise ExprError(f"range [{rng.text}] must be longer than zero", rng.pos)
        if self.is_word("offset"):
            raise ExprError("offset is not supported in-process", self.peek().pos)
        return Selector(tok.text, tuple(matchers), range_s)

    def matcher(self) -> Matcher:
        label = self.take()
        if label.kind != "ident":
            raise ExprError(f"expected a label name, found {_describe(label)}", label.pos)
        op = self.take()
        if op.kind != "op" or op.text not in ("=", "!=", "=~", "!~"):
            raise ExprError(f"expected a label matcher (=, !=, =~, !~), found {_describe(op)}",
                            op.pos)
        value = self.take()
        if value.kind != "str":
            raise ExprError(f"expected a quoted string, found {_describe(value)}", value.pos)
        regex = None
        if op.text in ("=~", "!~"):
            try:
                re.compile(value.text)  # alone first, so an error's position is the user's
                # Prometheus anchors regexes at both ends and lets '.' match a newline.
                regex = re.compile(f"(?:{value.text})", re.DOTALL)
            except re.error as exc:
                raise ExprError(f"bad regex {value.text!r}: {exc}", value.pos) from None
        return Matcher(label.text, op.text, value.text, regex)


def _describe(tok: _Tok) -> str:
    if tok.kind == "eof":
        return "end of expression"
    if tok.kind == "range":
        return f"'[{tok.text}]'"
    return f"'{tok.text}'"


def _binary(op: str, lhs: Node, rhs: Node, bool_mod: bool, on: tuple[str, ...] | None,
            ignoring: tuple[str, ...], pos: int) -> Binary:
    types = (lhs.type, rhs.type)
    if "matrix" in types:
        raise ExprError(f"operator '{op}' needs instant vectors or scalars, not a range vector "
                        "(wrap it in a function such as avg_over_time)", pos)
    if op in _SET_OPS and types != ("vector", "vector"):
        raise ExprError(f"set operator '{op}' needs an instant vector on both sides", pos)
    if op in _COMPARISONS and types == ("scalar", "scalar") and not bool_mod:
        raise ExprError("comparisons between scalars must use the bool modifier", pos)
    if (on is not None or ignoring) and types != ("vector", "vector"):
        raise ExprError("on()/ignoring() only apply between two instant vectors", pos)
    return Binary(op, lhs, rhs, bool_mod, on, ignoring)


def parse_expr(text: str) -> Node:
    """The syntax tree of a rule expression, or ExprError."""
    return _Parser(text).parse()


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


# --- expressions: evaluation -------------------------------------------------------------

@dataclass(frozen=True)
class _Ctx:
    t: float
    now: Mapping[str, Vector]
    history: Mapping[str, Mapping[Labels, deque[tuple[float, float]]]]


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


def _nan_max(values: list[float]) -> float:
    # NaN is skipped unless it is all there is, as Prometheus's max_over_time does.
    clean = list(itertools.filterfalse(math.isnan, values))
    return max(clean) if clean else math.nan


def _nan_min(values: list[float]) -> float:
    clean = list(itertools.filterfalse(math.isnan, values))
    return min(clean) if clean else math.nan


def _changes(values: list[float]) -> float:
    return float(sum(1 for a, b in itertools.pairwise(values)
                     if not (a == b or (math.isnan(a) and math.isnan(b)))))


_OVER_TIME: dict[str, Callable[[list[float]], float]] = {
    "avg_over_time": lambda vs: math.fsum(vs) / len(vs),
    "min_over_time": _nan_min,
    "max_over_time": _nan_max,
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
            value = _OVER_TIME[node.func](list(map(operator.itemgetter(1), points)))
        keep_name = node.func == "last_over_time"
        out.append((lab if keep_name else _drop_name(lab), value))
    return out


def _arith(op: str, a: float, b: float) -> float:
    try:
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return a / b
        if op == "%":
            return math.fmod(a, b)
        return math.pow(a, b)
    except ZeroDivisionError:
        if op == "/" and a != 0 and not math.isnan(a):
            return math.copysign(math.inf, a) * math.copysign(1.0, b)
        return math.nan
    except (OverflowError, ValueError):
        return math.inf if op == "^" and a > 0 else math.nan


def _compare(op: str, a: float, b: float) -> bool:
    return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b,
            ">=": a >= b}[op]


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
    comparison = node.op in _COMPARISONS
    drop_name = not comparison or node.bool_mod
    matched: set[Labels] = set()
    out: Vector = []
    for lab, lv in lhs:
        sig = _signature(lab, node)
        if sig not in right:
            continue
        rv = right[sig]
        if comparison and not node.bool_mod:
            if not _compare(node.op, lv, rv):
                continue
            value = lv
        elif comparison:
            value = float(_compare(node.op, lv, rv))
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
        if node.op in _COMPARISONS:
            hit = _compare(node.op, a, b)
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
        if node.op in _COMPARISONS:
            return float(_compare(node.op, lhs, rhs))
        return _arith(node.op, lhs, rhs)
    if isinstance(lhs, float):
        return _vector_scalar(node, rhs, lhs, scalar_left=True)  # type: ignore[arg-type]
    if isinstance(rhs, float):
        return _vector_scalar(node, lhs, rhs, scalar_left=False)
    if node.op in _SET_OPS:
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


# --- annotation and label templates ------------------------------------------------------

def go_float(v: float) -> str:
    """A float as Go's fmt prints it (%v), which is what Prometheus shows for $value."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == int(v) and abs(v) < 1e21:
        return str(int(v))
    return repr(v)


def _g4(v: float, suffix: str = "") -> str:
    if math.isnan(v) or math.isinf(v):
        return go_float(v)
    return f"{v:.4g}{suffix}"


def humanize(v: float) -> str:
    if v == 0 or math.isnan(v) or math.isinf(v):
        return _g4(v)
    prefix = ""
    if abs(v) >= 1:
        for p in ("k", "M", "G", "T", "P", "E", "Z", "Y"):
            if abs(v) < 1000:
                break
            prefix, v = p, v / 1000
    else:
        for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
            if abs(v) >= 1:
                break
            prefix, v = p, v * 1000
    return _g4(v, prefix)


def humanize1024(v: float) -> str:
    if abs(v) <= 1 or math.isnan(v) or math.isinf(v):
        return _g4(v)
    prefix = ""
    for p in ("ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"):
        if abs(v) < 1024:
            break
        prefix, v = p, v / 1024
    return _g4(v, prefix)


def humanize_duration(v: float) -> str:
    if math.isnan(v) or math.isinf(v):
        return _g4(v)
    if v == 0:
        return _g4(v, "s")
    if abs(v) >= 1:
        sign = "-" if v < 0 else ""
        whole = int(abs(v))
        s, m, h, d = whole % 60, whole // 60 % 60, whole // 3600 % 24, whole // 86400
        if d:
            return f"{sign}{d}d {h}h {m}m {s}s"
        if h:
            return f"{sign}{h}h {m}m {s}s"
        if m:
            return f"{sign}{m}m {s}s"
        return f"{sign}{_g4(abs(v), 's')}"
    prefix = ""
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(v) >= 1:
            break
        prefix, v = p, v * 1000
    return _g4(v, prefix + "s")


_TEMPLATE_FUNCS: dict[str, Callable[[float], str]] = {
    "humanize": humanize,
    "humanize1024": humanize1024,
    "humanizePercentage": lambda v: _g4(v * 100, "%"),
    "humanizeDuration": humanize_duration,
}
_ACTION = re.compile(r"\{\{(-?)(.*?)(-?)\}\}", re.DOTALL)
_TERM = re.compile(r"^(?:\$value|\.Value|(?:\$labels|\.Labels)\.([a-zA-Z_][a-zA-Z0-9_]*)"
                   r"|index\s+(?:\$labels|\.Labels)\s+\"([^\"]*)\")$")


@dataclass(frozen=True)
class Template:
    """A Prometheus annotation/label template, within the subset: {{ $labels.NAME }},
    {{ $value }} (also .Labels.NAME, .Value, index $labels "NAME"), each optionally piped
    through humanize, humanize1024, humanizePercentage or humanizeDuration."""

    text: str
    # literal text, or (label name or None for $value, functions to pipe through)
    parts: tuple[str | tuple[str | None, tuple[str, ...]], ...]

    def render(self, labels: Mapping[str, str], value: float) -> str:
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            label, funcs = part
            if label is None:
                text = go_float(value)
                num: float | None = value
            else:
                # Go templates print a missing map key as "<no value>".
                text = labels.get(label, "<no value>")
                num = _to_float(text)
            for f in funcs:
                if num is not None:
                    text = _TEMPLATE_FUNCS[f](num)
                    num = None
            out.append(text)
        return "".join(out)


def _to_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_template(text: str) -> Template:
    parts: list[str | tuple[str | None, tuple[str, ...]]] = []
    pos = 0
    for m in _ACTION.finditer(text):
        literal = text[pos:m.start()]
        if m[1]:
            literal = literal.rstrip()
        parts.append(literal)
        parts.append(_parse_action(m[2].strip(), m.group(0)))
        pos = m.end()
        if m[3]:
            while pos < len(text) and text[pos].isspace():
                pos += 1
    parts.append(text[pos:])
    if any("{{" in p or "}}" in p for p in parts if isinstance(p, str)):
        raise ValueError("unbalanced '{{' or '}}' in template")
    return Template(text, tuple(p for p in parts if p != ""))


def _parse_action(body: str, whole: str) -> tuple[str | None, tuple[str, ...]]:
    term, *funcs = [s.strip() for s in body.split("|")]
    m = _TERM.match(term)
    if m is None or any(f not in _TEMPLATE_FUNCS for f in funcs):
        raise ValueError(f"unsupported template action {whole!r} (supported: $labels.NAME, "
                         f"$value, piped to {', '.join(_TEMPLATE_FUNCS)})")
    label = m[1] if m[1] is not None else m[2]  # both None: $value
    return label, tuple(funcs)


# --- rule files --------------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    name: str
    group: str
    expr: str
    node: Node = field(repr=False)
    for_s: float = 0.0
    keep_firing_for_s: float = 0.0
    labels: tuple[tuple[str, Template], ...] = ()
    annotations: tuple[tuple[str, Template], ...] = ()
    where: str = ""  # "file:line" of the rule, for messages


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]
    source: str = ""

    def range_by_metric(self) -> dict[str, float]:
        """The longest range each metric is read over: what the evaluator must remember."""
        ranges: dict[str, float] = {}
        for rule in self.rules:
            for sel in selectors(rule.node):
                if sel.range_s is not None:
                    ranges[sel.name] = max(ranges.get(sel.name, 0.0), sel.range_s)
        return ranges

    def unknown_metrics(self, known: Iterable[str] | None = None) -> tuple[str, ...]:
        """One line per rule that reads a metric gpuaudit does not export: in-process such a
        rule can never fire (in Prometheus it may read another exporter's)."""
        names = set(metric_names() if known is None else known)
        out = []
        for rule in self.rules:
            missing = sorted({s.name for s in selectors(rule.node)} - names)
            out.extend(f"{rule.where}: rule {rule.name}: metric {m!r} is not one gpuaudit "
                       "exports" for m in missing)
        return tuple(out)


_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_GROUP_KEYS = {"name", "interval", "rules", "labels", "limit", "query_offset"}
_RULE_KEYS = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}


class _FileError(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _mapping(node: yaml.Node, what: str, allowed: set[str]) -> dict[str, yaml.Node]:
    if not isinstance(node, yaml.MappingNode):
        raise _FileError(_line(node), f"{what} must be a mapping")
    out: dict[str, yaml.Node] = {}
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode):
            raise _FileError(_line(key), f"keys in {what} must be strings")
        if key.value in out:
            raise _FileError(_line(key), f"field {key.value!r} given twice in {what}")
        if key.value not in allowed:
            raise _FileError(_line(key), f"unknown field {key.value!r} in {what} (known: "
                                         f"{', '.join(sorted(allowed))})")
        out[key.value] = value
    return out


def _scalar(node: yaml.Node | None, what: str) -> str:
    if node is None:
        return ""
    if not isinstance(node, yaml.ScalarNode):
        raise _FileError(_line(node), f"{what} must be a string")
    return "" if node.tag == "tag:yaml.org,2002:null" else node.value


def _string_map(node: yaml.Node | None, what: str) -> list[tuple[str, str, int]]:
    if node is None or (isinstance(node, yaml.ScalarNode)
                        and node.tag == "tag:yaml.org,2002:null"):
        return []
    if not isinstance(node, yaml.MappingNode):
        raise _FileError(_line(node), f"{what} must be a mapping")
    out = []
    seen = set()
    for key, value in node.value:
        name = _scalar(key, f"{what} name")
        if not _LABEL_NAME.match(name) or name == NAME:
            raise _FileError(_line(key), f"invalid {what} name {name!r}")
        if name in seen:
            raise _FileError(_line(key), f"{what} {name!r} given twice")
        seen.add(name)
        out.append((name, _scalar(value, f"{what} {name!r}"), _line(value)))
    return out


def _duration(node: yaml.Node | None, what: str) -> float:
    text = _scalar(node, what)
    if not text:
        return 0.0
    try:
        return parse_duration(text)
    except ValueError as exc:
        assert node is not None
        raise _FileError(_line(node), f"bad '{what}' duration {text!r}: {exc}") from None


def _expr_line(node: yaml.Node, text: str, pos: int) -> int:
    """The file line of offset `pos` in an expression: exact for a literal block (|), the
    value's first line otherwise (folded text has lost its line breaks)."""
    if isinstance(node, yaml.ScalarNode) and node.style == "|":
        return _line(node) + 1 + text.count("\n", 0, pos)
    return _line(node)


def _templates(items: list[tuple[str, str, int]], what: str) -> tuple[tuple[str, Template], ...]:
    out = []
    for name, text, line in items:
        try:
            out.append((name, parse_template(text)))
        except ValueError as exc:
            raise _FileError(line, f"{what} {name!r}: {exc}") from None
    return tuple(out)


def _peek_name(node: yaml.Node) -> str:
    """The rule's name before its fields are checked, so that every error can name it."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value in ("alert", "record") \
                    and isinstance(value, yaml.ScalarNode) and value.value:
                return value.value
    return ""


def _rule(node: yaml.Node, group: str, index: int, source: str) -> Rule:
    name = _peek_name(node)
    label = name or f"#{index + 1} of group {group!r}"
    try:
        fields = _mapping(node, "rule", _RULE_KEYS)
        if "record" in fields:
            raise _FileError(_line(fields["record"]), "recording rules are not supported "
                             "in-process (Prometheus itself can load this file)")
        if not name:
            raise _FileError(_line(node), "one of 'alert' or 'record' must be set")
        expr_node = fields.get("expr")
        expr = _scalar(expr_node, "expr").strip()
        if expr_node is None or not expr:
            raise _FileError(_line(node if expr_node is None else expr_node),
                             "field 'expr' must be set in rule")
        try:
            tree = parse_expr(expr)
        except ExprError as exc:
            raise _FileError(_expr_line(expr_node, expr, exc.pos), str(exc)) from None
        if tree.type == "matrix":
            raise _FileError(_line(expr_node), "the expression gives a range vector; an alert "
                             "needs an instant vector (e.g. max_over_time(x[5m]) > 1)")
        return Rule(
            name=name, group=group, expr=expr, node=tree,
            for_s=_duration(fields.get("for"), "for"),
            keep_firing_for_s=_duration(fields.get("keep_firing_for"), "keep_firing_for"),
            labels=_templates(_string_map(fields.get("labels"), "label"), "label"),
            annotations=_templates(_string_map(fields.get("annotations"), "annotation"),
                                   "annotation"),
            where=f"{source}:{_line(node)}")
    except _FileError as exc:
        raise BadInputError(f"{source}:{exc.line}: rule {label}: {exc}") from None


def _group(node: yaml.Node, source: str, seen: set[str]) -> list[Rule]:
    fields = _mapping(node, "group", _GROUP_KEYS)
    name = _scalar(fields.get("name"), "group name")
    if not name:
        raise _FileError(_line(node), "group name must not be empty")
    if name in seen:
        raise _FileError(_line(fields["name"]), f"group {name}: name repeated in the file")
    seen.add(name)
    try:
        _duration(fields.get("interval"), "interval")
        for key in ("limit", "query_offset"):
            if key in fields and _scalar(fields[key], key) not in ("", "0"):
                raise _FileError(_line(fields[key]), f"{key!r} is not supported in-process")
        group_labels = _templates(_string_map(fields.get("labels"), "label"), "label")
        rules_node = fields.get("rules")
        if rules_node is None or (isinstance(rules_node, yaml.ScalarNode)
                                  and not rules_node.value):
            return []
        if not isinstance(rules_node, yaml.SequenceNode):
            raise _FileError(_line(rules_node), "rules must be a list")
    except _FileError as exc:
        raise _FileError(exc.line, f"group {name}: {exc}") from None
    rules = [_rule(r, name, i, source) for i, r in enumerate(rules_node.value)]
    if not group_labels:
        return rules
    # Group labels (Prometheus 3) apply to every rule of the group; the rule's own label wins.
    return [replace(r, labels=tuple({**dict(group_labels), **dict(r.labels)}.items()))
            for r in rules]


def parse_rules(text: str, source: str = "<rules>") -> RuleSet:
    """A rule file's text → RuleSet; BadInputError "FILE:LINE: rule NAME: what is wrong"."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BadInputError(f"{source}:{line}: not valid YAML: {problem}") from None
    if root is None:
        return RuleSet((), source)
    try:
        top = _mapping(root, "the rule file", {"groups"})
        groups = top.get("groups")
        if groups is None or (isinstance(groups, yaml.ScalarNode) and not groups.value):
            return RuleSet((), source)
        if not isinstance(groups, yaml.SequenceNode):
            raise _FileError(_line(groups), "groups must be a list")
        seen: set[str] = set()
        rules: list[Rule] = []
        for g in groups.value:
            rules.extend(_group(g, source, seen))
    except _FileError as exc:
        raise BadInputError(f"{source}:{exc.line}: {exc}") from None
    return RuleSet(tuple(rules), source)


def load_rules(path: Path | str) -> RuleSet:
    """Read and check a rule file; BadInputError names the file, line and rule."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"cannot read rule file {path}: {exc}") from None
    return parse_rules(text, str(path))


def load_shipped_rules() -> RuleSet:
    path = shipped_rules_path()
    return parse_rules(path.read_text(encoding="utf-8"), SHIPPED_RULES)


# --- the evaluator -----------------------------------------------------------------------

@dataclass(frozen=True)
class Transition:
    """An alert that started firing, or stopped (then `alert` is its last firing record)."""

    kind: str  # "firing" or "resolved"
    alert: Alert
    at: datetime


@dataclass(frozen=True)
class Evaluation:
    time: datetime
    alerts: tuple[Alert, ...]  # pending and firing, after this evaluation
    transitions: tuple[Transition, ...]
    errors: tuple[str, ...] = ()  # rules that could not be evaluated this time (state kept)

    @property
    def firing(self) -> tuple[Alert, ...]:
        return tuple(a for a in self.alerts if a.state == "firing")


@dataclass(frozen=True)
class _Active:
    alert: Alert
    keep_since: datetime | None = None  # when a firing alert's expression stopped returning it


def _index(series: Iterable[Series]) -> dict[str, Vector]:
    by_name: dict[str, dict[Labels, float]] = {}
    for s in series:
        # An empty label value is the same as no label, as in Prometheus.
        labels = tuple(sorted([(NAME, s.name), *((k, v) for k, v in s.labels if v != "")]))
        by_name.setdefault(s.name, {})[labels] = s.value
    return {name: list(d.items()) for name, d in by_name.items()}


class Evaluator:
    """Evaluates a RuleSet each time it is fed one tick's series. It remembers, per metric
    read over a range, only the points inside the longest such range (bounded memory), and
    the pending and firing alerts."""

    def __init__(self, rules: RuleSet) -> None:
        self.rules = rules
        self._ranges = rules.range_by_metric()
        self._history: dict[str, dict[Labels, deque[tuple[float, float]]]] = {}
        self._active: list[dict[Labels, _Active]] = [{} for _ in rules.rules]
        self._last: datetime | None = None

    @property
    def alerts(self) -> tuple[Alert, ...]:
        return _sorted(a.alert for active in self._active for a in active.values())

    def evaluate(self, at: datetime, series: Iterable[Series]) -> Evaluation:
        errors: list[str] = []
        if self._last is not None and at <= self._last:
            # The clock went back (or a replay restarted): old windows would mix two timelines.
            self._history.clear()
            errors.append(f"evaluation time {at.isoformat()} is not after the previous one: "
                          "range history cleared")
        self._last = at
        now = _index(series)
        self._remember(at.timestamp(), now)
        ctx = _Ctx(at.timestamp(), now, self._history)
        transitions: list[Transition] = []
        for i, rule in enumerate(self.rules.rules):
            try:
                found = _alerts_of(rule, _vector(rule.node, ctx))
            except EvalError as exc:
                errors.append(f"{rule.where}: rule {rule.name}: {exc}")
                continue
            transitions.extend(_advance(rule, self._active[i], found, at))
        return Evaluation(at, self.alerts, tuple(transitions), tuple(errors))

    def _remember(self, t: float, now: Mapping[str, Vector]) -> None:
        for name, keep_s in self._ranges.items():
            hist = self._history.setdefault(name, {})
            for labels, value in now.get(name, ()):
                hist.setdefault(labels, deque()).append((t, value))
            cutoff = t - keep_s
            for labels in list(hist):
                points = hist[labels]
                while points and points[0][0] <= cutoff:
                    points.popleft()
                if not points:
                    del hist[labels]  # a series gone for longer than any range: forget it


def _sorted(alerts: Iterable[Alert]) -> tuple[Alert, ...]:
    return tuple(sorted(alerts, key=lambda a: (a.name, sorted(a.labels.items()))))


_Found = dict[Labels, tuple[float, dict[str, str], dict[str, str]]]


def _alerts_of(rule: Rule, vector: Vector) -> _Found:
    """The alerts a rule's result asks for: identity labels → (value, labels, annotations)."""
    found: _Found = {}
    for labels, value in vector:
        data = dict(labels)  # what templates see as $labels (the result's own labels)
        alert_labels = {k: v for k, v in labels if k != NAME}
        alert_labels.update({k: t.render(data, value) for k, t in rule.labels})
        alert_labels["alertname"] = rule.name
        key = tuple(sorted(alert_labels.items()))
        if key in found:
            raise EvalError("vector contains metrics with the same labelset after applying "
                            "alert labels")
        annotations = {k: t.render(data, value) for k, t in rule.annotations}
        found[key] = (value, alert_labels, annotations)
    return found


def _advance(rule: Rule, active: dict[Labels, _Active], found: _Found,
             at: datetime) -> list[Transition]:
    """Prometheus's AlertingRule.Eval state machine for one rule at time `at`."""
    out: list[Transition] = []
    for key, (value, labels, notes) in found.items():
        cur = active.get(key)
        if cur is None:
            active[key] = _Active(Alert(name=rule.name, state="pending", labels=labels,
                                        annotations=notes, value=value, active_since=at))
        else:
            alert = cur.alert.model_copy(update={"value": value, "annotations": notes})
            active[key] = _Active(alert)
    for key in list(active):
        cur = active[key]
        if key not in found:
            if cur.alert.state == "firing" and rule.keep_firing_for_s > 0:
                since = cur.keep_since or at
                if at - since < timedelta(seconds=rule.keep_firing_for_s):
                    active[key] = replace(cur, keep_since=since)
                    continue
            del active[key]
            if cur.alert.state == "firing":
                out.append(Transition("resolved", cur.alert, at))
            continue
        if cur.alert.state == "pending" and \
                at - cur.alert.active_since >= timedelta(seconds=rule.for_s):
            fired = cur.alert.model_copy(update={"state": "firing", "fired_at": at})
            active[key] = _Active(fired)
            out.append(Transition("firing", fired, at))
    return out
