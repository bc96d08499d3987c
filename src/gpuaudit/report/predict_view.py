"""Terminal view of `gpuaudit predict`: the step before and after, the band, each operator
class, and what the figures rest on. Pure builders (nothing prints); 80 columns."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuaudit.predict.records import Prediction, Scenario


def _scenario(s: Scenario) -> str:
    tokens = f"×{s.tokens_per_sample}" if s.tokens_per_sample else ""
    return (f"{s.model} {s.mode}, {s.gpus} × {s.gpu}, batch {s.batch_per_gpu}{tokens}"
            + (" per GPU" if s.gpus > 1 else ""))


def _rate(value: float | None, low: float | None, high: float | None, unit: str) -> str:
    if value is None or low is None or high is None:
        return "n/a"
    return f"{value:,.4g} {unit} ({low:,.4g}–{high:,.4g})"


def summary(p: Prediction) -> Table:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    if p.dry_run:
        table.add_row(Text("DRY RUN", style="bold red"),
                      "recorded on a CPU: its operator times scaled by the GPU's rates, "
                      "not a forecast; record on the GPU for one")
    table.add_row("recorded", _scenario(p.source) + (" (CPU times)" if p.dry_run else ""))
    table.add_row("predicted", _scenario(p.target))
    table.add_row("changes", ", ".join(p.changes))
    band = f"{p.step_ms_low:,.4g}–{p.step_ms_high:,.4g}, ±{p.uncertainty_pct:.3g} %"
    table.add_row("step", f"{p.measured_step_ms:,.4g} ms → {p.step_ms:,.4g} ms ({band})")
    table.add_row("throughput", _rate(p.samples_per_s, p.samples_per_s_low,
                                      p.samples_per_s_high, "samples/s"))
    if p.tokens_per_s is not None:
        table.add_row("tokens", _rate(p.tokens_per_s, p.tokens_per_s_low, p.tokens_per_s_high,
                                      "tokens/s"))
    if p.allreduce_ms is not None:
        table.add_row("all-reduce", f"{p.allreduce_ms:,.3g} ms per step, "
                                    f"{p.exposed_allreduce_ms or 0:,.3g} ms not hidden")
    return table


def classes_table(p: Prediction) -> Table:
    table = Table(title="Per operator class (ms per step)", title_justify="left")
    for name, justify in (("class", "left"), ("recorded", "right"), ("achieved", "right"),
                          ("predicted", "right"), ("±", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for c in p.classes:
        table.add_row(c.op_class, f"{c.measured_ms:,.4g}",
                      f"{c.achieved_pct:.3g} %" if c.achieved_pct is not None else "n/a",
                      f"{c.predicted_ms:,.4g}", f"{c.uncertainty_pct:.3g} %")
    table.add_row("host gaps", "", "", f"{p.idle_ms:,.4g}", "")
    return table


def predict_view(p: Prediction) -> RenderableType:
    parts: list[RenderableType] = [summary(p), classes_table(p)]
    text = Text("achieved: the share of the class's ideal time (its work at this GPU's "
                "measured rates: matmul per precision and shape, memory copy) that the class "
                "reached in the recorded step.\n", style="dim")
    for c in p.classes:
        if c.basis != "unchanged":
            text.append(f"{c.op_class}: ", style="bold")
            text.append(c.basis + "\n")
    text.append("Basis:\n", style="bold")
    for b in p.basis:
        text.append(f"- {b}\n")
    for n in p.notes:
        text.append(f"note: {n}\n", style="yellow")
    parts.append(text)
    return Group(*parts)
