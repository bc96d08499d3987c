"""The terminal view of a comparison (rich renderables; nothing here prints). Every table is
a `layout.Fit`: at 80 columns as at 200, no figure, name or id is cut."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gpuaudit.compare import Comparison, FigureChange
from gpuaudit.report.layout import Fit

SHOWN = 15  # rows of regressions and of improvements; --html and --json have every one


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _change(f: FigureChange, threshold_pct: float) -> Text:
    change = Text(f"{f.change_pct:+.1f}%" if f.change_pct is not None else "")
    if f.beyond_threshold:
        change.stylize("bold red")
        change.append(f" > {threshold_pct:g}%", style="red")
    return change


def _figures(title: str, rows: list[FigureChange], threshold_pct: float) -> Fit:
    """The figures as a table that fits the terminal: value and unit together where there is
    room, else the unit in a column of its own, then less ruling between columns, and last
    turned or stacked; a column that says nothing here (no GPU, no size) is left out."""
    shown = rows[:SHOWN]
    gpus = any(f.gpu_index is not None for f in shown)
    labels = any(f.label for f in shown)
    caption = (f"{len(rows) - SHOWN} more: --html or --json show every one"
               if len(rows) > SHOWN else None)

    def table(unit_column: bool, **style: object) -> Table:
        t = Table(title=title, title_justify="left", header_style="bold", caption=caption,
                  caption_justify="left", **style)  # type: ignore[arg-type]
        t.add_column("figure")
        if gpus:
            t.add_column("GPU", justify="right")
        if labels:
            t.add_column("at")
        t.add_column("A", justify="right")
        t.add_column("B", justify="right")
        if unit_column:
            t.add_column("unit")
        t.add_column("change", justify="right")
        t.add_column("noise ±", justify="right")
        for f in shown:
            a, b = _fmt(f.a_value), _fmt(f.b_value)
            values = [a, b, f.unit] if unit_column else [f"{a} {f.unit}", f"{b} {f.unit}"]
            t.add_row(f"{f.suite}/{f.name}",
                      *(["" if f.gpu_index is None else str(f.gpu_index)] if gpus else []),
                      *([escape(f.label)] if labels else []), *values,
                      _change(f, threshold_pct),
                      f"{f.noise_pct:.1f}%" if f.noise_pct is not None else "none known")
        return t

    return Fit(table(False), alternatives=[
        table(False, show_edge=False, pad_edge=False),
        table(True, show_edge=False, pad_edge=False),
        table(True, box=None, pad_edge=False),
        table(True, box=None, pad_edge=False, collapse_padding=True)])


def _differences(c: Comparison) -> Fit:
    t = Table(title="Different machine or software", title_justify="left",
              header_style="bold")
    for col in ("what", "A", "B"):
        t.add_column(col)
    for d in c.differences:
        t.add_row(d.what, escape(d.a or "n/a"), escape(d.b or "n/a"))
    return Fit(t)


def _findings(c: Comparison) -> Fit:
    t = Table(title="Findings", title_justify="left", header_style="bold")
    for col in ("change", "code", "GPU", "A → B", "message"):
        t.add_column(col)
    for f in c.findings:
        sev = (f"{f.severity_a.value if f.severity_a else '—'} → "
               f"{f.severity_b.value if f.severity_b else '—'}")
        t.add_row(f.change, f.code, "" if f.gpu_index is None else str(f.gpu_index), sev,
                  escape(f.message))
    return Fit(t)


def compare_view(c: Comparison) -> RenderableType:
    parts: list[RenderableType] = [Text(
        f"A (baseline) {c.a.id} {c.a.kind} on {c.a.hostname or 'n/a'}, "
        f"{c.a.started_at:%Y-%m-%d %H:%M}  →  B {c.b.id} {c.b.kind} on "
        f"{c.b.hostname or 'n/a'}, {c.b.started_at:%Y-%m-%d %H:%M}")]
    for side, ref in (("A", c.a), ("B", c.b)):
        for caveat in ref.caveats:
            parts.append(Text(f"run {side}: {caveat}", style="yellow"))
    if c.differences:
        parts.append(_differences(c))
    if c.regressions:
        parts.append(_figures("Regressions (worst first)", c.regressions, c.threshold_pct))
    if c.improvements:
        parts.append(_figures("Improvements (largest first)", c.improvements,
                              c.threshold_pct))
    if c.findings:
        parts.append(_findings(c))
    counts = c.counts()
    line = Text("verdict: ")
    if c.failed:
        line.append(f"REGRESSION beyond {c.threshold_pct:g}%", style="bold red")
    else:
        line.append(f"no regression beyond {c.threshold_pct:g}%", style="green")
    line.append(f"  ({len(c.regressions)} worse, {len(c.improvements)} better, "
                f"{counts.get('no change', 0)} within the noise, "
                f"{counts.get('only in A', 0) + counts.get('only in B', 0)} in one run only"
                + (f", {counts['host busy']} CPU figures not judged: other processes kept the "
                   "host's cores busy" if counts.get("host busy") else "") + ")")
    parts.append(line)
    return Group(*parts)
