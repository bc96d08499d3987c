"""The live terminal view of `gpuaudit monitor`: one frame built from the monitor's state.

A pure function of its inputs (the frame's "now" is the sample's time), so a replayed trace
renders the same frame every time. Nothing here prints: the CLI puts the frame in a rich Live.
A reading that is missing shows as n/a; a GPU that could not be read shows its error in red.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuaudit.model import Alert, GpuSample, Sample
from gpuaudit.model.history import HistoryPoint
from gpuaudit.report.format import NA
from gpuaudit.report.layout import Fit
from gpuaudit.telemetry.metrics import IdleState, XidTally
from gpuaudit.telemetry.state import MonitorState

GIB = 1 << 30
BAR_WIDTH = 10
SPARK = "▁▂▃▄▅▆▇█"
SPARK_GAP = "·"  # a tick with no reading: a gap is not a zero
# Clock-event reasons that mean the hardware is protecting itself (red), or a limit was hit.
SEVERE_REASONS = {"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                  "sw_thermal_slowdown"}
LIMIT_REASONS = {"sw_power_cap"}
# Temperatures the common alert rules use (warning above 80 °C, critical above 85 °C).
TEMP_WARN_C, TEMP_CRIT_C = 80.0, 85.0
TEMP_SCALE_C = 100.0


def bar(fraction: float | None, width: int = BAR_WIDTH, style: str = "green") -> Text:
    """A horizontal bar for a 0–1 fraction (clamped); empty cells are dim."""
    if fraction is None:
        return Text(" " * width)
    f = min(max(fraction, 0.0), 1.0)
    filled = round(f * width)
    text = Text("█" * filled, style=style)
    text.append("░" * (width - filled), style="dim")
    return text


def sparkline(values: Sequence[float | None], top: float | None) -> Text:
    """One character per value, scaled 0..top; a missing value is a dim dot."""
    out = Text()
    if not values:
        return out
    known = [v for v in values if v is not None]
    scale = top if top else (max(known) if known else 0.0)
    for v in values:
        if v is None:
            out.append(SPARK_GAP, style="dim")
        elif scale <= 0:
            out.append(SPARK[0])
        else:
            level = round(min(max(v / scale, 0.0), 1.0) * (len(SPARK) - 1))
            out.append(SPARK[level])
    return out


def _level_style(fraction: float, warn: float = 0.9, crit: float = 0.98) -> str:
    return "red" if fraction >= crit else ("yellow" if fraction >= warn else "green")


def _na() -> Text:
    return Text(NA, style="dim")


def activity_cell(g: GpuSample, history: Sequence[GpuSample], width: int = BAR_WIDTH
                  ) -> Text:
    act = g.activity_pct
    if act is None:
        cell = _na()
    else:
        cell = bar(act / 100, width=width, style="green")
        src = "sm" if g.sm_activity_pct is not None else "util"
        cell.append(f" {act:3.0f}% {src}")
    if g.tensor_activity_pct is not None:
        cell.append(f"\ntensor {g.tensor_activity_pct:.0f}%")
    if history:
        cell.append("\n")
        cell.append_text(sparkline([s.activity_pct for s in history], 100.0))
    return cell


def memory_cell(g: GpuSample, width: int = BAR_WIDTH, digits: int = 1) -> Text:
    used, total = g.memory_used_bytes, g.memory_total_bytes
    if used is None:
        return _na()
    if not total:
        return Text(f"{used / GIB:.{digits}f} GiB / {NA}")
    f = used / total
    cell = bar(f, width=width, style=_level_style(f))
    cell.append(f" {used / GIB:.{digits}f}/{total / GIB:.{digits}f} GiB")
    return cell


def power_cell(g: GpuSample, history: Sequence[GpuSample], width: int = BAR_WIDTH) -> Text:
    p, limit = g.power_w, g.power_limit_w
    if p is None:
        cell = _na()
    elif not limit:
        cell = Text(f"{p:.0f} W / {NA}")
    else:
        cell = bar(p / limit, width=width, style=_level_style(p / limit, 0.95, 1.0))
        cell.append(f" {p:.0f}/{limit:.0f} W")
    if history:
        limits = [s.power_limit_w for s in history if s.power_limit_w]
        cell.append("\n")
        cell.append_text(sparkline([s.power_w for s in history],
                                   max(limits) if limits else None))
    return cell


def temperature_cell(g: GpuSample, width: int = 5) -> Text:
    c = g.temperature_gpu_c
    if c is None:
        return _na()
    style = "red" if c > TEMP_CRIT_C else ("yellow" if c > TEMP_WARN_C else "green")
    cell = bar(c / TEMP_SCALE_C, width=width, style=style) if width else Text("")
    cell.append(f"{' ' if width else ''}{c:.0f} °C", style=style if style != "green" else "")
    if g.temperature_memory_c is not None:
        cell.append(f"\nHBM {g.temperature_memory_c:.0f} °C")
    return cell


def status_cell(g: GpuSample, idle: IdleState | None, xids: XidTally) -> Text:
    """What deserves a glance: idleness, why the clocks are held down, errors on record."""
    out = Text()

    def add(text: str, style: str = "") -> None:
        if out.plain:
            out.append("\n")  # one item a line: a narrow column folds less
        out.append(text, style=style)

    if idle is not None and idle.idle:
        add("idle", "cyan")
    else:
        # Idle clocks are no news; the reasons matter while the GPU works.
        reasons = g.clock_event_reasons
        if reasons is None:
            add(f"clock events {NA}", "dim")
        for r in reasons or ():
            if r == "gpu_idle":
                continue
            add(r, "red" if r in SEVERE_REASONS else ("yellow" if r in LIMIT_REASONS else ""))
    if g.ecc_uncorrected_volatile:
        add(f"{g.ecc_uncorrected_volatile} uncorrected ECC", "red")
    if g.remapping_failed:
        add("row remap failed", "bold red")
    elif g.remapping_pending:
        add("row remap pending (reset)", "yellow")
    xid = xid_text(g.index, xids)
    if xid.plain:
        if out.plain:
            out.append("\n")
        out.append_text(xid)
    return out


def xid_text(gpu: int, xids: XidTally) -> Text:
    """'XID 79×1' for each code seen on this GPU since the monitor started."""
    found = [f"XID {code}×{n}" for (g, code), n in sorted(xids.counts.items()) if g == gpu]
    return Text(", ".join(found), style="red")


def gpu_table(sample: Sample, history: Mapping[int, Sequence[GpuSample]],
              idle: Mapping[int, IdleState], xids: XidTally, *, compact: bool = False
              ) -> Table:
    """A row per GPU. `compact` (for 80 columns): shorter bars, whole GiB, the sparklines
    cut to the bar's width, the model name left to the wide view; every reading stays."""
    bar_w = 5 if compact else BAR_WIDTH
    t = Table(header_style="bold", expand=True, pad_edge=False)
    t.add_column("GPU", no_wrap=True, max_width=4 if compact else 16)
    t.add_column("activity", no_wrap=True, min_width=bar_w + 9)
    t.add_column("memory" if compact else "memory used/total", no_wrap=True,
                 min_width=bar_w + (11 if compact else 15))
    t.add_column("power" if compact else "power/limit", no_wrap=True, min_width=bar_w + 10)
    t.add_column("temp", no_wrap=True, min_width=6 if compact else 11)
    t.add_column("status", ratio=1, overflow="fold")
    for g in sample.gpus:
        label = Text(str(g.index), style="bold red" if g.error else "bold")
        if g.name and not compact:
            label.append("\n" + g.name.removeprefix("NVIDIA "),
                         style="red" if g.error else "")
        if g.error is not None:
            # The XIDs on record are what explains a GPU that fell off the bus: keep them.
            status = Text(f"error: {g.error}", style="red")
            xid = xid_text(g.index, xids)
            if xid.plain:
                status.append("\n")
                status.append_text(xid)
            t.add_row(label, Text("error", style="red"), "", "", "", status)
            continue
        recent = list(history.get(g.index, ()))
        if compact:
            recent = recent[-(bar_w + 9):]
        t.add_row(label, activity_cell(g, recent, bar_w),
                  memory_cell(g, bar_w, 0 if compact else 1), power_cell(g, recent, bar_w),
                  temperature_cell(g, 0 if compact else 5),
                  status_cell(g, idle.get(g.index), xids))
    return t


