"""The terminal view of a diagnosis (`gpuaudit doctor`) and of a tuning run (`gpuaudit tune`).

Pure functions from records to rich renderables (and `render_text`, the same as a string for
the Python API, which writes it to stderr itself). Laid out for 80 columns.
"""

from __future__ import annotations

import io
import shlex

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuaudit.model import Diagnosis, Observation, Severity, TuneResult

_STYLE = {Severity.FAIL: "red", Severity.WARN: "yellow", Severity.INFO: "cyan",
          Severity.PASS: "green"}


def _value(o: Observation) -> str:
    v = o.value
    if isinstance(v, float):
        v = f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    unit = o.unit
    if unit in ("fraction", "of the step", "of GPU span", "of span", "of launched",
                "of kernel time", "of window", "of communication time") \
            and isinstance(o.value, float):
        return f"{o.value * 100:.1f} %" + ("" if unit == "fraction" else f" {unit}")
    return f"{v} {unit}".strip()


def gain_text(low: float | None, high: float | None) -> str:
    if high is None:
        return "—"
    if low is None or abs(low - high) < 0.01:
        return f"up to ×{high:.2g}" if high >= 1.005 else "×1"
    return f"×{low:.2g}–{high:.2g}"


def doctor_view(d: Diagnosis, *, show_summary: bool = True) -> RenderableType:
    parts: list[RenderableType] = []
    head = Text("gpuaudit doctor", style="bold")
    if d.command:
        head.append(f"  {shlex.join(d.command)}"[:70], style="dim")
    parts.append(head)
    facts = [f"{d.duration_s:.1f} s watched"]
    if d.gpus:
        facts.append("GPU " + ",".join(map(str, d.gpus)))
    if d.exit_code is not None:
        facts.append(f"exit status {d.exit_code}")
    parts.append(Text(" · ".join(facts), style="dim"))
    if not d.findings and _little_evidence(d):
        parts.append(Text("No finding, but little to go on: no GPU telemetry, no step markers "
                          "and no profile. Mark steps with gpuaudit.step() and add "
                          "--profile-steps 5.", style="yellow"))
    elif not d.findings:
        parts.append(Text("No bottleneck found: nothing in the evidence below points to a "
                          "change worth making.", style="green"))
    for i, f in enumerate(d.findings, 1):
        line = Text(f"{i}. ", style="bold")
        line.append(f.severity.value, style=_STYLE[f.severity])
        line.append(f" {f.title}", style="bold")
        gpu = f" (GPU {f.gpu_index})" if f.gpu_index is not None else ""
        share = f", ~{f.share * 100:.0f} % of the time" if f.share > 0 else ""
        line.append(f"{gpu}{share}, {f.confidence} confidence  [{f.code}]", style="dim")
        parts.append(line)
        parts.append(Text(f"   {f.message}"))
        shared = {o.source for o in f.evidence}
        one = len(shared) == 1 and len(f.evidence) > 1
        for o in f.evidence:
            ev = Text(f"     {o.name}: ", style="dim")
            ev.append(_value(o))
            if not one:
                ev.append(f"  ({o.source})", style="dim")
            parts.append(ev)
        if one:
            parts.append(Text(f"     source: {shared.pop()}", style="dim"))
    if d.changes:
        table = Table(title="Changes, largest expected gain first", title_justify="left",
                      show_edge=False, pad_edge=False, expand=False)
        table.add_column("#", justify="right")
        table.add_column("change", ratio=3, overflow="fold")
        table.add_column("gain", no_wrap=True)
        table.add_column("for", no_wrap=True, style="dim")
        for c in d.changes:
            table.add_row(str(c.rank), c.action, gain_text(c.gain_low, c.gain_high), c.finding)
        parts.append(Text(""))
        parts.append(table)
        pasted = [c for c in d.changes if c.settings]
        if pasted:
            parts.append(Text("\nSettings to paste:", style="bold"))
            for c in pasted:
                parts.append(Text(f" {c.rank}. {c.gain_basis}", style="dim"))
                for ln in c.settings.splitlines():
                    parts.append(Text(f"    {ln}", style="green"))
    if show_summary and d.summary:
        parts.append(Text("\nWhat was measured:", style="bold"))
        for o in d.summary:
            parts.append(Text(f"  {o.name}: {_value(o)}", style=""))
    for kind, what in d.sources.items():
        parts.append(Text(f"{kind}: {what}", style="dim"))
    for note in d.notes:
        parts.append(Text(f"note: {note}", style="yellow"))
    return Group(*parts)


