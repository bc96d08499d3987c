"""The first screen of `gpuaudit run`: one terminal screen (80×40) that says what the machine
is, the verdict, the few figures that matter against the datasheet (one line each), every
finding with its advice (one entry each), and where the details are. The full tables are
`gpuaudit show RUN` (or `run --verbose`).

Nothing is cut: a line longer than the terminal wraps inside its column. When the findings
would push the screen past `HEIGHT` lines, the least severe are counted instead of shown
(`show` has them all)."""

from __future__ import annotations

import io
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gpuaudit.model import Finding, Machine, Measurement, Run, Severity
from gpuaudit.report.terminal import SEVERITY_STYLE, severity_text

HEIGHT = 40  # the screen the summary is made for (80×40), with the shell prompt after it
LABEL = 22  # width of the label column
TIME_UNITS = frozenset({"ns", "us", "µs", "ms", "s"})  # lower is better


def fmt(value: float) -> str:
    """A figure as people read it: 800.6, 4,226, 0.0112."""
    a = abs(value)
    if a >= 1000:
        return f"{value:,.0f}"
    if a >= 100:
        return f"{value:,.1f}"
    if a >= 1:
        return f"{value:.3g}" if a < 10 else f"{value:.1f}"
    return f"{value:.3g}"


@dataclass(frozen=True)
class Line:
    label: str
    text: Text


def _by(run: Run) -> dict[tuple[str, str], list[Measurement]]:
    found: dict[tuple[str, str], list[Measurement]] = {}
    for m in run.measurements:
        if m.value is not None:
            found.setdefault((m.suite, m.name), []).append(m)
    return found


def _flags(ms: Sequence[Measurement]) -> str:
    flags = []
    if any(m.verified is False for m in ms):
        flags.append("WRONG RESULT")
    if any(m.contended for m in ms):
        flags.append("contended: not judged")
    return f" [{'; '.join(flags)}]" if flags else ""


def _figure(ms: Sequence[Measurement], *, what: str = "", spec_word: str = "") -> Text:
    """One figure over the GPUs it was measured on: the median, and with several GPUs the
    lowest and which GPU; its % of the datasheet figure where there is one."""
    values = [m.value for m in ms if m.value is not None]
    first = ms[0]
    text = Text(f"{fmt(statistics.median(values))} {first.unit}")
    if what:
        text.append(f" {what}")
    pcts = [m.pct_of_spec for m in ms if m.pct_of_spec is not None]
    if pcts and first.spec_value:
        text.append(f" · {statistics.median(pcts):.0f} % of {fmt(first.spec_value)}"
                    + (f" {spec_word}" if spec_word else ""), style="bold")
    gpus = [m for m in ms if m.gpu_index is not None]
    if len(gpus) > 1:
        worst = (max if first.unit in TIME_UNITS else min)(gpus, key=lambda m: m.value or 0.0)
        text.append(f" (worst: GPU {worst.gpu_index}, {fmt(worst.value or 0.0)})",
                    style="dim")
    flags = _flags(ms)
    if flags:
        text.append(flags, style="yellow")
    return text


def _matmul(by: dict[tuple[str, str], list[Measurement]], cpu: bool) -> list[Line]:
    lines = []
    if cpu:
        parts = [f"{p} {fmt(by[('matmul', p)][0].value or 0.0)}" for p in ("fp64", "fp32")
                 if ("matmul", p) in by]
        if parts:
            lines.append(Line("matmul on the CPU", Text(" · ".join(parts) + " TFLOP/s")))
        return lines
    if ("matmul", "bf16_burst") in by:
        lines.append(Line("matmul bf16, burst", _figure(by[("matmul", "bf16_burst")])))
    if ("matmul", "bf16") in by:
        lines.append(Line("matmul bf16, sustained", _figure(by[("matmul", "bf16")])))
    for group in (("fp64", "fp32", "tf32"), ("fp16", "fp8", "int8")):
        found = [(p, by[("matmul", p)]) for p in group if ("matmul", p) in by]
        if not found:
            continue
        values, pcts = [], []
        for i, (_, ms) in enumerate(found):
            unit = ms[0].unit
            last = i == len(found) - 1 or found[i + 1][1][0].unit != unit
            values.append(fmt(statistics.median(m.value for m in ms if m.value is not None))
                          + (f" {unit}" if last else ""))
            got = [m.pct_of_spec for m in ms if m.pct_of_spec is not None]
            pcts.append(f"{statistics.median(got):.0f}" if got else "—")
        text = Text(" · ".join(values))
        if any(p != "—" for p in pcts):
            text.append(f" ({' · '.join(pcts)} %)", style="bold")
        flags = _flags([m for _, ms in found for m in ms])
        if flags:
            text.append(flags, style="yellow")
        lines.append(Line("matmul " + "·".join(p for p, _ in found), text))
    return lines


