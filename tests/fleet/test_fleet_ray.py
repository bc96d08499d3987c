"""`gpuaudit fleet run` on a real Ray cluster: a local multi-node cluster (ray.cluster_utils)
whose nodes offer GPUs to Ray and each replay a different recorded H200 machine
(tests/support/fleet_replays.py). One cluster serves the whole module: starting Ray nodes is
the slow part on a 2-core machine."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from gpuaudit.cli.app import app
from gpuaudit.fleet.node import REPLAY_ENV
from gpuaudit.fleet.records import FleetReport, FleetRun, NodeState
from gpuaudit.store import Store
from tests.support.cli import error_line
from tests.support.fleet_replays import documents, write_plans

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

# Ray notices a dead node by missed health checks: seconds here, not its default half minute.
FAST_DEATH = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
              "health_check_failure_threshold": 4}


def _node_args(plan: Path) -> dict:
    return {"num_cpus": 1, "num_gpus": 2, "env_vars": {REPLAY_ENV: str(plan)}}


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_plans(tmp_path_factory.mktemp("replays"), hold_s=600.0)


@pytest.fixture(scope="module")
def cluster(plans: dict[str, Path]):
    c = cluster_utils.Cluster(initialize_head=True, head_node_args={
        **_node_args(plans["h200-a"]), "include_dashboard": False, "_system_config": FAST_DEATH})
    try:
        c.add_node(**_node_args(plans["h200-b"]))
        c.add_node(**_node_args(plans["h200-c"]))
        c.wait_for_nodes()
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


def _alive_ids(c) -> set[str]:
    ray.init(address=c.address)
    try:
        return {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    finally:
        ray.shutdown()


def test_fleet_run_audits_every_node_and_the_report_names_the_bad_ones(cluster, tmp_path):
    db = tmp_path / "fleet.db"
    result = CliRunner().invoke(app, ["fleet", "run", "--address", cluster.address, "--db",
                                      str(db), "--json", "--timeout", "5m"])
    assert result.exit_code == 1, result.output  # h200-c has a FAIL finding
    doc = json.loads(result.stdout)
    fleet = FleetRun.model_validate(doc)
    assert sorted(n.hostname for n in fleet.nodes) == ["h200-a", "h200-b", "h200-c"]
    assert all(n.state is NodeState.DONE and n.saved for n in fleet.nodes)
    assert {n.ray_node_id for n in fleet.nodes} == _alive_ids(cluster)
    # The all-reduce across the three nodes ran, one gloo rank per node, result checked.
    figures = [m for m in fleet.collectives if m.name == "all_reduce_busbw"]
    assert figures and all(m.verified and m.value > 0 for m in figures)
    assert {(m.params["ranks"], m.params["nodes"], m.params["backend"]) for m in figures} \
        == {(3, 3, "gloo")}
    m = figures[-1]
    assert m.value == pytest.approx(m.params["busbw_factor"] * m.params["algbw_gbps"], rel=0.5)
    assert m.params["busbw_factor"] == pytest.approx(4 / 3)

    # Each node's run is in the store, tagged with the node it was measured on.
    recorded = documents()
    with Store(db, read_only=True) as store:
        runs = [store.get(s.id) for s in store.list_runs()]
    assert sorted(r.node.hostname for r in runs) == ["h200-a", "h200-b", "h200-c"]
    by_ray_id = {n.ray_node_id: n for n in fleet.nodes}
    for run in runs:
        node = run.node
        assert by_ray_id[node.ray_node_id].run_id == run.id and node.fleet_id == fleet.id
        machine = recorded[node.hostname][0]["machine"]
        assert node.gpu_uuids == tuple(g["uuid"] for g in machine["gpus"])
        assert node.gpu_serials == tuple(g["serial"] for g in machine["gpus"])
        assert run.source.startswith("replay ")

    report = CliRunner().invoke(app, ["fleet", "report", "--db", str(db), "--json"])
    assert report.exit_code == 1, report.output
    judged = FleetReport.model_validate_json(report.stdout)
    bad = {b.hostname: b.reasons for b in judged.bad_nodes}
    assert set(bad) == {"h200-b", "h200-c"}  # h200-a, healthy, is not named
    assert bad["h200-b"][0].startswith("GPU 1 (GPU-") and "matmul/" in bad["h200-b"][0]
    assert bad["h200-c"][0].startswith("FAIL pcie.width-degraded on GPU 0")
    assert "transfer/" in bad["h200-c"][1]
    assert judged.cross_node_fleet_id == fleet.id and judged.cross_node


def test_bad_input_is_one_line_and_exit_2(cluster, tmp_path, monkeypatch):
    # Nothing listens there: a one-line error at once, not Ray's minute of retries.
    closed = subprocess.run(
        [sys.executable, "-m", "gpuaudit", "fleet", "run", "--address", "127.0.0.1:9",
         "--db", str(tmp_path / "a.db")], capture_output=True, text=True, timeout=120)
    assert closed.returncode == 2
    assert closed.stderr.strip().splitlines() == [
        "gpuaudit: error: cannot reach the Ray cluster at 127.0.0.1:9: Connection refused"]
    # A store that cannot be written: refused before Ray is even asked.
    blocker = tmp_path / "file"
    blocker.write_text("")
    refused = CliRunner().invoke(app, ["fleet", "run", "--address", cluster.address,
                                       "--db", str(blocker / "fleet.db")])
    assert "is not a directory" in error_line(refused)
    # A cluster none of whose nodes offers the GPU resource.
    monkeypatch.setattr("gpuaudit.fleet.cluster.GPU_RESOURCE", "H100_ONLY")
    none = CliRunner().invoke(app, ["fleet", "run", "--address", cluster.address,
                                    "--db", str(tmp_path / "b.db")])
    assert error_line(none) == (f"the Ray cluster at {cluster.address} has no node with "
                                    "GPUs (no alive node offers the H100_ONLY resource)")
    assert not ray.is_initialized()  # the driver let go of the cluster


@pytest.mark.postgres
def test_a_store_that_stops_taking_writes_keeps_what_it_took(cluster, tmp_path, monkeypatch):
    from tests.conftest import pg_base_url

    base = sa.make_url(pg_base_url()).set(drivername="postgresql+psycopg")
    name = f"gpuaudit_t_fleet_{int(time.time() * 1000) % 10**9}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = base.set(drivername="postgresql", database=name).render_as_string(hide_password=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    from gpuaudit.cli import fleet as cli_fleet

    real_call = cli_fleet._Saver.__call__

    def save_then_refuse(self, run):
        outcome = real_call(self, run)
        with admin.connect() as conn:  # the server comes back read-only (a failover)
            conn.exec_driver_sql(f'ALTER DATABASE "{name}" SET default_transaction_read_only'
                                 " = on")
            conn.exec_driver_sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                                 f" WHERE datname = '{name}' AND pid <> pg_backend_pid()")
        return outcome

    monkeypatch.setattr(cli_fleet._Saver, "__call__", save_then_refuse)
    try:
        result = CliRunner().invoke(app, ["fleet", "run", "--address", cluster.address,
                                          "--db", url, "--json", "--no-collectives"])
        # After the progress lines (stderr is no terminal here), one line says it.
        assert result.exit_code == 2, result.output
        lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
        assert [ln for ln in lines if ln.startswith("gpuaudit: error: ")] == lines[-1:]
        message = lines[-1]
        assert "was not saved" in message and "kept in" in message
        fleet = FleetRun.model_validate_json(result.stdout)  # still printed in full
        saved = [n for n in fleet.nodes if n.saved]
        kept = [n for n in fleet.nodes if not n.saved]
        assert len(saved) == 1 and len(kept) == 2
        with admin.connect() as conn:
            conn.exec_driver_sql(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
        with Store(url, read_only=True) as store:
            assert [s.id for s in store.list_runs()] == [saved[0].run_id]
        for n in kept:
            assert Path(n.kept_at).is_file() and n.run_id in Path(n.kept_at).name
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def test_ctrl_c_keeps_the_runs_already_saved(cluster, tmp_path):
    from gpuaudit.cli.fleet import _Saver
    from gpuaudit.fleet.runner import run_fleet
    from gpuaudit.model import RunStatus

    saver = _Saver(str(tmp_path / "fleet.db"))

    def interrupt_after_first(p) -> None:
        if p.state == "done":
            raise KeyboardInterrupt

    fleet = run_fleet(cluster.address, save=saver, save_fleet=saver.save_fleet,
                      on_progress=interrupt_after_first, timeout_s=120.0)
    assert fleet.status is RunStatus.PARTIAL and fleet.collectives_skipped == "interrupted"
    assert len(fleet.nodes) == 3  # every node accounted for
    done = [n for n in fleet.nodes if n.state is NodeState.DONE]
    assert len(done) >= 1 and all(n.saved for n in done)
    assert {n.state for n in fleet.nodes} <= {NodeState.DONE, NodeState.INTERRUPTED}
    with Store(tmp_path / "fleet.db", read_only=True) as store:
        assert {s.id for s in store.list_runs()} == {n.run_id for n in done}
        assert store.fleet_rows().fleet_runs  # the partial fleet run is kept too


HUNG_S = 15.0


def test_a_killed_node_and_a_hung_node_are_reported_and_nothing_else_is_lost(
        cluster, plans, tmp_path):
    from gpuaudit.cli.fleet import _Saver
    from gpuaudit.fleet.runner import run_fleet

    doomed = cluster.add_node(**_node_args(plans["h200-d"]))  # holds 600 s, then killed
    hung_plan = tmp_path / "hung.json"
    hung = json.loads(plans["h200-d"].read_text())
    hung_plan.write_text(json.dumps({**hung, "inspect": str(plans["h200-d"].parent /
                                                            hung["inspect"])}))
    hung_node = cluster.add_node(**_node_args(hung_plan))  # holds 600 s, is not killed
    cluster.wait_for_nodes()
    db = tmp_path / "fleet.db"
    saver = _Saver(str(db))
    killed = threading.Event()
    seen: list[tuple[str, str, str]] = []

    def progress(p) -> None:
        seen.append((p.hostname, p.state, p.text))
        if (p.node.node_id == doomed.node_id and "holding" in p.text
                and not killed.is_set()):
            killed.set()
            threading.Thread(target=cluster.remove_node, args=(doomed,),
                             kwargs={"allow_graceful": False}, daemon=True).start()

    try:
        # The test waits this long for the hung node: long enough for the other four to start
        # (fresh workers on 5 raylets and 2 cores), the healthy ones to finish and the killed
        # one to be missed (2 s of health checks, a liveness look every 2 s).
        fleet = run_fleet(cluster.address, save=saver, save_fleet=saver.save_fleet,
                          on_progress=progress, timeout_s=HUNG_S, collectives=False)
    finally:
        if hung_node in cluster.worker_nodes:
            cluster.remove_node(hung_node)
    assert killed.is_set()
    by_node = {n.ray_node_id: n for n in fleet.nodes}
    lost = by_node[doomed.node_id]
    assert lost.state is NodeState.LOST and lost.hostname == "h200-d"
    assert lost.reason.startswith("the node left the Ray cluster")
    assert lost.last_step.startswith("bench (replay, holding")
    slow = by_node[hung_node.node_id]
    assert slow.state is NodeState.TIMED_OUT and slow.reason == f"no result within {HUNG_S:g} s"
    done = [n for n in fleet.nodes if n.state is NodeState.DONE]
    assert sorted(n.hostname for n in done) == ["h200-a", "h200-b", "h200-c"]
    assert all(n.saved for n in done) and saver.problem is None
    # Every host's progress was shown, running to an end.
    assert {h for h, state, _ in seen if state == "running"} >= {"h200-a", "h200-d"}
    with Store(db, read_only=True) as store:
        assert sorted(s.hostname for s in store.list_runs()) == ["h200-a", "h200-b", "h200-c"]
    report = CliRunner().invoke(app, ["fleet", "report", "--db", str(db), "--json"])
    bad = {b.hostname: b.reasons for b in FleetReport.model_validate_json(report.stdout)
           .bad_nodes}
    assert any(r.startswith(f"lost in fleet run {fleet.id}") for r in bad["h200-d"])
    assert "h200-a" not in bad