def _little_evidence(d: Diagnosis) -> bool:
    gpu = d.sources.get("gpu", "none")
    return gpu.startswith("none") and "steps" not in d.sources and "profiler" not in d.sources


def render_text(d: Diagnosis, width: int = 100) -> str:
    """The view as plain text (no colours), for a library user's stderr."""
    buf = io.StringIO()
    Console(file=buf, width=width, no_color=True, highlight=False,
            force_terminal=False).print(doctor_view(d))
    return buf.getvalue()


def _gb(n: int | None) -> str:
    return "—" if n is None else f"{n / 1e9:.1f}"


def tune_view(r: TuneResult) -> RenderableType:
    """The curve (throughput and memory against batch), the chosen point and why, the
    precision comparison, the accumulation plan, the loader sweep, the settings to paste."""
    parts: list[RenderableType] = [Text(f"gpuaudit tune  {r.model} on {r.device}, {r.precision}",
                                        style="bold")]
    if r.memory_capacity_bytes:
        parts.append(Text(f"memory {_gb(r.memory_capacity_bytes)} GB, limit "
                          f"{_gb(r.memory_limit_bytes)} GB ({r.margin:.0%} kept free)",
                          style="dim"))
    best = max((t.samples_per_s or 0 for t in r.trials if t.ok), default=0) or 1
    table = Table(show_edge=False, pad_edge=False, title="Throughput and memory against batch",
                  title_justify="left")
    for col, just in (("batch", "right"), ("samples/s", "right"), ("", "left"),
                      ("step ms", "right"), ("peak GB", "right"), ("", "left")):
        table.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
    for t in r.trials:
        mark = "◀ chosen" if t.batch == r.chosen_batch and t.ok else ""
        if not t.ok:
            table.add_row(str(t.batch), "—", "", "—", "—", Text((t.reason or "failed")[:40],
                                                               style="red"))
            continue
        over = r.memory_limit_bytes and t.peak_memory_bytes \
            and t.peak_memory_bytes > r.memory_limit_bytes
        table.add_row(str(t.batch), f"{t.samples_per_s or 0:,.0f}",
                      Text("█" * max(1, round(12 * (t.samples_per_s or 0) / best)),
                           style="green"),
                      f"{(t.step_s or 0) * 1000:.1f}", _gb(t.peak_memory_bytes),
                      Text("over the margin", style="yellow") if over else Text(mark, "bold"))
    parts.append(table)
    parts.append(Text(f"Chosen: {r.reason}" if r.chosen_batch else f"No batch: {r.reason}",
                      style="bold" if r.chosen_batch else "red"))
    if r.precisions:
        pt = Table(show_edge=False, pad_edge=False, title=f"Precisions at batch {r.chosen_batch}",
                   title_justify="left")
        for col in ("precision", "samples/s", "vs " + r.precision, "peak GB"):
            pt.add_column(col, justify="right" if col != "precision" else "left")
        base = next((t.samples_per_s for t in r.precisions if t.precision == r.precision
                     and t.ok), None)
        for t in r.precisions:
            rel = f"×{(t.samples_per_s or 0) / base:.2f}" if t.ok and base else "—"
            pt.add_row(t.precision + (" (fastest)" if t.precision == r.fastest_precision else ""),
                       f"{t.samples_per_s or 0:,.0f}" if t.ok else (t.reason or "failed")[:30],
                       rel, _gb(t.peak_memory_bytes))
        parts += [Text(""), pt]
    if r.accumulation:
        a = r.accumulation
        parts.append(Text(f"\nAccumulation: {a.micro_batch} × {a.world_size} GPU(s) × "
                          f"{a.accumulation_steps} steps = {a.global_batch} "
                          f"(target {a.target_global_batch})" + (f"; {a.note}" if a.note else "")))
    if r.loader_rates:
        rates = ", ".join(f"{w}: {v:,.0f}/s" for w, v in sorted(r.loader_rates.items()))
        parts.append(Text(f"Loader workers (samples/s): {rates}"))
        if r.loader_reason:
            parts.append(Text(f"  {r.loader_reason}", style="dim"))
    if r.settings:
        parts.append(Text("\nSettings to paste:", style="bold"))
        parts += [Text(f"    {ln}", style="green") for ln in r.settings.splitlines()]
    for note in r.notes:
        parts.append(Text(f"note: {note}", style="yellow"))
    return Group(*parts)