def _pair(by: dict[tuple[str, str], list[Measurement]], a: str, b: str, label: str,
          what: str = "", judged: bool = True) -> list[Line]:
    """Two figures of the same unit on one line: host→device / device→host."""
    ma, mb = by.get(("transfer", a), []), by.get(("transfer", b), [])
    if not ma and not mb:
        return []
    values = [fmt(statistics.median([m.value for m in ms if m.value is not None]))
              if ms else "—" for ms in (ma, mb)]
    ref = (ma or mb)[0]
    text = Text(f"{values[0]} / {values[1]} {ref.unit}" + (f" {what}" if what else ""))
    pcts = [round(m.pct_of_spec) for m in ma + mb if m.pct_of_spec is not None]
    if judged and pcts and ref.spec_value:
        share = f"{min(pcts)}" if min(pcts) == max(pcts) else f"{min(pcts)}–{max(pcts)}"
        text.append(f" · {share} % of {fmt(ref.spec_value)} (PCIe)", style="bold")
    flags = _flags(ma + mb)
    if flags:
        text.append(flags, style="yellow")
    return [Line(label, text)]


def _workloads(run: Run, by: dict[tuple[str, str], list[Measurement]]) -> list[Line]:
    lines = []
    for (suite, name), ms in by.items():
        parts = name.split("/")
        if suite == "train" and len(parts) == 3 and parts[2] == "throughput":
            model, mode = parts[0], parts[1]
            text = Text(f"{fmt(ms[0].value or 0.0)} samples/s")
            tokens = by.get((suite, f"{model}/{mode}/tokens"))
            if tokens:
                text = Text(f"{fmt(tokens[0].value or 0.0)} tokens/s")
            flops = by.get((suite, f"{model}/{mode}/model_flops"))
            if flops and flops[0].pct_of_spec is not None:
                text.append(f" · MFU {flops[0].pct_of_spec:.0f} %", style="bold")
            batch = ms[0].params.get("batch")
            if batch:
                text.append(f" (batch {batch})", style="dim")
            lines.append(Line(f"train {model} {mode}", text))
        if suite == "infer" and len(parts) == 5 and parts[4] == "latency":
            model, prec, mode, batch = parts[0], parts[1], parts[2], parts[3]
            text = Text(f"{fmt(ms[0].value or 0.0)} ms p50 at batch {batch.lstrip('b')}")
            tput = by.get((suite, f"{model}/{prec}/{mode}/{batch}/throughput"))
            if tput:
                text.append(f" · {fmt(tput[0].value or 0.0)} samples/s")
            mode_word = {"cudagraph": "CUDA graph", "compile": "compiled"}.get(mode, mode)
            lines.append(Line(f"infer {model} {prec}", text.append(f" ({mode_word})",
                                                                    style="dim")))
    return lines[:4]


def _host(by: dict[tuple[str, str], list[Measurement]]) -> list[Line]:
    lines = []
    triad = by.get(("host", "stream_triad"))
    if triad:
        best = max(triad, key=lambda m: m.value or 0.0)
        nodes = len(triad)
        lines.append(Line("host memory", Text(
            f"{fmt(best.value or 0.0)} GB/s STREAM triad"
            + (f" (best of {nodes} NUMA groups)" if nodes > 1 else ""))))
    decode = [ms[0] for (s, n), ms in by.items() if s == "host" and n.startswith("jpeg_")
              and n.endswith("_all")]
    gpu = by.get(("host", "jpeg_nvjpeg"))
    if decode or gpu:
        text = Text()
        if decode:
            best = max(decode, key=lambda m: m.value or 0.0)
            text.append(f"{fmt(best.value or 0.0)} images/s on "
                        f"{best.params.get('threads', 'all')} cores "
                        f"({best.params.get('library', '?')})")
        if gpu:
            text.append((" · " if decode else "") + f"nvJPEG {fmt(gpu[0].value or 0.0)}/s")
        lines.append(Line("JPEG decode", text))
    return lines


