"""Plain-text layout, computed once: aligned columns whose widths are their widest cells, so
the layout that fits a terminal is found by arithmetic, never by rendering a table several
times; no value is ever cut. Used by the views a fast command prints (`catalog list`,
`recommend`) without importing rich; a view made of these lines also renders in a rich
console (`PlainText`).
"""

from __future__ import annotations

import os
import shutil
import textwrap
from collections.abc import Sequence
from typing import Any

GAP = "  "


def terminal_width(default: int = 80) -> int:
    """$COLUMNS when set, else the terminal's width, else `default` (a pipe, a file)."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return shutil.get_terminal_size((default, 24)).columns


def _widths(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    return [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]


def _line(cells: Sequence[str], widths: Sequence[int], align: str, shown: Sequence[int]
          ) -> str:
    return GAP.join(f"{cells[i]:{align[i]}{widths[i]}}" for i in shown).rstrip()


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str, width: int, *,
          optional: Sequence[int] = (), key: int | None = None
          ) -> tuple[list[str], list[str]]:
    """(lines, headers of the columns left out). Columns of `optional` are dropped, last
    first, until the table fits `width`; if it still does not, each row becomes two lines:
    its `key` column, then the other cells indented under it (or, narrower still, one
    'header: value' per line). `align` has one '<' or '>' per column."""
    widths = _widths(headers, rows)
    shown = list(range(len(headers)))

    def total(cols: Sequence[int]) -> int:
        return sum(widths[i] for i in cols) + len(GAP) * (len(cols) - 1)

    for i in reversed(optional):
        if total(shown) <= width:
            break
        shown.remove(i)
    dropped = [headers[i] for i in range(len(headers)) if i not in shown]
    rule = ["-" * w for w in widths]
    if total(shown) <= width:
        return ([_line(headers, widths, align, shown), _line(rule, widths, align, shown),
                 *(_line(r, widths, align, shown) for r in rows)], dropped)
    k = 0 if key is None else key
    rest = [i for i in shown if i != k]
    if total(rest) + 2 <= width:
        out = [headers[k], "  " + _line(headers, widths, align, rest)]
        for r in rows:
            out += [r[k], "  " + _line(r, widths, align, rest)]
        return out, dropped
    out = []
    for r in rows:
        out.append(r[k])
        out += wrap("  ".join(f"{headers[i]}: {r[i]}" for i in rest), width, "  ")
    return out, dropped


def wrap(text: str, width: int, indent: str = "", first: str | None = None) -> list[str]:
    """`text` in lines of at most `width` (a word longer than a line keeps its own line)."""
    return textwrap.wrap(text, width=max(width, 20), initial_indent=indent if first is None
                         else first, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) or [""]


class PlainText:
    """Lines laid out for a width, printable as text or in a rich console at its width."""

    def __init__(self, render: Any) -> None:
        self._render = render  # width -> str

    def text(self, width: int) -> str:
        return str(self._render(width))

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.text import Text

        yield Text(self.text(options.max_width), no_wrap=True, overflow="ignore")
