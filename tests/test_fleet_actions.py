"""Actions on bad nodes: a dry run unless --apply, every one logged; a webhook POSTed to a
real local HTTP server; a tool that fails recorded without stopping the others. (Slurm's
drain runs against a real Slurm in test_fleet_slurm.py.)"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from gpuaudit.cli.app import app
from gpuaudit.errors import BadInputError
from gpuaudit.fleet.actions import MAX_REASON, ActionKind, carry_out, plan, reason_text
from gpuaudit.fleet.records import FleetReport
from gpuaudit.fleet.synthetic import Plant, SyntheticFleet
from gpuaudit.store import Store
from tests.support.cli import error_line

T0 = datetime(2026, 11, 1, 8, 0, tzinfo=timezone.utc)


@pytest.fixture
def hook():
    """A webhook receiver on 127.0.0.1: what was POSTed, and the status it answers."""
    received: list[dict] = []
    status = {"code": 204}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append({"type": self.headers["Content-Type"], "json": json.loads(body)})
            self.send_response(status["code"])
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", received, status
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def bad_fleet(tmp_path) -> str:
    db = str(tmp_path / "fleet.db")
    fleet = SyntheticFleet(nodes=6, gpus_per_node=2, seed=3,
                           plants={2: Plant(slow_gpu=1), 4: Plant(driver_version="570.86.15")})
    with Store(db) as store:
        for run in fleet.runs(T0):
            store.save(run)
    return db


def test_report_actions_are_a_dry_run_until_applied_and_always_logged(bad_fleet, hook,
                                                                      tmp_path):
    url, received, _ = hook
    log = tmp_path / "actions.jsonl"
    args = ["fleet", "report", "--db", bad_fleet, "--json", "--action", "webhook",
            "--action", "k8s-taint", "--webhook", url, "--action-log", str(log)]
    dry = CliRunner().invoke(app, args)
    assert dry.exit_code == 1
    report = FleetReport.model_validate_json(dry.stdout)
    assert [b.hostname for b in report.bad_nodes] == ["gpu-node-0002", "gpu-node-0004"]
    # Per node: the webhook, the taint and its reason annotation; nothing applied.
    assert [(a.node, a.kind.value) for a in report.actions] == [
        (n, k) for n in ("gpu-node-0002", "gpu-node-0004")
        for k in ("webhook", "k8s-taint", "k8s-taint")]
    assert not any(a.applied for a in report.actions) and received == []
    taint = report.actions[1]
    assert taint.argv == ("kubectl", "taint", "nodes", "gpu-node-0002",
                          "gpuaudit.io/unhealthy=true:NoSchedule", "--overwrite")
    assert report.actions[2].argv[-1] == f"gpuaudit.io/reason={taint.reason}"
    assert taint.reason.startswith("gpuaudit: GPU 1 (GPU-")
    assert report.actions[3].reason == ("gpuaudit: driver 570.86.15, the fleet expects "
                                        "580.159.04 (the majority of 6 nodes)")
    assert len(log.read_text().splitlines()) == 6

    done = CliRunner().invoke(app, [*args, "--apply"], env={"PATH": "/nonexistent"})
    report = FleetReport.model_validate_json(done.stdout)
    assert all(a.applied for a in report.actions)
    hooks = [a for a in report.actions if a.kind is ActionKind.WEBHOOK]
    assert all(a.ok and a.detail == "HTTP 204" for a in hooks)
    assert [r["json"]["node"] for r in received] == ["gpu-node-0002", "gpu-node-0004"]
    assert received[1]["json"]["reason"] == report.actions[3].reason
    assert received[0]["type"] == "application/json"
    # kubectl is not there: each of its actions failed, said why, and the others still ran.
    kube = [a for a in report.actions if a.kind is ActionKind.K8S_TAINT]
    assert all(a.ok is False and a.detail == "kubectl is not installed (not on PATH)"
               for a in kube)
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(logged) == 12 and [x["applied"] for x in logged] == [False] * 6 + [True] * 6


def test_a_webhook_that_refuses_is_recorded(hook, tmp_path):
    url, _, status = hook
    status["code"] = 500
    (done,) = carry_out(plan([ActionKind.WEBHOOK], [("n1", ["FAIL x: y"])], webhook=url),
                        dry_run=False, log=None)
    assert done.applied and done.ok is False and done.detail == "HTTP 500"


def test_bad_action_input_is_one_line_before_any_work(bad_fleet, tmp_path):
    no_url = CliRunner().invoke(app, ["fleet", "report", "--db", bad_fleet, "--action",
                                      "webhook"])
    assert error_line(no_url) == "--action webhook needs --webhook URL"
    bad_url = CliRunner().invoke(app, ["fleet", "report", "--db", bad_fleet, "--action",
                                       "webhook", "--webhook", "ftp://x"])
    assert "not an http:// or https:// URL" in error_line(bad_url)
    blocker = tmp_path / "file"
    blocker.write_text("")
    no_log = CliRunner().invoke(app, ["fleet", "report", "--db", bad_fleet, "--action",
                                      "slurm-drain", "--action-log", str(blocker / "a.jsonl")])
    assert "cannot write the action log" in error_line(no_log)
    with pytest.raises(BadInputError):
        plan([ActionKind.WEBHOOK], [], webhook=None)


def test_the_reason_fits_what_schedulers_keep():
    long = reason_text(["x" * 500, "second", "third"])
    assert len(long) <= MAX_REASON and long.endswith("… (+2 more)")
    assert reason_text(["FAIL a:\n b"]) == "gpuaudit: FAIL a: b"  # one line
    (drain,) = plan([ActionKind.SLURM_DRAIN], [("gpu-07", ["7 GPU(s)"])])
    assert drain.argv == ("scontrol", "update", "NodeName=gpu-07", "State=DRAIN",
                          "Reason=gpuaudit: 7 GPU(s)")
    (cordon,) = plan([ActionKind.K8S_CORDON], [("gpu-07", ["x"])])
    assert cordon.argv == ("kubectl", "cordon", "gpu-07")
    assert T0 + timedelta(0) < drain.at  # planned now
