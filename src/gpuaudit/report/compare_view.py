"""The terminal view of a comparison (rich renderables; nothing here prints)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gpuaudit.compare import Comparison, FigureChange

SHOWN = 15  # rows of regressions and of improvements; --html and --json have every one


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _figures(title: str, rows: list[FigureChange], threshold_pct: float) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold")
    for col, justify in (("figure", "left"), ("GPU", "right"), ("at", "left"), ("A", "right"),
                         ("B", "right"), ("change", "right"), ("noise ±", "right")):
        # Names and sizes are what people look for: fold them, never cut them.
        t.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for f in rows[:SHOWN]:
        change = Text(f"{f.change_pct:+.1f}%" if f.change_pct is not None else "")
        if f.beyond_threshold:
            change.stylize("bold red")
            change.append(f" > {threshold_pct:g}%", style="red")
        t.add_row(f"{f.suite}/{f.name}", "" if f.gpu_index is None else str(f.gpu_index),
                  escape(f.label), f"{_fmt(f.a_value)} {f.unit}", f"{_fmt(f.b_value)} {f.unit}",
                  change, f"{f.noise_pct:.1f}%" if f.noise_pct is not None else "none known")
    if len(rows) > SHOWN:
        t.caption = f"{len(rows) - SHOWN} more: --html or --json show every one"
        t.caption_justify = "left"
    return t


def compare_view(c: Comparison) -> RenderableType:
    parts: list[RenderableType] = [Text(
        f"A (baseline) {c.a.id} {c.a.kind} on {c.a.hostname or 'n/a'}, "
        f"{c.a.started_at:%Y-%m-%d %H:%M}  →  B {c.b.id} {c.b.kind} on "
        f"{c.b.hostname or 'n/a'}, {c.b.started_at:%Y-%m-%d %H:%M}")]
    for side, ref in (("A", c.a), ("B", c.b)):
        for caveat in ref.caveats:
            parts.append(Text(f"run {side}: {caveat}", style="yellow"))
    if c.differences:
        t = Table(title="Different machine or software", title_justify="left",
                  header_style="bold")
        for col in ("what", "A", "B"):
            t.add_column(col, overflow="fold")
        for d in c.differences:
            t.add_row(d.what, escape(d.a or "n/a"), escape(d.b or "n/a"))
        parts.append(t)
    if c.regressions:
        parts.append(_figures("Regressions (worst first)", c.regressions, c.threshold_pct))
    if c.improvements:
        parts.append(_figures("Improvements (largest first)", c.improvements,
                              c.threshold_pct))
    if c.findings:
        t = Table(title="Findings", title_justify="left", header_style="bold")
        for col in ("change", "code", "GPU", "A → B", "message"):
            t.add_column(col, overflow="fold")
        for f in c.findings:
            sev = (f"{f.severity_a.value if f.severity_a else '—'} → "
                   f"{f.severity_b.value if f.severity_b else '—'}")
            t.add_row(f.change, f.code, "" if f.gpu_index is None else str(f.gpu_index), sev,
                      escape(f.message))
        parts.append(t)
    counts = c.counts()
    line = Text("verdict: ")
    if c.failed:
        line.append(f"REGRESSION beyond {c.threshold_pct:g}%", style="bold red")
    else:
        line.append(f"no regression beyond {c.threshold_pct:g}%", style="green")
    line.append(f"  ({len(c.regressions)} worse, {len(c.improvements)} better, "
                f"{counts.get('no change', 0)} within the noise, "
                f"{counts.get('only in A', 0) + counts.get('only in B', 0)} in one run only)")
    parts.append(line)
    return Group(*parts)
