"""Reading a rule expression: the lexer and the parser (`parse_expr`) into the syntax tree
of `promql.syntax`, refusing what PromQL has and the subset does not evaluate."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .syntax import (
    AGGREGATIONS,
    COMPARISONS,
    FUNCS,
    KEYWORDS,
    OTHER_PROMQL_FUNCS,
    PRECEDENCE,
    SET_OPS,
    Binary,
    Call,
    ExprError,
    Matcher,
    Neg,
    Node,
    Number,
    Selector,
    parse_duration,
    type_name,
)


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
    quote, i = src[pos], pos + 1
    out: list[str] = []
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
        if tok.kind == "op" and tok.text in PRECEDENCE:
            return tok.text
        if tok.kind == "ident" and tok.text.lower() in SET_OPS:
            return tok.text.lower()
        return None

    def expr(self, min_prec: int) -> Node:
        lhs = self.unary()
        while (op := self.binop()) is not None and PRECEDENCE[op] >= min_prec:
            pos = self.take().pos
            bool_mod, on, ignoring = self.modifiers(op)
            # ^ is right-associative, everything else left-associative.
            rhs = self.expr(PRECEDENCE[op] + (0 if op == "^" else 1))
            lhs = _binary(op, lhs, rhs, bool_mod, on, ignoring, pos)
        return lhs

    def unary(self) -> Node:
        if self.is_op("-") or self.is_op("+"):
            sign = self.take().text
            # Unary minus binds less tightly than ^: -2^2 is -4, as in PromQL.
            operand = self.expr(PRECEDENCE["^"])
            if operand.type == "matrix":
                raise ExprError("unary minus needs a scalar or an instant vector", self.peek().pos)
            if sign == "+":
                return operand
            return Number(-operand.value) if isinstance(operand, Number) else Neg(operand)
        return self.primary()

    def modifiers(self, op: str) -> tuple[bool, tuple[str, ...] | None, tuple[str, ...]]:
        bool_mod, on = False, None
        ignoring: tuple[str, ...] = ()
        if self.is_word("bool"):
            tok = self.take()
            if op not in COMPARISONS:
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
            if tok.text in AGGREGATIONS:
                raise ExprError(f"aggregation '{tok.text}' is not supported in-process "
                                "(see docs/monitor-rules.md)", tok.pos)
            if word in KEYWORDS:
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
        if name not in FUNCS:
            if name in OTHER_PROMQL_FUNCS:
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
        want = FUNCS[name][0]
        if len(args) != len(want):
            raise ExprError(f"function '{name}' takes {len(want)} argument(s), got {len(args)}",
                            tok.pos)
        for arg, t in zip(args, want, strict=True):
            if arg.type != t:
                raise ExprError(f"function '{name}' needs a {type_name(t)}, got a "
                                f"{type_name(arg.type)}", tok.pos)
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
    if op in SET_OPS and types != ("vector", "vector"):
        raise ExprError(f"set operator '{op}' needs an instant vector on both sides", pos)
    if op in COMPARISONS and types == ("scalar", "scalar") and not bool_mod:
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
