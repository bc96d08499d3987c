"""Charts as plotly figures (JSON for plotly.js), drawn from the report's section data.

plotly.js itself is embedded in the page (`plotly_js()`), so a report opens with no network.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

from gpuaudit.report.records import Chart, Roofline

# One colour per precision and per GPU, the same in every chart; colour-blind safe (Okabe-Ito)
# first, then plotly's defaults.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
           "#000000", "#636EFA", "#EF553B", "#00CC96", "#AB63FA")
RATE_SCALE = [[0.0, "#f7fbff"], [0.5, "#6baed6"], [1.0, "#08306b"]]
LATENCY_SCALE = [[0.0, "#fff5eb"], [0.5, "#fd8d3c"], [1.0, "#7f2704"]]
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"


@functools.cache
def plotly_js() -> str:
    """The plotly.js bundle shipped inside the plotly package (no CDN)."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def plotly_version() -> str:
    import plotly

    return plotly.__version__


def _layout(chart: Chart, **extra: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "margin": {"l": 60, "r": 16, "t": 8, "b": 48},
        "font": {"family": FONT, "size": 12},
        "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
        "xaxis": {"title": {"text": chart.x_title}, "type": "log" if chart.log_x else "-",
                  "automargin": True},
        "yaxis": {"title": {"text": chart.y_title}, "type": "log" if chart.log_y else "-",
                  "automargin": True},
        "hovermode": "closest",
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
    }
    layout.update(extra)
    return layout


def _roofline(r: Roofline) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    traces: list[dict[str, Any]] = []
    peaks = [roof.peak for roof in r.roofs] + [p.value for p in r.points]
    bw = r.bandwidth_spec_gbps or r.bandwidth_measured_gbps
    xs = [p.intensity for p in r.points]
    lo = min([0.5, *xs]) / 2
    hi = max([4096.0, *(x * 4 for x in xs)])
    colour = {roof.precision: PALETTE[i % len(PALETTE)] for i, roof in enumerate(r.roofs)}
    for roof in r.roofs:
        if bw:
            ridge = roof.peak * 1000 / bw  # FLOP/byte where the memory roof meets this peak
            x = [lo, max(lo, ridge), hi]
            y = [min(roof.peak, lo * bw / 1000), roof.peak, roof.peak]
        else:
            x, y = [lo, hi], [roof.peak, roof.peak]
        traces.append({"type": "scatter", "mode": "lines", "name": f"{roof.precision} "
                       f"datasheet {roof.peak:g}", "x": x, "y": y,
                       "line": {"color": colour[roof.precision], "width": 1.5},
                       "hovertemplate": f"{roof.precision} roof: %{{y:.4g}}<extra></extra>"})
    if r.bandwidth_measured_gbps:
        bwm = r.bandwidth_measured_gbps
        top = max(peaks) if peaks else 1000.0
        x_end = min(hi, top * 1000 / bwm)
        traces.append({"type": "scatter", "mode": "lines",
                       "name": f"measured memory bandwidth {bwm:.0f} GB/s",
                       "x": [lo, x_end], "y": [lo * bwm / 1000, x_end * bwm / 1000],
                       "line": {"color": "#555", "dash": "dash", "width": 1.5},
                       "hovertemplate": "measured copy bandwidth: %{y:.4g} TFLOP/s at "
                                        "%{x:.3g} FLOP/B<extra></extra>"})
    gpus = sorted({p.gpu for p in r.points}, key=lambda g: -1 if g is None else g)
    symbols = ("circle", "diamond", "square", "triangle-up", "x", "star", "cross", "hexagon")
    for i, gpu in enumerate(gpus):
        pts = [p for p in r.points if p.gpu == gpu]
        traces.append({
            "type": "scatter", "mode": "markers+text",
            "name": f"measured matmul, GPU {gpu if gpu is not None else '?'}",
            "x": [p.intensity for p in pts], "y": [p.value for p in pts],
            "text": [p.precision for p in pts] if i == 0 else [],
            "textposition": ["bottom right" if j % 2 else "top left" for j in range(len(pts))],
            "customdata": [[p.shape, "" if p.pct is None else f"{p.pct:.1f}%"] for p in pts],
            "marker": {"size": 10, "symbol": symbols[i % len(symbols)],
                       "color": [colour.get(p.precision, "#333") for p in pts],
                       "line": {"color": "#fff", "width": 1}},
            "hovertemplate": "%{text} %{y:.4g} (%{customdata[1]} of spec)<br>shape "
                             "%{customdata[0]}, %{x:.3g} FLOP/B<extra></extra>"})
    extra = {"yaxis": {"type": "log", "title": {"text": "TFLOP/s (int8: TOP/s)"},
                       "automargin": True, "dtick": 1,
                       "range": [math.log10(max(min(peaks or [1.0]) / 30, 0.01)),
                                 math.log10(max(peaks or [1.0]) * 1.6)]},
             "xaxis": {"type": "log", "title": {"text": "arithmetic intensity (FLOP/byte)"},
                       "automargin": True, "dtick": 1}}
    return traces, extra