def figure_lines(run: Run) -> list[Line]:
    """The figures that matter, one line each, in the order the suites ran."""
    by = _by(run)
    cpu = not any(m.gpu_index is not None for ms in by.values() for m in ms)
    lines = _matmul(by, cpu)
    if ("memory", "copy") in by:
        lines.append(Line("memory copy" + (" (CPU)" if cpu else ""),
                          _figure(by[("memory", "copy")], what="(read + write)")))
    lines += _pair(by, "h2d_pinned", "d2h_pinned", "host→GPU / GPU→host", "pinned")
    lines += _pair(by, "h2d_pageable", "d2h_pageable", "  pageable",
                   "(x.to('cuda') / y.cpu())", judged=False)
    if ("p2p", "p2p_unidir") in by:
        lines.append(Line("GPU→GPU", _figure(by[("p2p", "p2p_unidir")], what="one way")))
    peak = by.get(("collectives", "all_reduce_busbw_peak"))
    if peak:
        p = peak[0].params
        where = (f" ({p.get('backend')}, {p.get('ranks')} "
                 f"{'CPU ranks' if p.get('backend') == 'gloo' else 'GPUs'})")
        lines.append(Line("all-reduce busbw", _figure(peak, what=where.strip())))
    if ("latency", "launch") in by:
        lines.append(Line("kernel launch", _figure(by[("latency", "launch")])))
    lines += _workloads(run, by)
    lines += _host(by)
    for (suite, name), label in ((("storage", "seq_read"), "storage read"),
                                 (("network", "tcp_send"), "network TCP")):
        if (suite, name) in by:
            lines.append(Line(label, _figure(by[(suite, name)])))
    return lines


def machine_text(m: Machine | None) -> list[Text]:
    """The machine in two lines: its GPUs and software, then the host."""
    if m is None:
        return [Text("machine: not recorded")]
    out = []
    if m.gpus:
        names: dict[str, list[int]] = {}
        for g in m.gpus:
            names.setdefault(g.name, []).append(g.index)
        mem = m.gpus[0].memory_total_bytes
        gpus = ", ".join(f"{len(ix)} × {escape(name)}" for name, ix in names.items())
        if mem:
            gpus += f" ({mem / (1 << 30):.1f} GiB)"
        soft = f"driver {m.driver_version or '?'} (CUDA {m.cuda_driver_version or '?'})"
        out.append(Text.from_markup(f"[bold]{gpus}[/], {soft}"))
    else:
        out.append(Text(f"No NVIDIA GPU: {m.nvml_error or 'NVML reports none'}",
                        style="yellow"))
    h = m.host
    bits = [h.hostname or "?", h.cpu_model or "CPU ?",
            f"{h.cpu_threads or '?'} threads",
            f"{h.memory_total_bytes / (1 << 30):.0f} GiB" if h.memory_total_bytes else "",
            h.os_name or "",
            " in ".join(x for x in (h.container, h.hypervisor) if x),
            f"torch {h.torch_version}" if h.torch_version else "no torch"]
    out.append(Text(" · ".join(escape(b) for b in bits if b), style="dim"))
    return out


def cpu_note(run: Run) -> Text | None:
    """What a run without a GPU measured: CPU figures, which say nothing about a GPU."""
    if any(m.gpu_index is not None for m in run.measurements if m.value is not None):
        return None
    if not any(m.value is not None for m in run.measurements):
        return None
    ranks = next((m.params.get("ranks") for m in run.measurements
                  if m.suite == "collectives" and m.value is not None), None)
    note = ("These are the CPU's figures (no GPU was measured): not comparable with a GPU's. "
            "matmul, memory and the reference models ran on the CPU")
    if ranks:
        note += f"; the collectives on gloo with {ranks} CPU ranks"
    return Text(note + ".", style="yellow")


def _group(findings: Iterable[Finding]) -> list[tuple[Finding, list[int]]]:
    """Non-PASS findings, the same code on several GPUs as one entry, worst first."""
    groups: dict[tuple[str, Severity], tuple[Finding, list[int]]] = {}
    for f in sorted(findings, key=lambda f: (-f.severity.rank, f.code, f.gpu_index or -1)):
        if f.severity is Severity.PASS:
            continue
        key = (f.code, f.severity)
        if key in groups:
            if f.gpu_index is not None:
                groups[key][1].append(f.gpu_index)
            continue
        groups[key] = (f, [f.gpu_index] if f.gpu_index is not None else [])
    return list(groups.values())


