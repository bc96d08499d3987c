"""HTML and Markdown pages from the report's section data, through Jinja2 templates.

A report file is self-contained: the stylesheet, plotly.js and every chart's data are inside
it, so it opens from a mail attachment with no network. The web UI renders the same templates
with plotly.js served once from its own /static/ path instead.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from gpuaudit.compare import Comparison, FigureChange
from gpuaudit.errors import BadInputError
from gpuaudit.model import Run, Severity
from gpuaudit.model.diagnosis import Diagnosis
from gpuaudit.model.economics import PricePerformance
from gpuaudit.model.history import HistoryPoint
from gpuaudit.report.charts import figure_json, plotly_js
from gpuaudit.report.records import Chart, Matrix, Series
from gpuaudit.report.sections import build_report

TEMPLATES = Path(__file__).parent / "templates"
# Telemetry a little before and after the run still shows what the GPUs did around it.
TELEMETRY_MARGIN = timedelta(seconds=30)
# Charts drawn in a compare page: the largest changes, so the chart stays readable.
COMPARE_CHART_ROWS = 30


@functools.cache
def environment(extra: tuple[str, ...] = ()) -> jinja2.Environment:
    """The template environment; `extra` folders (the web UI's) are searched first."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([*extra, str(TEMPLATES)]),
        autoescape=jinja2.select_autoescape(["html", "j2"], default_for_string=True),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = _num
    env.filters["pct"] = _pct
    env.filters["signed"] = _signed
    env.globals["Severity"] = Severity
    return env


def markdown_environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=False,
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["num"] = _num
    env.filters["pct"] = _pct
    env.filters["signed"] = _signed
    env.filters["cell"] = _md_cell
    return env


def _num(value: float | None, digits: int = 4) -> str:
    return "n/a" if value is None else f"{value:.{digits}g}"


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}%"


def _signed(value: float | None) -> str:
    return "" if value is None else f"{value:+.1f}%"


def _md_cell(value: Any) -> str:
    """Text safe inside a Markdown table cell."""
    return " ".join(str(value).split()).replace("|", "\\|")


def chart_payload(charts: Sequence[Chart]) -> list[dict[str, Any]]:
    return [{"id": c.id, "title": c.title, "caption": c.caption, "series": c.trace_count,
             "kind": c.kind, "json": Markup(figure_json(c))} for c in charts]


def _plotly(plotly_src: str | None) -> dict[str, Any]:
    """Inline plotly.js (a file that opens offline) or a script URL (the web UI)."""
    if plotly_src is None:
        return {"plotly_inline": Markup(plotly_js().replace("</script", "<\\/script")),
                "plotly_src": None}
    return {"plotly_inline": None, "plotly_src": plotly_src}


def css() -> Markup:
    return Markup((TEMPLATES / "report.css").read_text())


def render_run_html(run: Run, *, telemetry: Sequence[HistoryPoint] = (),
                    cost: PricePerformance | None = None, diagnosis: Diagnosis | None = None,
                    plotly_src: str | None = None,
                    nav: Sequence[tuple[str, str]] = (), template_dirs: tuple[str, ...] = (),
                    telemetry_checked: bool = True) -> str:
    report = build_report(run, telemetry=telemetry, cost=cost, diagnosis=diagnosis)
    if not telemetry:
        report.telemetry_note = (
            "No telemetry was recorded on this host during the run. Run `gpuaudit monitor` "
            "alongside to see power, clocks and SM/tensor activity here."
            if telemetry_checked else None)
    charts: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)  # absent sections: []
    charts.update({k: chart_payload(v) for k, v in report.charts.items()})
    return environment(template_dirs).get_template("run.html.j2").render(
        r=report, charts=charts, all_charts=[c for cs in charts.values() for c in cs],
        css=css(), nav=nav, **_plotly(plotly_src))


def load_diagnosis(path: Path) -> Diagnosis:
    """A `gpuaudit doctor --save FILE` document, or a one-line error."""
    from pydantic import ValidationError

    from gpuaudit.model.base import SCHEMA_VERSION
    from gpuaudit.model.schema import describe_validation_error
    from gpuaudit.reading import read_json

    data = read_json(path, "diagnosis")  # missing, binary, not JSON: one line
    if not isinstance(data, dict) or data.get("kind") != "doctor":
        raise BadInputError(f"{path} is not a `gpuaudit doctor --save` document")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version \
            <= SCHEMA_VERSION:
        raise BadInputError(f"{path} has schema_version {version}; this gpuaudit reads up to "
                            f"{SCHEMA_VERSION}")
    try:
        return Diagnosis.model_validate(data)
    except ValidationError as exc:
        raise BadInputError(f"{path} does not match the schema: "
                            f"{describe_validation_error(exc)}") from None


