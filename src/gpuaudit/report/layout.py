"""Tables that never cut a value. Rich squeezes a table that is wider than the terminal by
cutting cells ('494…', '157.…'); a figure shown cut is worse than one not shown. `Fit` picks,
when it is rendered, the first layout in which every word of every cell appears whole: the
table itself, a narrower layout of the same figures, the table without its optional columns
(dropped in the order given, and named below it), the table turned (a column per row, for a
few rows of many readings), and last each row stacked as 'column: value' lines."""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from copy import copy
from dataclasses import replace

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text


def cell_text(cell: RenderableType) -> str | None:
    """The plain text of a table cell (markup read), None for a cell that is not text."""
    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        return Text.from_markup(cell).plain
    return None


# A line of a cell this short with a digit in it is a value with its unit ("140.4 GiB",
# "345 / 1980 MHz"): shown on one line or not at all. Longer text may wrap between words.
VALUE_LINE = 24


def whole_units(text: str) -> list[str]:
    """What of a cell's text must appear unbroken: value lines whole, other text by word."""
    units: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if line and len(line) <= VALUE_LINE and any(ch.isdigit() for ch in line):
            units.append(line)
        else:
            units.extend(line.split())
    return units


def _units(table: Table) -> set[str]:
    found: set[str] = set()
    for column in table.columns:
        for cell in column.cells:
            text = cell_text(cell)
            if text:
                found.update(whole_units(text))
    return found


def protected(table: Table) -> Table:
    """A copy of `table` in which rich, squeezing it, wraps between words but never cuts one
    or splits a value from its unit: a column of single words (ids, figures) does not wrap
    at all, the others are at least as wide as their longest word or value; no column takes
    a share of the width (rich then never narrows the others below what they hold)."""
    safe = copy(table)
    columns = []
    for i, c in enumerate(table.columns):
        texts = [t for cell in c.cells if (t := cell_text(cell))]
        longest = max((len(u) for t in texts for u in whole_units(t)), default=0)
        single = all(len(line.split()) <= 1 for t in texts for line in t.splitlines())
        columns.append(replace(c, _index=i, _cells=list(c._cells), no_wrap=c.no_wrap or single,
                               ratio=None, min_width=max(c.min_width or 0, longest) or None))
    safe.columns = columns
    return safe


def render_text(renderable: RenderableType, width: int) -> str:
    """What `renderable` looks like at `width` columns, as plain text."""
    console = Console(file=io.StringIO(), width=width, color_system=None, highlight=False,
                      legacy_windows=False, soft_wrap=False)
    console.print(renderable, crop=False)  # what rich would crop shows as a longer line
    return console.file.getvalue()  # type: ignore[attr-defined]


def whole_at(table: Table, width: int) -> bool:
    """Whether `table` rendered at `width` stays within it and shows every value and word of
    every cell whole."""
    rendered = render_text(table, width)
    if any(len(line) > width for line in rendered.splitlines()):
        return False
    return all(unit in rendered for unit in _units(table))


def without(table: Table, dropped: Iterable[str]) -> Table:
    """A copy of `table` without the columns whose header is in `dropped`."""
    gone = set(dropped)
    narrow = copy(table)
    kept = [c for c in table.columns if str(c.header) not in gone]
    narrow.columns = [replace(c, _index=i, _cells=list(c._cells)) for i, c in enumerate(kept)]
    return narrow


def transposed(table: Table) -> Table:
    """The table turned: a column per row (headed by the row's first cell), a row per
    column. Narrow when there are few rows and many columns (two GPUs, twelve readings)."""
    headers = [str(c.header) for c in table.columns]
    columns = [list(c.cells) for c in table.columns]
    turned = Table(title=table.title, title_justify=table.title_justify,
                   header_style=table.header_style, caption=table.caption,
                   caption_justify=table.caption_justify, show_lines=False)
    turned.add_column(headers[0] if headers else "", style="bold", no_wrap=True)
    for cell in columns[0] if columns else ():
        turned.add_column(cell_text(cell) or "")
    for header, cells in zip(headers[1:], columns[1:], strict=True):
        turned.add_row(header, *cells)
    return turned


def stacked(table: Table) -> RenderableType:
    """Each row as 'column: value' lines under the row's first cell, rows apart."""
    parts: list[RenderableType] = []
    if table.title:
        parts.append(Text(str(table.title), style="bold"))
    headers = [str(c.header) for c in table.columns]
    columns = [list(c.cells) for c in table.columns]
    rows = len(columns[0]) if columns else 0
    for r in range(rows):
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        first = columns[0][r]
        grid.add_row(f"{headers[0]}:" if headers[0] else "", first)
        for header, cells in zip(headers[1:], columns[1:], strict=True):
            value = cells[r]
            if cell_text(value) == "":
                continue
            grid.add_row(f"{header}:", value)
        parts.append(grid)
        if r < rows - 1:
            parts.append(Text(""))
    if table.caption:
        parts.append(Text(str(table.caption), style="dim"))
    return Group(*parts)


class Fit:
    """A table shown whole at any width: the table, or one of its `alternatives` (narrower
    layouts of the same figures), or the table less its `optional` columns (dropped in that
    order until it fits, and named), or stacked rows."""

    def __init__(self, table: Table, optional: Sequence[str] = (), *,
                 alternatives: Sequence[Table] = (), turn: bool = True,
                 note: str = "left out at this width (a wider terminal or --json shows them)"
                 ) -> None:
        self.table = table
        self.optional = tuple(optional)
        self.alternatives = tuple(alternatives)
        self.turn = turn
        self.note = note

    def choose(self, width: int) -> RenderableType:
        for table in (self.table, *self.alternatives):
            if whole_at(table, width):  # as designed (ratios, expand) when that fits
                return table
        candidates = [protected(t) for t in (self.table, *self.alternatives)]
        for table in candidates:
            if whole_at(table, width):
                return table
        for table in candidates:
            headers = {str(c.header) for c in table.columns}
            dropped: list[str] = []
            for header in (h for h in self.optional if h in headers):
                dropped.append(header)
                narrow = without(table, dropped)
                if whole_at(narrow, width):
                    return Group(narrow, Text(f"{', '.join(dropped)}: {self.note}",
                                              style="dim"))
        rows = len(self.table.rows)
        if self.turn and 0 < rows <= 8:
            turned = protected(transposed(self.table))
            if whole_at(turned, width):
                return turned
        return stacked(self.table)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.choose(options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.choose(options.max_width))