def figure(chart: Chart) -> dict[str, Any]:
    """The plotly figure (data + layout) of one chart."""
    if chart.kind == "roofline" and chart.roofline is not None:
        traces, axes = _roofline(chart.roofline)
        return {"data": traces, "layout": _layout(chart, **axes)}
    if chart.kind == "heatmap" and chart.matrix is not None:
        mx = chart.matrix
        zs = [v for row in mx.values for v in row if v is not None and math.isfinite(v)]
        trace = {"type": "heatmap", "x": list(mx.cols), "y": list(mx.rows),
                 "z": [list(r) for r in mx.values], "text": [list(r) for r in mx.texts],
                 "texttemplate": "%{text}", "hoverongaps": False,
                 "zauto": False, "zmin": 0, "zmax": max(zs) if zs else 1,
                 # From zero, darker is more: bandwidth (blue) or, for a latency, time (orange).
                 "colorscale": LATENCY_SCALE if mx.unit in ("us", "ms", "ns") else RATE_SCALE,
                 "colorbar": {"title": {"text": mx.unit}, "thickness": 12},
                 "hovertemplate": "%{y} → %{x}: %{z:.4g} " + mx.unit + "<extra></extra>"}
        layout = _layout(chart, yaxis={"autorange": "reversed", "automargin": True,
                                       "title": {"text": chart.y_title}})
        return {"data": [trace], "layout": layout}
    traces = []
    groups = list(dict.fromkeys(s.group or s.name for s in chart.series))
    for s in chart.series:
        colour = PALETTE[groups.index(s.group or s.name) % len(PALETTE)]
        if chart.kind == "bars":
            traces.append({"type": "bar", "name": s.name, "x": list(s.x), "y": list(s.y),
                           "marker": {"color": colour}})
        else:
            traces.append({"type": "scatter", "mode": "lines+markers", "name": s.name,
                           "x": list(s.x), "y": list(s.y),
                           "line": {"color": colour, "dash": "dash" if s.dashed else "solid"},
                           "marker": {"size": 5}})
    extra: dict[str, Any] = {}
    for axis, on, title in (("xaxis", chart.log_x, chart.x_title),
                            ("yaxis", chart.log_y, chart.y_title)):
        values = [v for s in chart.series for v in (s.x if axis == "xaxis" else s.y)]
        if on and (ticks := log_ticks(values)):
            extra[axis] = {"type": "log", "title": {"text": title}, "automargin": True,
                           **ticks}
    if chart.id == "collectives":
        extra["xaxis"] = {"type": "log", "title": {"text": chart.x_title}, "automargin": True,
                          "tickvals": [1 << p for p in range(10, 41, 2)],
                          "ticktext": [_size(1 << p) for p in range(10, 41, 2)]}
    return {"data": traces, "layout": _layout(chart, **extra)}


def log_ticks(values: Any) -> dict[str, Any]:
    """Tick values, labels and range for a log axis over `values`: 1-2-5 steps (decades alone
    over more than three), each labelled in full, the range from the tick below the data to
    the tick above it (so even one point sits between two labels). plotly's own labels
    between decades show the first digit only ("5" for 500 ms)."""
    vals = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)
            and math.isfinite(v) and v > 0]
    if not vals:
        return {}
    low, high = min(vals), max(vals)
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    steps = (1, 2, 5) if last - first <= 3 else (1,)
    ticks = [m * 10.0 ** e for e in range(first - 1, last + 2) for m in steps]
    below = max(t for t in ticks if t <= low * 1.0001)
    above = min(t for t in ticks if t >= high / 1.0001)
    shown = [t for t in ticks if below <= t <= above]
    span = math.log10(above) - math.log10(below)
    pad = 0.04 * span
    return {"tickvals": shown, "ticktext": [_tick_text(t) for t in shown],
            "range": [math.log10(below) - pad, math.log10(above) + pad]}


def _tick_text(t: float) -> str:
    if t >= 1000:
        return f"{t:,.0f}"
    return f"{t:.6g}"


def _size(n: int) -> str:
    from gpuaudit.parse import human_bytes

    return human_bytes(n).replace(" ", "")


def figure_json(chart: Chart) -> str:
    """The figure as JSON safe to put inside a <script> element."""
    text = json.dumps(_finite(figure(chart)), separators=(",", ":"), allow_nan=False)
    return text.replace("</", "<\\/")


def _finite(value: Any) -> Any:
    """NaN and infinities (not JSON) become gaps (null), as plotly draws a missing point."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