def run_telemetry(store: Any, run: Run) -> list[HistoryPoint]:
    """What the monitor kept in `store` (a gpuaudit Store) for the run's host while it ran."""
    if run.machine is None:
        return []
    until = run.finished_at or run.started_at
    return store.history(hostname=run.machine.host.hostname,
                         since=run.started_at - TELEMETRY_MARGIN, until=until + TELEMETRY_MARGIN)


def render_run_markdown(run: Run, *, telemetry: Sequence[HistoryPoint] = (),
                        cost: PricePerformance | None = None,
                        diagnosis: Diagnosis | None = None) -> str:
    report = build_report(run, telemetry=telemetry, cost=cost, diagnosis=diagnosis)
    return markdown_environment().get_template("run.md.j2").render(
        r=report, matrix_rows=_matrix_rows, summary=_series_summary)


def _matrix_rows(mx: Matrix) -> list[list[str]]:
    return [[row, *texts] for row, texts in zip(mx.rows, mx.texts, strict=True)]


def _series_summary(s: Series) -> str:
    pts = [(x, y) for x, y in zip(s.x, s.y, strict=True) if y is not None]
    if not pts:
        return "no points"
    best = max(pts, key=lambda p: p[1])
    return f"{len(pts)} points, highest {best[1]:.4g} at {best[0]}"


def change_chart(comparison: Comparison) -> Chart | None:
    """Each changed figure's change with its noise as an error bar (the largest changes)."""
    rows = [f for f in comparison.figures if f.gain_pct is not None]
    if not rows:
        return None
    rows.sort(key=lambda f: -abs(f.gain_pct or 0.0))
    rows = rows[:COMPARE_CHART_ROWS]
    return Chart("changes", "Change of each figure (positive is better; bars: the noise)",
                 "changes", (Series("change", tuple(_row_name(f) for f in rows),
                                    tuple(f.gain_pct for f in rows)),),
                 x_title="change, % (better →)")


def change_chart_height(rows: int) -> int:
    """Pixels for the change chart's figure and its box: a bar a row, the axis below."""
    return max(260, 22 * rows + 80)


def _row_name(f: FigureChange) -> str:
    gpu = "" if f.gpu_index is None else f" GPU{f.gpu_index}"
    return f"{f.suite}/{f.name}{gpu}" + (f" {f.label}" if f.label else "")


def _change_figure(comparison: Comparison, chart: Chart) -> str:
    import json

    rows = {_row_name(f): f for f in comparison.figures}
    names = list(chart.series[0].x)
    facts = [rows[str(n)] for n in names]
    colours = {"regression": "#D55E00", "improvement": "#009E73", "no change": "#999999"}
    trace = {"type": "bar", "orientation": "h", "name": "change",
             "y": names[::-1], "x": [f.gain_pct for f in facts][::-1],
             "marker": {"color": [colours.get(f.verdict, "#999") for f in facts][::-1]},
             "error_x": {"type": "data", "array": [f.noise_pct or 0 for f in facts][::-1],
                         "visible": True, "color": "#333"},
             "hovertemplate": "%{y}: %{x:+.1f}% ± %{error_x.array:.1f}%<extra></extra>"}
    layout = {"margin": {"l": 10, "r": 16, "t": 10, "b": 40},
              "height": change_chart_height(len(names)),
              "xaxis": {"title": {"text": chart.x_title}, "zeroline": True},
              "yaxis": {"automargin": True}, "showlegend": False,
              "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "rgba(0,0,0,0)"}
    return json.dumps({"data": [trace], "layout": layout}).replace("</", "<\\/")


def render_compare_html(comparison: Comparison, *, plotly_src: str | None = None,
                        nav: Sequence[tuple[str, str]] = (),
                        template_dirs: tuple[str, ...] = ()) -> str:
    charts = []
    chart = change_chart(comparison)
    if chart is not None:
        # The box is as tall as the figure (a bar a row): a fixed box let a long chart draw
        # over the tables after it.
        charts.append({"id": chart.id, "title": chart.title, "caption": "", "series": 1,
                       "kind": "bars", "json": Markup(_change_figure(comparison, chart)),
                       "height": change_chart_height(len(chart.series[0].x))})
    return environment(template_dirs).get_template("compare.html.j2").render(
        c=comparison, charts=charts, all_charts=charts, css=css(), nav=nav,
        row_name=_row_name,
        **_plotly(plotly_src))


def render_compare_markdown(comparison: Comparison) -> str:
    return markdown_environment().get_template("compare.md.j2").render(
        c=comparison, row_name=_row_name)


def write_text(path: Path, text: str) -> None:
    """Write `path` whole or not at all (a temporary file renamed over it), with a one-line
    error when it cannot be written."""
    target = path.expanduser()
    parent = target.parent
    if target.is_dir():
        raise BadInputError(f"cannot write {path}: it is a directory")
    if not parent.is_dir():
        raise BadInputError(f"cannot write {path}: directory {parent} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise BadInputError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise BadInputError(f"cannot write {path}: {exc.strerror or exc}") from None