def processes_table(sample: Sample, max_rows: int = 20) -> RenderableType:
    rows = [(g.index, p) for g in sample.gpus for p in g.processes]
    unread = [g.index for g in sample.gpus if g.error is None and "processes" in g.unavailable]
    notes = Text()
    if unread:
        notes.append(f"processes {NA} on GPU {', '.join(map(str, unread))}", style="dim")
    if not rows:
        return Text("no processes on the GPUs", style="dim") if not unread else notes
    rows.sort(key=lambda r: (r[0], -(r[1].used_memory_bytes or 0), r[1].pid))
    t = Table(title="processes", title_justify="left", header_style="bold", expand=True,
              pad_edge=False)
    t.add_column("PID", justify="right", no_wrap=True)
    t.add_column("user", no_wrap=True, max_width=16)
    t.add_column("GPU", justify="right", no_wrap=True)
    t.add_column("memory", justify="right", no_wrap=True)
    # Commands are text, never markup, and cut rather than wrapped.
    t.add_column("command", ratio=1, no_wrap=True, overflow="ellipsis")
    for gpu, p in rows[:max_rows]:
        mem = NA if p.used_memory_bytes is None else f"{p.used_memory_bytes / GIB:.1f} GiB"
        t.add_row(str(p.pid), Text(p.user or NA), str(gpu), mem, Text(p.command or NA))
    if len(rows) > max_rows:
        t.caption = f"+{len(rows) - max_rows} more"
    return Group(t, notes) if unread else t


