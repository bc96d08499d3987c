"""The subset of PromQL that alert rules may use (docs/monitor-rules.md): lexer, syntax tree,
parser (`parse_expr`) and evaluation over in-memory series (`evaluate`).

Semantics kept from Prometheus (2.42 and 3.x), so that a rule tested here means the same there:
- An instant selector sees the series fed at this evaluation only: a series the sampler no
  longer yields is gone at once, as Prometheus's staleness markers make it after a scrape.
- A range selector `[d]` sees the samples in (t-d, t] (left-open, as in Prometheus 3; 2.x also
  took a sample exactly at t-d).
- rate/increase/delta extrapolate to the window's edges exactly as Prometheus does.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

Labels = tuple[tuple[str, str], ...]  # sorted by name; "__name__" holds the metric name
Vector = list[tuple[Labels, float]]
Points = list[tuple[float, float]]  # (unix time, value), oldest first
Matrix = list[tuple[Labels, Points]]

NAME = "__name__"


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


# --- lexer -------------------------------------------------------------------------------

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

_COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
}
_ARITHMETIC: dict[str, Callable[[float, float], float]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "%": math.fmod, "^": math.pow,
}
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


# --- parser ------------------------------------------------------------------------------

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


# Deeper than any real rule; the evaluator walks the tree recursively, so a file of 10,000
# nested parentheses must be refused here, in one line, not crash the monitor later.
MAX_DEPTH = 100


def parse_expr(text: str) -> Node:
    """The syntax tree of a rule expression, or ExprError (also for nesting deeper than
    MAX_DEPTH)."""
    try:
        node = _Parser(text).parse()
    except RecursionError:
        raise ExprError(f"expression nested too deeply (more than {MAX_DEPTH} levels)"
                        ) from None
    if _depth(node) > MAX_DEPTH:
        raise ExprError(f"expression nested too deeply (more than {MAX_DEPTH} levels)")
    return node


def _depth(node: Node) -> int:
    deepest, todo = 0, [(node, 1)]
    while todo:
        n, d = todo.pop()
        deepest = max(deepest, d)
        if isinstance(n, Call):
            todo.extend((a, d + 1) for a in n.args)
        elif isinstance(n, Neg):
            todo.append((n.operand, d + 1))
        elif isinstance(n, Binary):
            todo += [(n.lhs, d + 1), (n.rhs, d + 1)]
    return deepest


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
        return _ARITHMETIC[op](a, b)
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
            if not _COMPARISONS[node.op](lv, rv):
                continue
            value = lv
        elif comparison:
            value = float(_COMPARISONS[node.op](lv, rv))
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
            hit = _COMPARISONS[node.op](a, b)
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
            return float(_COMPARISONS[node.op](lhs, rhs))
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
