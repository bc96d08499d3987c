"""Judging a fleet by itself: each figure's median over the GPUs of one model, a robust spread
around it (the median absolute deviation, MAD), and the GPUs and nodes outside it.

Pure functions from the store's rows to a FleetReport; nothing here reads a database.

Why the median and MAD: a fleet's figures are mostly alike with a few bad ones, and a mean or
a standard deviation is pulled by exactly those. A value is outside the spread when its
modified z-score (Iglewicz & Hoaglin: (x − median) / (1.4826 · MAD)) passes OUTSIDE_Z *and* it
is more than MIN_GAP away from the median: a fleet of identical GPUs has a MAD near zero, and a
0.5 % wobble must not make a node bad.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from statistics import median

from gpuaudit.model import RunStatus, Severity

from .expect import Expectation, NodeFacts, judge, majority, model_of
from .records import (
    BadNode,
    Deviation,
    FailFinding,
    FigureSpread,
    FleetReport,
    FleetRows,
    FleetRun,
    GpuRow,
    NodeChange,
    NodeOutcome,
    NodeSummary,
)

OUTSIDE_Z = 3.5  # Iglewicz & Hoaglin's cut for an outlier by the modified z-score
MAD_SCALE = 1.4826  # MAD × this estimates the standard deviation of normal data
MIN_GAP = 0.05  # never outside within 5 % of the median (run-to-run noise of our benches)
MIN_MEMBERS = 3  # a median of two says nothing about which one is off
LOWER_IS_BETTER_UNITS = frozenset({"us", "ms", "s", "ns"})
MAX_CHANGES_LISTED = 6
SQRT2 = math.sqrt(2)

FigureKey = tuple[str, str, str, str]  # (model, suite, name, unit)


def lower_is_better(unit: str) -> bool:
    return unit in LOWER_IS_BETTER_UNITS


# A figure row, positionally: (run_id, suite, name, unit, value, gpu_index) (FigureRow's
# shape; the store hands plain tuples: a third of a million named tuples cost a second).
RUN, SUITE, NAME, UNIT, VALUE, GPU = range(6)


def _by_run(figures: Iterable[tuple]) -> dict[str, dict[tuple, tuple]]:
    """run → (suite, name, gpu_index) → figure, for the figures a run holds once per GPU (or
    once per node): a size sweep repeats a name with different sizes, which are not
    comparable without the size, so they are left out (their peak figure, e.g.
    all_reduce_busbw_peak, is kept)."""
    runs: dict[str, dict[tuple, tuple]] = {}
    repeated: set[tuple] = set()
    for f in figures:  # the hot loop of a big report: a third of a million rows
        mine = runs.get(f[RUN])
        if mine is None:
            mine = runs[f[RUN]] = {}
        key = (f[SUITE], f[NAME], f[GPU])
        if key in mine:
            repeated.add((f[RUN], key))
        mine[key] = f
    for run, key in repeated:
        del runs[run][key]
    return runs


def spread(values: Sequence[float], unit: str) -> tuple[float, float, float, float]:
    """(median, MAD, low, high) of `values`; outside [low, high] is outside the spread."""
    mid = median(values)
    mad = median([abs(v - mid) for v in values])
    half = max(OUTSIDE_Z * MAD_SCALE * mad, MIN_GAP * abs(mid))
    return mid, mad, mid - half, mid + half


class _Index:
    """The rows of one report, indexed the ways the judging needs."""

    def __init__(self, rows: FleetRows) -> None:
        self.latest = {n.run_id: n for n in rows.latest}
        self.previous_of = {}
        prev_by_host = {n.hostname: n for n in rows.previous}
        for n in rows.latest:
            if n.hostname in prev_by_host:
                self.previous_of[n.run_id] = prev_by_host[n.hostname]
        self.gpus: dict[tuple[str, int], GpuRow] = {(g.run_id, g.gpu_index): g
                                                    for g in rows.gpus}
        self.gpus_of: dict[str, list[GpuRow]] = defaultdict(list)
        for g in sorted(rows.gpus, key=lambda g: g.gpu_index):
            self.gpus_of[g.run_id].append(g)
        self.figures_of = _by_run(rows.figures)
        self.findings_of = defaultdict(list)
        for x in rows.findings:
            self.findings_of[x.run_id].append(x)

    def model(self, f: tuple) -> tuple[str, str] | None:
        """(model, scope) a figure of a latest run is compared within."""
        if f[GPU] is None:
            node = self.latest.get(f[RUN])
            return ((node.gpu_summary or "no GPU"), "node") if node else None
        gpu = self.gpus.get((f[RUN], f[GPU]))
        return (gpu.name, "gpu") if gpu else None


def _spreads(ix: _Index) -> tuple[list[FigureSpread], list[str]]:
    groups: dict[tuple[FigureKey, str], list[tuple]] = defaultdict(list)
    for run_id, node in ix.latest.items():
        # ix.model inlined: this loop sees every figure of the fleet (165,000 at 1,000 nodes).
        node_model = node.gpu_summary or "no GPU"
        names = {g.gpu_index: g.name for g in ix.gpus_of.get(run_id, ())}
        for (suite, name, gpu), f in ix.figures_of.get(run_id, {}).items():
            if gpu is None:
                groups[((node_model, suite, name, f[UNIT]), "node")].append(f)
            elif gpu in names:
                groups[((names[gpu], suite, name, f[UNIT]), "gpu")].append(f)
    spreads: list[FigureSpread] = []
    thin: Counter[tuple[str, str]] = Counter()
    for ((model, suite, name, unit), scope), members in sorted(groups.items()):
        if len(members) < MIN_MEMBERS:
            thin[(model, scope)] += 1
            continue
        mid, mad, low, high = spread([f[VALUE] for f in members], unit)
        lower = lower_is_better(unit)
        outside = []
        for f in members:
            value = f[VALUE]
            if low <= value <= high:
                continue
            node = ix.latest[f[RUN]]
            gpu = ix.gpus.get((f[RUN], f[GPU])) if f[GPU] is not None else None
            outside.append(Deviation(
                hostname=node.hostname, run_id=f[RUN], gpu_index=f[GPU],
                uuid=gpu.uuid if gpu else None, serial=gpu.serial if gpu else None,
                value=value, deviation_pct=_pct(value, mid),
                robust_z=(value - mid) / (MAD_SCALE * mad) if mad else None,
                worse=value > high if lower else value < low))
        spreads.append(FigureSpread(
            model=model, scope=scope, suite=suite, name=name, unit=unit, lower_is_better=lower,
            count=len(members), median=mid, mad=mad, low=low, high=high,
            outside=tuple(sorted(outside, key=lambda d: -abs(d.deviation_pct)))))
    notes = [f"{n} figure(s) of {model} not judged: fewer than {MIN_MEMBERS} "
             f"{'GPUs' if scope == 'gpu' else 'nodes'} of it measured them"
             for (model, scope), n in sorted(thin.items())]
    return spreads, notes


def _pct(value: float, reference: float) -> float:
    return round(100 * (value - reference) / reference, 2) if reference else 0.0


def _figure_reasons(spreads: list[FigureSpread]) -> dict[str, list[str]]:
    """Per host: one reason per GPU (or per node) that is worse than the fleet."""
    worse: dict[tuple[str, int | None], list[tuple[Deviation, FigureSpread]]] = defaultdict(list)
    for s in spreads:
        for d in s.outside:
            if d.worse:
                worse[(d.hostname, d.gpu_index)].append((d, s))
    reasons: dict[str, list[str]] = defaultdict(list)
    for (host, gpu_index), items in sorted(worse.items(), key=lambda kv: (kv[0][0],
                                                                          kv[0][1] or -1)):
        d, s = max(items, key=lambda item: abs(item[0].deviation_pct))
        who = (f"GPU {gpu_index}" + (f" ({d.uuid})" if d.uuid else "")
               if gpu_index is not None else "the node")
        side = "above" if s.lower_is_better else "below"
        reasons[host].append(
            f"{who}: {len(items)} figure(s) {side} the fleet's {s.model} spread, worst "
            f"{s.suite}/{s.name} {d.value:.4g} {s.unit} ({d.deviation_pct:+.0f}% vs median "
            f"{s.median:.4g})")
    return reasons


def _changes(ix: _Index, spreads: list[FigureSpread]) -> list[NodeChange]:
    noise = {(s.model, s.suite, s.name): (s.high - s.median) / abs(s.median)
             for s in spreads if s.median}
    changed = []
    for run_id, node in sorted(ix.latest.items(), key=lambda kv: kv[1].hostname):
        prev = ix.previous_of.get(run_id)
        if prev is None:
            continue
        lines = _identity_changes(ix.gpus_of.get(run_id, []), ix.gpus_of.get(prev.run_id, []))
        if node.driver_version != prev.driver_version:
            lines.append(f"driver {prev.driver_version} → {node.driver_version}")
        codes_now = {(x.code, x.gpu_index): x.severity for x in ix.findings_of.get(run_id, [])}
        codes_then = {(x.code, x.gpu_index): x.severity
                      for x in ix.findings_of.get(prev.run_id, [])}
        for (code, gpu), sev in sorted(codes_now.items(), key=str):
            if (code, gpu) not in codes_then:
                lines.append(f"new {sev} {code}" + (f" on GPU {gpu}" if gpu is not None else ""))
        for (code, gpu), sev in sorted(codes_then.items(), key=str):
            if (code, gpu) not in codes_now:
                lines.append(f"cleared {sev} {code}"
                             + (f" on GPU {gpu}" if gpu is not None else ""))
        lines += _figure_changes(ix, run_id, prev.run_id, noise)
        if lines:
            changed.append(NodeChange(hostname=node.hostname, run_id=run_id,
                                      previous_run_id=prev.run_id,
                                      previous_started_at=prev.started_at,
                                      changes=tuple(lines)))
    return changed


def _identity_changes(now: list[GpuRow], then: list[GpuRow]) -> list[str]:
    lines = []
    if len(now) != len(then):
        lines.append(f"GPU count {len(then)} → {len(now)}")
    before = {g.gpu_index: g for g in then}
    for g in now:
        old = before.get(g.gpu_index)
        if old is None:
            continue
        if g.uuid != old.uuid or g.serial != old.serial:
            lines.append(f"GPU {g.gpu_index} is other hardware: {old.uuid} (serial "
                         f"{old.serial}) → {g.uuid} (serial {g.serial})")
        elif g.vbios_version != old.vbios_version:
            lines.append(f"GPU {g.gpu_index} VBIOS {old.vbios_version} → {g.vbios_version}")
    return lines


def _figure_changes(ix: _Index, run_id: str, prev_id: str,
                    noise: dict[tuple[str, str, str], float]) -> list[str]:
    now, then = ix.figures_of.get(run_id, {}), ix.figures_of.get(prev_id, {})
    moved = []
    cheap = SQRT2 * MIN_GAP
    for key, f in now.items():
        old = then.get(key)
        if old is None or not old[VALUE]:
            continue
        change = (f[VALUE] - old[VALUE]) / abs(old[VALUE])
        if -cheap <= change <= cheap:
            continue  # within any figure's noise: the common case, decided cheaply
        where = ix.model(f)
        rel = noise.get((where[0], f[SUITE], f[NAME]), MIN_GAP) if where else MIN_GAP
        # A difference of two noisy figures spreads √2 times as wide as one of them.
        if abs(change) > SQRT2 * max(rel, MIN_GAP):
            moved.append((abs(change), f, old, change))
    moved.sort(key=lambda m: -m[0])
    lines = [f"{f[SUITE]}/{f[NAME]}" + (f" GPU {f[GPU]}" if f[GPU] is not None else "")
             + f": {old[VALUE]:.4g} → {f[VALUE]:.4g} {f[UNIT]} ({100 * change:+.0f}%)"
             for _, f, old, change in moved[:MAX_CHANGES_LISTED]]
    if len(moved) > MAX_CHANGES_LISTED:
        lines.append(f"... and {len(moved) - MAX_CHANGES_LISTED} more figure(s) moved")
    return lines


def _fleet_runs(documents: list[str]) -> list[FleetRun]:
    """The fleet runs, newest first; one that does not parse (a newer gpuaudit's) is left
    out, not fatal."""
    found = []
    for doc in documents:
        try:
            found.append(FleetRun.model_validate(json.loads(doc)))
        except ValueError:
            continue
    return found


def _facts(ix: _Index) -> list[tuple[str, NodeFacts]]:
    """(run id, what its audit showed) for each latest audit. The index holds no CUDA
    version (fleet run and fleet check judge that, from the whole document)."""
    found = []
    for run_id, node in ix.latest.items():
        gpus = ix.gpus_of.get(run_id, [])
        found.append((run_id, NodeFacts(
            name=node.hostname, gpu_count=len(gpus), gpu_model=model_of(g.name for g in gpus),
            driver_version=node.driver_version, cuda_version=None,
            nvml_error=None if gpus else "no GPU found in its latest audit")))
    return found


def _expected(ix: _Index, expect: Expectation | None, last: FleetRun | None
              ) -> tuple[Expectation | None, dict[str, list[str]], list[str]]:
    """What each node was expected to be, and per host why it is not."""
    facts = _facts(ix)
    notes: list[str] = []
    if expect is None and facts:
        expect, notes = majority([f for _, f in facts])
    reasons: dict[str, list[str]] = defaultdict(list)
    if expect is not None:
        for _, f in facts:
            reasons[f.name].extend(judge(f, expect))
    # The last fleet run judged the whole documents (the CUDA version too): its findings
    # stand for the audits it made.
    for outcome in last.nodes if last else ():
        node = ix.latest.get(outcome.run_id or "")
        if node is not None:
            reasons[node.hostname].extend(p for p in outcome.problems
                                          if p not in reasons[node.hostname])
    return expect, reasons, notes


def analyse(rows: FleetRows, *, now: datetime, since: datetime | None = None,
            expect: Expectation | None = None) -> FleetReport:
    """The fleet report from the store's rows (`Store.fleet_rows`); nodes judged against
    `expect` (None: the majority of the nodes)."""
    ix = _Index(rows)
    spreads, notes = _spreads(ix)
    fails = [FailFinding(hostname=ix.latest[x.run_id].hostname, run_id=x.run_id, code=x.code,
                         gpu_index=x.gpu_index, message=x.message)
             for run_id in ix.latest for x in ix.findings_of.get(run_id, [])
             if x.severity == Severity.FAIL.value]
    fails.sort(key=lambda f: (f.hostname, f.gpu_index or -1, f.code))
    reasons: dict[str, list[str]] = defaultdict(list)
    for f in fails:
        reasons[f.hostname].append(f"FAIL {f.code}"
                                   + (f" on GPU {f.gpu_index}" if f.gpu_index is not None
                                      else "") + f": {f.message}")
    for host, why in _figure_reasons(spreads).items():
        reasons[host].extend(why)
    by_host = {n.hostname: n for n in ix.latest.values()}
    fleet_runs = _fleet_runs(rows.fleet_runs)
    last = fleet_runs[0] if fleet_runs else None
    expectation, expected_why, expect_notes = _expected(ix, expect, last)
    notes += expect_notes
    for host, why in expected_why.items():
        if why:
            reasons[host].extend(why)
    cross = next((f for f in fleet_runs if any(m.value is not None for m in f.collectives)),
                 None)
    failed_nodes: dict[str, NodeOutcome] = {}
    if last is not None:
        for outcome in last.failed():
            audit = by_host.get(outcome.hostname)
            if audit is not None and audit.started_at > last.started_at:
                continue  # audited again since: that audit speaks for it
            failed_nodes[outcome.hostname] = outcome
            reasons[outcome.hostname].append(
                f"{outcome.state.value} in fleet run {last.id}: {outcome.reason or 'unknown'}"
                + (f" (at: {outcome.last_step})" if outcome.last_step else ""))
        if last.status is RunStatus.PARTIAL:
            notes.append(f"fleet run {last.id} was interrupted")
    bad = []
    for host in sorted(reasons):
        node = by_host.get(host)
        failed = failed_nodes.get(host)
        bad.append(BadNode(
            hostname=host, run_id=node.run_id if node else None,
            ray_node_id=(node.ray_node_id if node and node.ray_node_id
                         else failed.ray_node_id if failed else None),
            node_ip=(node.node_ip if node and node.node_ip
                     else failed.node_ip if failed else None),
            reasons=tuple(reasons[host])))
    nodes = tuple(NodeSummary(hostname=n.hostname, run_id=n.run_id, started_at=n.started_at,
                              ray_node_id=n.ray_node_id, node_ip=n.node_ip,
                              gpu_summary=n.gpu_summary, verdict=Severity(n.verdict))
                  for n in sorted(ix.latest.values(), key=lambda n: n.hostname))
    return FleetReport(
        generated_at=now, since=since, nodes=nodes,
        gpus=sum(len(ix.gpus_of.get(r, [])) for r in ix.latest),
        spreads=tuple(spreads), fail_findings=tuple(fails), changed=tuple(_changes(ix, spreads)),
        bad_nodes=tuple(bad), last_fleet_run=last,
        cross_node=cross.collectives if cross else (),
        cross_node_fleet_id=cross.id if cross else None, expectation=expectation,
        notes=tuple(notes))


__all__ = ["MIN_GAP", "MIN_MEMBERS", "OUTSIDE_Z", "analyse", "lower_is_better", "spread"]
