"""Prometheus's annotation and label templates, within the subset rules may use
(`parse_template`, `Template`), and the Go-style number formatting they print with (`go_float`,
`humanize`, `humanize1024`, `humanize_duration`)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass


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


_BIG = ("k", "M", "G", "T", "P", "E", "Z", "Y")
_BIG_1024 = ("ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi")
_SMALL = ("m", "u", "n", "p", "f", "a", "z", "y")


def _scaled_down(v: float, prefixes: tuple[str, ...], base: int) -> tuple[float, str]:
    """`v` divided by `base` until it is below it, and the SI/IEC prefix that says so."""
    prefix = ""
    for p in prefixes:
        if abs(v) < base:
            break
        prefix, v = p, v / base
    return v, prefix


def _scaled_up(v: float) -> tuple[float, str]:
    """`v` (below 1) multiplied by 1000 until it is 1 or more, and the SI prefix that says so."""
    prefix = ""
    for p in _SMALL:
        if abs(v) >= 1:
            break
        prefix, v = p, v * 1000
    return v, prefix


def humanize(v: float) -> str:
    if v == 0 or math.isnan(v) or math.isinf(v):
        return _g4(v)
    v, prefix = _scaled_down(v, _BIG, 1000) if abs(v) >= 1 else _scaled_up(v)
    return _g4(v, prefix)


def humanize1024(v: float) -> str:
    if abs(v) <= 1 or math.isnan(v) or math.isinf(v):
        return _g4(v)
    v, prefix = _scaled_down(v, _BIG_1024, 1024)
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
    v, prefix = _scaled_up(v)
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
            if funcs and num is not None:
                # Only the first function gets a number; the rest get its text and keep it.
                text = _TEMPLATE_FUNCS[funcs[0]](num)
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

