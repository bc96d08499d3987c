"""`fleet report`: each figure judged against the fleet's GPUs of the same model; the planted
slow GPU and narrow PCIe link are named, healthy nodes are not; changes between audits; the
nodes a fleet run could not audit. Synthetic fleets in a real SQLite file and PostgreSQL."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import jsonschema
import pytest
from typer.testing import CliRunner

from gpuaudit.cli.app import app
from gpuaudit.fleet.analysis import MIN_GAP, analyse, spread
from gpuaudit.fleet.records import (
    FigureRow,
    FleetReport,
    FleetRows,
    FleetRun,
    GpuRow,
    NodeOutcome,
    NodeRow,
    NodeState,
)
from gpuaudit.fleet.synthetic import Plant, SyntheticFleet
from gpuaudit.report.fleet_view import fleet_report, fleet_section
from gpuaudit.store import Store
from tests.support.cli import error_line

T0 = datetime(2026, 11, 1, 8, 0, tzinfo=timezone.utc)
SLOW, NARROW, SWAPPED = 3, 7, 5


def _save(url: str, fleet: SyntheticFleet, started: datetime, round_: int = 0) -> None:
    with Store(url) as store:
        for run in fleet.runs(started, round_=round_):
            store.save(run)


@pytest.fixture
def audited(store_url: str) -> str:
    fleet = SyntheticFleet(nodes=12, gpus_per_node=4, seed=7,
                           plants={SLOW: Plant(slow_gpu=2), NARROW: Plant(narrow_pcie_gpu=1)})
    _save(store_url, fleet, T0)
    return store_url


def test_the_slow_gpu_and_the_narrow_pcie_node_are_bad_and_no_healthy_one(audited: str):
    with Store(audited, read_only=True) as store:
        report = fleet_report(store, now=T0 + timedelta(hours=1))
    fleet = SyntheticFleet(nodes=12)
    assert len(report.nodes) == 12 and report.gpus == 48
    assert {b.hostname for b in report.bad_nodes} == {fleet.hostname(SLOW),
                                                      fleet.hostname(NARROW)}
    slow = next(b for b in report.bad_nodes if b.hostname == fleet.hostname(SLOW))
    assert len(slow.reasons) == 1 and slow.reasons[0].startswith("GPU 2 (GPU-")
    assert "below the fleet's NVIDIA H200 spread" in slow.reasons[0]
    narrow = next(b for b in report.bad_nodes if b.hostname == fleet.hostname(NARROW))
    assert narrow.reasons[0].startswith("FAIL pcie.width-degraded on GPU 1")
    assert "transfer/" in narrow.reasons[1] and narrow.reasons[1].startswith("GPU 1")
    assert narrow.ray_node_id == f"{NARROW:056x}"
    # Every value outside any spread belongs to the two planted GPUs.
    outside = {(d.hostname, d.gpu_index) for s in report.spreads for d in s.outside}
    assert outside == {(fleet.hostname(SLOW), 2), (fleet.hostname(NARROW), 1)}
    bf16 = next(s for s in report.spreads if (s.suite, s.name) == ("matmul", "bf16"))
    assert bf16.count == 48 and bf16.model == "NVIDIA H200" and bf16.scope == "gpu"
    assert bf16.low < 684.0 < bf16.high
    (dev,) = bf16.outside
    assert dev.worse and -33 < dev.deviation_pct < -27 and dev.robust_z < -3.5
    # Node-wide figures are compared among nodes of the same make-up.
    peak = next(s for s in report.spreads if s.name == "all_reduce_busbw_peak")
    assert peak.scope == "node" and peak.model == "4× NVIDIA H200" and peak.count == 12
    assert [f.code for f in report.fail_findings] == ["pcie.width-degraded"]
    assert report.changed == () and report.bad


def test_a_second_audit_shows_what_changed_on_each_node(audited: str):
    fixed = SyntheticFleet(nodes=12, gpus_per_node=4, seed=7, plants={
        NARROW: Plant(narrow_pcie_gpu=1),
        SWAPPED: Plant(swapped_gpu=1, driver_version="580.200.01")})
    _save(audited, fixed, T0 + timedelta(days=1), round_=1)
    with Store(audited, read_only=True) as store:
        report = fleet_report(store)
    changed = {c.hostname: c.changes for c in report.changed}
    assert set(changed) == {fixed.hostname(SLOW), fixed.hostname(SWAPPED)}
    swapped = changed[fixed.hostname(SWAPPED)]
    assert any(c.startswith("GPU 1 is other hardware: GPU-") for c in swapped)
    assert "driver 580.159.04 → 580.200.01" in swapped
    repaired = changed[fixed.hostname(SLOW)]
    assert any(c.startswith("matmul/") and " GPU 2: " in c and "(+4" in c for c in repaired)
    # The node whose driver differs from the rest of the fleet's is bad too.
    bad = {b.hostname: b.reasons for b in report.bad_nodes}
    assert set(bad) == {fixed.hostname(NARROW), fixed.hostname(SWAPPED)}
    assert bad[fixed.hostname(SWAPPED)] == (
        "driver 580.200.01, the fleet expects 580.159.04 (the majority of 12 nodes)",)
    assert report.expectation.gpu_count == 4 and report.expectation.gpu_model == "NVIDIA H200"
    # --since leaves out the nodes not audited in the period
    with Store(audited, read_only=True) as store:
        recent = fleet_report(store, since=T0 + timedelta(hours=12))
        rows = store.fleet_rows(since=T0 + timedelta(hours=12))
    assert len(recent.nodes) == 12 and len(rows.previous) == 12
    assert fleet_report(Store(audited, read_only=True),
                        since=T0 + timedelta(days=2)).nodes == ()


def test_cli_report_json_exit_code_and_schema(audited: str):
    result = CliRunner().invoke(app, ["fleet", "report", "--db", audited, "--json"])
    assert result.exit_code == 1, result.output  # a bad node: schedulers gate on this
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, FleetReport.model_json_schema())
    assert doc["kind"] == "fleet-report" and doc["schema_version"] == 1
    assert len(doc["bad_nodes"]) == 2
    text = CliRunner().invoke(app, ["fleet", "report", "--db", audited])
    assert text.exit_code == 1
    assert "Bad nodes" in text.stdout and "gpu-node-0003" in text.stdout
    section = fleet_section(FleetReport.model_validate(doc))
    assert section["bad"] and section["headline"] == "12 node(s), 48 GPU(s) audited; 2 bad " \
                                                     "node(s)"
    assert {s["name"] for s in section["outside"]} >= {"bf16", "h2d_pinned"}


def test_an_empty_store_is_no_bad_node(tmp_path):
    result = CliRunner().invoke(app, ["fleet", "report", "--db", str(tmp_path / "new.db")])
    assert "no store at" in error_line(result) and not (tmp_path / "new.db").exists()
    Store(tmp_path / "empty.db").close()
    result = CliRunner().invoke(app, ["fleet", "report", "--db", str(tmp_path / "empty.db")])
    assert result.exit_code == 0 and "no audits stored" in result.stdout


def _outcome(host: str, state: NodeState, reason: str | None = None) -> NodeOutcome:
    return NodeOutcome(ray_node_id=f"ray-{host}", hostname=host, node_ip="10.0.0.9", gpus=4,
                       state=state, reason=reason, last_step="bench matmul")


def test_nodes_the_last_fleet_run_could_not_audit_are_bad_until_audited(audited: str):
    fleet_run = FleetRun(id="f1", address="head:6379", profile="quick", tool_version="x",
                         started_at=T0 + timedelta(minutes=30), nodes=(
                             _outcome("gpu-node-0001", NodeState.DONE),
                             _outcome("gpu-node-0099", NodeState.TIMED_OUT,
                                      "no result within 600 s"),
                             _outcome("gpu-node-0004", NodeState.LOST, "the node left")))
    with Store(audited) as store:
        store.save_fleet_run(fleet_run.id, fleet_run.started_at, None,
                             fleet_run.model_dump_json())
        report = fleet_report(store)
    bad = {b.hostname: b for b in report.bad_nodes}
    assert bad["gpu-node-0099"].reasons == (
        "timed_out in fleet run f1: no result within 600 s (at: bench matmul)",)
    assert bad["gpu-node-0099"].run_id is None
    assert bad["gpu-node-0099"].ray_node_id == "ray-gpu-node-0099"
    assert "lost in fleet run f1" in bad["gpu-node-0004"].reasons[0]
    # gpu-node-0004 audited again after the fleet run: that audit speaks for it
    fleet = SyntheticFleet(nodes=12, gpus_per_node=4, seed=7)
    with Store(audited) as store:
        store.save(fleet.run(4, T0 + timedelta(hours=2), round_=3))
        assert "gpu-node-0004" not in {b.hostname for b in fleet_report(store).bad_nodes}


# -- the judging itself, on hand-made rows --------------------------------------------------


def _rows(values: list[float], unit: str = "GB/s") -> FleetRows:
    nodes = [NodeRow(f"r{i}", f"h{i}", T0, None, None, None, "580", "1× X", "PASS")
             for i in range(len(values))]
    gpus = [GpuRow(f"r{i}", 0, "X", f"GPU-{i}", None, None) for i in range(len(values))]
    figures = [FigureRow(f"r{i}", "s", "f", unit, v, 0) for i, v in enumerate(values)]
    return FleetRows(nodes, [], gpus, figures, [], [])


def _outside(values: list[float], unit: str = "GB/s") -> list[str]:
    report = analyse(_rows(values, unit), now=T0)
    return [d.hostname for s in report.spreads for d in s.outside if d.worse]


def test_identical_gpus_flag_only_beyond_the_minimum_gap():
    assert _outside([100, 100, 100, 100, 90]) == ["h4"]
    assert _outside([100, 100, 100, 100, 100 * (1 - MIN_GAP) + 0.1]) == []


def test_spread_is_median_and_mad():
    mid, mad, low, high = spread([1.0, 2.0, 3.0, 4.0, 100.0], "GB/s")
    assert (mid, mad) == (3.0, 1.0)
    assert low == pytest.approx(3 - 3.5 * 1.4826) and high == pytest.approx(3 + 3.5 * 1.4826)


def test_latency_is_worse_when_higher():
    assert _outside([10, 10.2, 9.9, 10.1, 20], unit="us") == ["h4"]
    assert _outside([10, 10.2, 9.9, 10.1, 5], unit="us") == []  # faster is not bad
    assert _outside([100, 101, 99, 100, 200]) == []  # more throughput is not bad either


def test_a_model_with_fewer_than_three_gpus_is_not_judged():
    report = analyse(_rows([100, 50]), now=T0)
    assert report.spreads == () and report.bad_nodes == ()
    assert "not judged: fewer than 3 GPUs" in report.notes[0]


def test_a_size_sweep_is_left_out_and_its_peak_kept():
    from gpuaudit.fleet.analysis import _by_run

    rows = [FigureRow("r1", "collectives", "all_reduce_busbw", "GB/s", v, None)
            for v in (10.0, 90.0, 300.0)]
    rows += [FigureRow("r1", "collectives", "all_reduce_busbw_peak", "GB/s", 300.0, None),
             FigureRow("r1", "matmul", "bf16", "TFLOP/s", 680.0, 0),
             FigureRow("r2", "collectives", "all_reduce_busbw", "GB/s", 12.0, None)]
    runs = _by_run(rows)
    assert set(runs["r1"]) == {("collectives", "all_reduce_busbw_peak", None),
                               ("matmul", "bf16", 0)}
    assert set(runs["r2"]) == {("collectives", "all_reduce_busbw", None)}  # once: kept