def _finding_row(f: Finding, gpus: list[int]) -> tuple[Text, Text]:
    text = Text()
    text.append(f.code, style="bold")
    if gpus:
        text.append(f" (GPU {', '.join(map(str, gpus))})")
    text.append(": " + f.message)
    if len(gpus) > 1:
        text.append(f" (GPU {gpus[0]}; the others alike)", style="dim")
    if f.advice:
        text.append(" → " + f.advice, style="cyan")
    return severity_text(f.severity), text


def _grid(rows: Sequence[tuple[RenderableType, RenderableType]], first: int) -> Table:
    t = Table.grid(padding=(0, 1))
    t.add_column(width=first, no_wrap=True)
    t.add_column(overflow="fold")
    for a, b in rows:
        t.add_row(a, b)
    return t


def _height(renderable: RenderableType, width: int) -> int:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, legacy_windows=False).print(renderable)
    return buf.getvalue().count("\n")


def footer(run_id: str | None, *, saved: bool) -> Table:
    """Where the details are: the commands, one a line, never split."""
    rid = run_id or "RUN"
    rows = ([(f"gpuaudit show {rid}", "every table (or: run --verbose)"),
             (f"gpuaudit report {rid} --html audit.html", "a page to share"),
             ("gpuaudit serve", "every run in a browser")] if saved else
            [("gpuaudit run --verbose", "every table"),
             ("gpuaudit run --json > run.json", "the whole run, which show, report and "
                                                "compare read")])
    t = Table.grid(padding=(0, 2))
    t.add_column(no_wrap=True, style="cyan")
    t.add_column()
    for cmd, what in rows:
        t.add_row(cmd, Text(what, style="dim"))
    return t


def run_summary(run: Run, *, run_id: str | None = None, saved: bool = True, width: int = 80,
                height: int = HEIGHT, verdict: Callable[[Run], Text] | None = None
                ) -> RenderableType:
    """The first screen (see the module doc) for a console `width` columns wide."""
    from gpuaudit.report.terminal import verdict_line

    parts: list[RenderableType] = [*machine_text(run.machine)]
    note = cpu_note(run)
    if note is not None:
        parts.append(note)
    head = (verdict or verdict_line)(run)
    if run.started_at and run.finished_at:
        head.append(f"  {(run.finished_at - run.started_at).total_seconds():.0f} s",
                    style="dim")
    parts += [Text(""), head]
    lines = figure_lines(run)
    if lines:
        gpus = {m.gpu_index for m in run.measurements
                 if m.value is not None and m.gpu_index is not None}
        title = Text("figures", style="bold")
        title.append(": measured · % of the datasheet figure"
                     + (f" (median of {len(gpus)} GPUs, the worst named)" if len(gpus) > 1
                        else ""), style="dim")
        parts += [Text(""), title,
                  _grid([(Text(ln.label, style="bold"), ln.text) for ln in lines], LABEL)]
    skipped = sum(1 for m in run.measurements if m.value is None)
    tail: list[RenderableType] = []
    if skipped:
        tail.append(Text(f"{skipped} figure(s) skipped, each with its reason in the full "
                         "tables", style="dim"))
    if saved and run_id:
        tail.append(Text(f"saved as run {run_id}", style="bold"))
    tail.append(footer(run_id, saved=saved))
    groups = _group(run.findings)
    shown = list(groups)
    while True:
        rows = [_finding_row(f, g) for f, g in shown]
        more = len(groups) - len(shown)
        block: list[RenderableType] = []
        if rows:
            block = [Text(""), _grid(rows, 4)]
        if more:
            hidden = groups[len(shown):]
            worst = max((f.severity for f, _ in hidden), key=lambda s: s.rank)
            block.append(Text(f"… and {more} more finding(s) (up to {worst.value}) in the "
                              "full tables", style=SEVERITY_STYLE[worst]))
        screen = Group(*parts, *block, Text(""), *tail)
        if not shown or _height(screen, width) <= height:
            return screen
        shown.pop()
