"""The fleet in the terminal (`fleet run`, `fleet report`), and the fleet report's data for
other views (the HTML report): `fleet_report(store)` and `fleet_section(report)`.

Nothing here prints."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gpuaudit.fleet.records import FigureSpread, FleetReport, FleetRun, NodeOutcome, NodeState
from gpuaudit.model import Measurement, Severity, utc_now
from gpuaudit.report.terminal import SEVERITY_STYLE

STATE_STYLE = {NodeState.DONE: "green", NodeState.FAILED: "bold red",
               NodeState.TIMED_OUT: "bold red", NodeState.LOST: "bold red",
               NodeState.INTERRUPTED: "yellow"}


def fleet_report(store: Any, since: datetime | None = None,
                 now: datetime | None = None, expect: Any = None) -> FleetReport:
    """The fleet report from an open `Store` (read-only is enough): the data `fleet report`
    shows, for any view that wants it. `expect`: an Expectation (None: the fleet's
    majority)."""
    from gpuaudit.fleet.analysis import analyse

    return analyse(store.fleet_rows(since), now=now or utc_now(), since=since, expect=expect)


def fleet_section(report: FleetReport) -> dict[str, Any]:
    """The report as plain JSON-ready data, shaped for a page section: a headline, the bad
    nodes, then the figures that have nodes outside the spread."""
    return {
        "title": "Fleet",
        "headline": headline(report),
        "bad": report.bad,
        "report": report.model_dump(mode="json"),
        "outside": [s.model_dump(mode="json") for s in report.spreads if s.outside],
    }


def headline(report: FleetReport) -> str:
    if not report.nodes and report.last_fleet_run is None:
        return "no audits stored: `gpuaudit fleet run` makes them"
    bad = len(report.bad_nodes)
    return (f"{len(report.nodes)} node(s), {report.gpus} GPU(s) audited; "
            + (f"{bad} bad node(s)" if bad else "no bad node"))


def _num(value: float | None, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:.4g} {unit}".rstrip()


# -- fleet run ------------------------------------------------------------------------------


def outcome_table(nodes: tuple[NodeOutcome, ...] | list[NodeOutcome]) -> Table:
    t = Table(title="Nodes", title_justify="left", header_style="bold")
    for col in ("node", "Ray node", "GPUs", "state", "verdict", "run", "s", "why"):
        t.add_column(col, justify="right" if col in ("GPUs", "s") else "left")
    for n in sorted(nodes, key=lambda n: (n.state is NodeState.DONE, n.hostname)):
        why = n.reason or ""
        if n.last_step:
            why += f" (at: {n.last_step})"
        if n.kept_at:
            why += f"; kept in {n.kept_at}"
        why = "\n".join(x for x in (why, *n.problems) if x)
        t.add_row(escape(n.hostname), n.ray_node_id[:12], str(n.gpus),
                  Text(n.state.value, style=STATE_STYLE[n.state]),
                  Text(n.verdict.value, style=SEVERITY_STYLE[n.verdict]) if n.verdict else "",
                  n.run_id or "", f"{n.elapsed_s:.0f}" if n.elapsed_s is not None else "",
                  escape(why))
    return t


def collectives_table(figures: tuple[Measurement, ...], skipped: str | None) -> RenderableType:
    if not figures:
        return Text(f"all-reduce across nodes: not run ({skipped or 'no figures'})",
                    style="dim")
    first = figures[0].params
    t = Table(title=f"all-reduce across {first.get('nodes')} nodes, {first.get('ranks')} "
                    f"ranks ({first.get('backend')}; busbw = algbw × 2(n−1)/n)",
              title_justify="left", header_style="bold")
    for col in ("size", "busbw GB/s", "algbw GB/s", "time µs", "check"):
        t.add_column(col, justify="right")
    for m in figures:
        if m.name.endswith("_peak"):
            continue
        size = m.params.get("size_bytes")
        if m.value is None:
            t.add_row(str(size), "skipped", "", "", escape(m.skipped_reason or ""))
            continue
        t.add_row(str(size), _num(m.value), _num(_float(m.params.get("algbw_gbps"))),
                  _num(_float(m.params.get("time_us"))),
                  "ok" if m.verified else Text("WRONG", style="bold red"))
    return t


def _float(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) else None


def fleet_run_view(run: FleetRun) -> RenderableType:
    done = sum(1 for n in run.nodes if n.state is NodeState.DONE)
    head = Text(f"fleet run {run.id} ({run.profile}) on {run.address}: {done} of "
                f"{len(run.nodes)} node(s) audited", style="bold")
    parts: list[RenderableType] = [head, outcome_table(run.nodes),
                                   collectives_table(run.collectives, run.collectives_skipped)]
    if run.expectation is not None:
        e = run.expectation
        wanted = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in (
            ("gpu_count", e.gpu_count), ("gpu_model", e.gpu_model),
            ("driver_version", e.driver_version), ("cuda_version", e.cuda_version))
            if v is not None)
        parts.append(Text(f"judged against {e.source}: {wanted or 'nothing known'}",
                          style="dim"))
    if run.failed():
        parts.append(Text(f"{len(run.failed())} node(s) not audited: see 'why' above",
                          style="bold red"))
    differing = [n for n in run.nodes if n.problems]
    if differing:
        parts.append(Text(f"{len(differing)} node(s) not what the fleet expects: see 'why'",
                          style="bold red"))
    parts.extend(Text(f"note: {note}", style="dim") for note in run.notes)
    parts.append(Text("`gpuaudit fleet report` judges the nodes against the fleet",
                      style="dim"))
    return Group(*parts)


# -- fleet report ---------------------------------------------------------------------------


def _spread_table(spreads: list[FigureSpread]) -> Table:
    t = Table(title="Figures with GPUs or nodes outside the fleet's spread", title_justify="left",
              header_style="bold")
    for col in ("model", "figure", "n", "median", "MAD", "outside: node GPU value (vs median)"):
        t.add_column(col, justify="right" if col in ("n", "median", "MAD") else "left")
    for s in spreads:
        outside = "\n".join(
            f"{d.hostname} {'' if d.gpu_index is None else f'GPU {d.gpu_index} '}"
            f"{_num(d.value)} ({d.deviation_pct:+.0f}%)" + ("" if d.worse else " better")
            for d in s.outside)
        t.add_row(escape(s.model), f"{s.suite}/{s.name}", str(s.count),
                  _num(s.median, s.unit), _num(s.mad), escape(outside))
    return t


def fleet_report_view(report: FleetReport, *, show_all: bool = False) -> RenderableType:
    parts: list[RenderableType] = [Text(headline(report), style="bold")]
    if report.nodes:
        t = Table(title="Nodes (latest audit each)", title_justify="left", header_style="bold")
        for col in ("node", "GPUs", "verdict", "run", "audited"):
            t.add_column(col)
        for n in report.nodes:
            t.add_row(escape(n.hostname), escape(n.gpu_summary or ""),
                      Text(n.verdict.value, style=SEVERITY_STYLE[n.verdict]), n.run_id,
                      f"{n.started_at:%Y-%m-%d %H:%M}")
        parts.append(t)
    judged = [s for s in report.spreads if s.outside] if not show_all else list(report.spreads)
    parts.append(Text(f"{len(report.spreads)} figure(s) judged per GPU model; "
                      f"{sum(1 for s in report.spreads if s.outside)} with values outside the "
                      f"spread (median ± max(3.5 × 1.4826 × MAD, 5 %))", style="dim"))
    if judged:
        parts.append(_spread_table(judged))
    if report.fail_findings:
        t = Table(title="FAIL findings", title_justify="left", header_style="bold")
        for col in ("node", "GPU", "code", "message"):
            t.add_column(col)
        for f in report.fail_findings:
            t.add_row(escape(f.hostname), "" if f.gpu_index is None else str(f.gpu_index),
                      Text(f.code, style=SEVERITY_STYLE[Severity.FAIL]), escape(f.message))
        parts.append(t)
    if report.changed:
        t = Table(title="Changed since the node's previous audit", title_justify="left",
                  header_style="bold")
        t.add_column("node")
        t.add_column("previous run")
        t.add_column("what changed")
        for c in report.changed:
            t.add_row(escape(c.hostname), f"{c.previous_run_id} "
                      f"({c.previous_started_at:%Y-%m-%d %H:%M})", escape("\n".join(c.changes)))
        parts.append(t)
    if report.cross_node:
        parts.append(collectives_table(report.cross_node, None))
        within = [s for s in report.spreads
                  if s.scope == "node" and s.suite == "collectives"
                  and s.name == "all_reduce_busbw_peak"]
        parts.extend(Text(f"beside it, within one node ({s.model}): all_reduce_busbw_peak "
                          f"median {_num(s.median, s.unit)} over {s.count} nodes", style="dim")
                     for s in within)
    if report.bad_nodes:
        t = Table(title="Bad nodes", title_justify="left", header_style="bold red")
        t.add_column("node")
        t.add_column("Ray node")
        t.add_column("why")
        for b in report.bad_nodes:
            t.add_row(Text(b.hostname, style="bold red"), (b.ray_node_id or "")[:12],
                      escape("\n".join(b.reasons)))
        parts.append(t)
    for note in report.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    return Group(*parts)