def _ago(then: datetime, now: datetime | None) -> str:
    stamp = f"{then:%H:%M:%S}"
    if now is None:
        return stamp
    s = max((now - then).total_seconds(), 0.0)
    span = f"{s:.0f} s" if s < 120 else (f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h")
    return f"{stamp} ({span} ago)"


def alerts_table(alerts: Sequence[Alert], now: datetime | None) -> RenderableType:
    if not alerts:
        return Text("no active alerts", style="dim")
    t = Table(title="alerts", title_justify="left", header_style="bold", expand=True,
              pad_edge=False)
    # The summary wraps (a sentence); the other cells are shown whole or stacked.
    t.add_column("alert", no_wrap=True)
    t.add_column("state", no_wrap=True)
    t.add_column("GPU", justify="right", no_wrap=True)
    t.add_column("value", justify="right", no_wrap=True)
    t.add_column("since")
    t.add_column("summary", ratio=1, overflow="fold")
    order = sorted(alerts, key=lambda a: (a.state != "firing", a.active_since, a.name))
    for a in order:
        style = "bold red" if a.state == "firing" else "yellow"
        t.add_row(Text(a.name), Text(a.state, style=style), a.labels.get("gpu", ""),
                  f"{a.value:g}", _ago(a.active_since, now),
                  Text(a.annotations.get("summary", "")))
    return Fit(t, turn=False)


def idle_line(idle: Mapping[int, IdleState], price_per_gpu_hour: float | None,
              currency: str) -> Text:
    if not idle:
        return Text("idle policy: no reading yet", style="dim")
    now_idle = [i for i, s in sorted(idle.items()) if s.idle]
    text = Text("idle now: ", style="bold")
    if now_idle:
        text.append(f"GPU {', '.join(map(str, now_idle))} ({len(now_idle)} of {len(idle)})",
                    style="cyan")
    else:
        text.append("none")
    hours = sum(s.idle_seconds_total for s in idle.values()) / 3600
    text.append(f"   idle so far: {hours:.2f} GPU-hours")
    if price_per_gpu_hour is None:
        text.append(f"   cost: {NA} (no price per GPU-hour given)", style="dim")
    else:
        text.append(f"   cost: {hours * price_per_gpu_hour:.2f} {currency} at "
                    f"{price_per_gpu_hour:g} {currency}/GPU-hour")
    return text


def monitor_view(state: MonitorState,
                 history: Mapping[int, Sequence[GpuSample]] | None = None,
                 alerts: Sequence[Alert] | None = None, *,
                 price_per_gpu_hour: float | None = None, currency: str = "USD",
                 spark_width: int = 20, max_processes: int = 20) -> RenderableType:
    """The whole frame. `history`: recent samples per GPU index, oldest first (the last
    `spark_width` are drawn); `alerts`: the active ones (default: the state's)."""
    sample = state.sample
    if sample is None:
        return Text("gpuaudit monitor: waiting for the first sample", style="dim")
    history = {i: list(h)[-spark_width:] for i, h in (history or {}).items()}
    alerts = state.alerts if alerts is None else alerts
    head = Text(f"gpuaudit monitor  {sample.hostname}  ", style="bold")
    head.append(f"{sample.time:%Y-%m-%d %H:%M:%S %Z}".rstrip(), style="")
    head.append(f"  every {sample.interval_s:g} s  {len(sample.gpus)} GPUs", style="dim")
    parts: list[RenderableType] = [head]
    if sample.gpus:
        parts.append(Fit(gpu_table(sample, history, state.idle, state.xids), alternatives=[
            gpu_table(sample, history, state.idle, state.xids, compact=True)]))
    else:
        parts.append(Text("no GPUs in this sample", style="yellow"))
    parts += [processes_table(sample, max_processes), alerts_table(alerts, sample.time),
              idle_line(state.idle, price_per_gpu_hour, currency)]
    return Group(*parts)


def _num(value: float | None, fmt: str, unit: str = "") -> str:
    return NA if value is None else f"{value:{fmt}}{unit}"


def sample_line(sample: Sample) -> str:
    """One plain line per tick, for logs and pipes (no terminal to draw the live view on)."""
    parts = [f"{sample.time:%H:%M:%S}"]
    for g in sample.gpus:
        if g.error:
            parts.append(f"gpu{g.index} ERROR {g.error}")
            continue
        mem = (f"{g.memory_used_bytes / 1e9:.1f}/{g.memory_total_bytes / 1e9:.0f}GB"
               if g.memory_used_bytes is not None and g.memory_total_bytes else NA)
        parts.append(f"gpu{g.index} act {_num(g.activity_pct, '.0f', '%')} mem {mem} "
                     f"{_num(g.power_w, '.0f', 'W')} {_num(g.temperature_gpu_c, '.0f', 'C')}")
    return "  ".join(parts)


def history_table(points: Sequence[HistoryPoint]) -> Fit:
    """Stored telemetry, a row per point (raw sample or 1-minute mean)."""
    t = Table(box=None, header_style="bold")
    for col in ("time", "host", "gpu", "res", "util %", "SM act %", "mem GB", "power W",
                "temp °C", "SM MHz", "events"):
        t.add_column(col, justify="left" if col in ("time", "host", "events") else "right")
    for p in points:
        mem = None if p.memory_used_bytes is None else p.memory_used_bytes / 1e9
        events = p.error or ", ".join(p.clock_event_reasons or ())
        t.add_row(f"{p.time:%Y-%m-%d %H:%M:%S}", p.hostname, str(p.gpu), p.resolution.value,
                  _num(p.utilization_gpu_pct, ".0f"), _num(p.sm_activity_pct, ".0f"),
                  _num(mem, ".1f"), _num(p.power_w, ".0f"), _num(p.temperature_gpu_c, ".0f"),
                  _num(p.sm_clock_mhz, ".0f"), Text(events, style="red" if p.error else ""))
    return Fit(t, optional=("SM MHz", "res", "host"))
