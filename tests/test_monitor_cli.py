"""`gpuaudit monitor` as a user runs it, on telemetry traces replayed through the same path."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from gpuaudit.model import SCHEMA_VERSION
from tests.conftest import cli_env
from tests.support.cli import ROOT, assert_one_line_error, gpuaudit

from . import telemetry_traces as tt

TRACES = ROOT / "tests/fixtures/telemetry"


@pytest.fixture
def db(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'gpuaudit.db'}"


def ticks(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def test_replay_json_one_line_per_sample_and_history_kept(db):
    proc = gpuaudit("monitor", "--replay", str(TRACES / "h200-1gpu-load.json"), "--json",
                    "--no-export", "--db", db)
    assert proc.returncode == 0, proc.stderr
    lines = ticks(proc.stdout)
    assert len(lines) == 10
    util = [t["sample"]["gpus"][0]["utilization_gpu_pct"] for t in lines]
    assert util == [0, 0, 100, 100, 100, 100, 100, 100, 0, 0]
    assert lines[3]["sample"]["gpus"][0]["sm_activity_pct"] == 96.0
    start = lines[0]["sample"]["time"]
    hist = gpuaudit("monitor", "history", "--since", start, "--gpu", "0", "--json", "--db", db)
    assert hist.returncode == 0, hist.stderr
    doc = json.loads(hist.stdout)
    assert doc["schema_version"] == SCHEMA_VERSION
    points = doc["points"]
    assert [p["utilization_gpu_pct"] for p in points] == util
    assert {p["resolution"] for p in points} == {"raw"}


def test_xid_fires_its_alert_and_reaches_the_webhook(tmp_path):
    got: list[dict] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        proc = gpuaudit("monitor", "--replay", str(TRACES / "h200-2gpu-xid-lost.json"),
                        "--json", "--no-export", "--no-history", "--webhook",
                        f"http://127.0.0.1:{server.server_port}/hook")
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stderr
    lines = ticks(proc.stdout)
    firing = [{a["name"] for a in t["alerts"] if a["state"] == "firing"} for t in lines]
    assert "GpuXidCritical" not in firing[2] and "GpuXidCritical" in firing[3]
    assert lines[3]["xid_counts"] == [{"gpu": 1, "xid": 79, "count": 1}]
    pending = {a["name"] for a in lines[5]["alerts"] if a["state"] == "pending"}
    assert "GpuLost" in pending  # for: 1m, and the trace ends 2 s after the loss
    assert lines[5]["sample"]["gpus"][1]["error"] == "GPU is lost"
    assert lines[5]["sample"]["gpus"][0]["utilization_gpu_pct"] == 100
    posted = [a for body in got for a in body["alerts"]]
    assert any(a["labels"]["alertname"] == "GpuXidCritical" and a["labels"]["gpu"] == "1"
               and a["status"] == "firing" for a in posted)
    assert "GpuXidCritical" in proc.stderr  # the log line too


def test_once_exits_1_on_a_critical_alert(tmp_path):
    trace = tt.idle_trace("h200-1gpu", 1)
    tt.xid(trace["frames"][0]["calls"], 0, 48)
    path = tmp_path / "xid.json"
    path.write_text(json.dumps(trace))
    proc = gpuaudit("monitor", "--once", "--replay", str(path), "--json")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert [a["name"] for a in doc["alerts"] if a["state"] == "firing"] == ["GpuXidCritical"]
    healthy = gpuaudit("monitor", "--once", "--replay", str(TRACES / "h200-1gpu-idle.json"))
    assert healthy.returncode == 0, healthy.stderr
    assert "H200" in healthy.stdout and "no active alerts" in healthy.stdout


def test_idle_policy_dry_run_then_enabled(tmp_path):
    marker = tmp_path / "acted"
    log = tmp_path / "idle.jsonl"
    common = ["monitor", "--replay", str(TRACES / "h200-1gpu-idle.json"), "--no-export",
              "--no-history", "--no-rules", "--idle-window", "3s", "--idle-grace", "2s",
              "--idle-action", f"touch {marker}", "--idle-log", str(log),
              "--price-usd-per-gpu-hour", "3.6"]
    dry = gpuaudit(*common)
    assert dry.returncode == 0, dry.stderr
    decisions = [json.loads(x) for x in log.read_text().splitlines()]
    # The GPU's own warning, the host's (every GPU idle), then the host's action, dry.
    assert [(d["kind"], d["scope"], d["outcome"], d["time"][11:19]) for d in decisions] == [
        ("warn", "gpu", "notified", "09:29:00"), ("warn", "host", "notified", "09:29:00"),
        ("act", "host", "dry_run", "09:29:02")]
    assert decisions[2]["command"] == ["touch", str(marker)]
    assert not marker.exists()
    # 10 samples 1 s apart, idle from the first: 9 s idle = 0.0025 GPU-hours = 0.009 USD.
    assert "idle 0.0025 GPU-hours (≈ 0.009 USD)" in dry.stdout + dry.stderr
    assert "GpuIdlePolicy" in dry.stderr  # the warning went to the notifiers
    log.unlink()
    real = gpuaudit(*common, "--enable-actions")
    assert real.returncode == 0, real.stderr
    assert marker.exists()
    assert [json.loads(x)["outcome"] for x in log.read_text().splitlines()][-1] == "ok"


def test_record_then_replay_gives_the_same_samples(tmp_path):
    out = tmp_path / "again.json"
    first = gpuaudit("monitor", "--replay", str(TRACES / "h200-1gpu-thermal.json"), "--json",
                     "--no-export", "--no-history", "--no-rules", "--record", str(out))
    assert first.returncode == 0, first.stderr
    again = gpuaudit("monitor", "--replay", str(out), "--json", "--no-export", "--no-history",
                     "--no-rules")
    assert again.returncode == 0, again.stderr
    assert [t["sample"] for t in ticks(again.stdout)] == [t["sample"] for t in
                                                          ticks(first.stdout)]


def test_record_to_a_missing_directory_fails_before_sampling(tmp_path):
    out = tmp_path / "no" / "such" / "dir" / "t.jsonl"
    proc = gpuaudit("monitor", "--replay", str(TRACES / "h200-1gpu-thermal.json"), "--json",
                    "--no-export", "--no-history", "--no-rules", "--record", str(out))
    assert_one_line_error(proc, "--record", "does not exist")
    assert proc.stdout == ""  # not one tick ran


def test_exporter_serves_while_replaying_and_ctrl_c_stops_cleanly(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuaudit", "monitor", "--replay",
         str(TRACES / "h200-1gpu-load.json"), "--speed", "0.5", "--no-history",
         "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=cli_env())
    try:
        body = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "gpuaudit_up" not in body:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    body = r.read().decode()
            except OSError:
                time.sleep(0.2)
        assert 'gpuaudit_memory_total_bytes{gpu="0"' in body
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "stopped after" in out + err and "Traceback" not in err


@pytest.mark.parametrize(("args", "needles"), [
    (["--interval", "0s"], ["--interval"]),
    (["--interval", "soon"], ["--interval", "duration"]),
    (["--listen", "nowhere"], ["--listen", "HOST:PORT"]),
    (["--idle-action", "'unbalanced"], ["--idle-action"]),
    (["--idle-scope", "rack"], ["scope"]),
    (["--webhook", "ftp://x"], ["webhook"]),
    (["--gpus", "x"], ["--gpus"]),
])
def test_bad_options_are_one_line_errors(args, needles):
    proc = gpuaudit("monitor", "--replay", str(TRACES / "h200-1gpu-idle.json"), "--no-export",
                    "--no-history", *args)
    assert_one_line_error(proc, *needles)


def test_bad_rule_file_names_the_line(tmp_path):
    rules = tmp_path / "r.yml"
    rules.write_text("groups:\n- name: g\n  rules:\n  - alert: Hot\n    expr: foo(bar) > 1\n")
    proc = gpuaudit("monitor", "--replay", str(TRACES / "h200-1gpu-idle.json"), "--once",
                    "--rules", str(rules))
    assert_one_line_error(proc, "r.yml:5", "Hot")


def test_bad_trace_and_history_range_are_one_line_errors(tmp_path, db):
    bad = tmp_path / "t.json"
    bad.write_text("[]")
    assert_one_line_error(gpuaudit("monitor", "--once", "--replay", str(bad)), "trace")
    assert_one_line_error(gpuaudit("monitor", "--once", "--replay", str(tmp_path / "none")),
                          "none")
    assert_one_line_error(gpuaudit("monitor", "history", "--since", "the dawn", "--db", db),
                          "the dawn")


def test_no_gpu_here_says_so_in_one_line():
    from .conftest import gpu_count

    if gpu_count():
        pytest.skip("this machine has a GPU")
    proc = gpuaudit("monitor", "--once")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("gpuaudit: error: cannot monitor:")
    assert "--replay" in proc.stderr


def test_monitor_needs_no_torch():
    code = ("import sys, runpy; sys.modules['torch'] = None; sys.argv = ['gpuaudit', 'monitor', "
            f"'--once', '--replay', {str(TRACES / 'h200-1gpu-idle.json')!r}, '--json']\n"
            "runpy.run_module('gpuaudit', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=cli_env())
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["sample"]["gpus"][0]["name"] == "NVIDIA H200"


def test_replay_paths_exist():
    assert sorted(p.name for p in Path(TRACES).glob("*.json")) == sorted(
        f"{n}.json" for n in tt.TRACES)


def test_monitor_in_a_callers_process_gives_back_its_signal_handlers():
    from typer.testing import CliRunner

    from gpuaudit.cli.app import app

    mine = lambda *_: None  # noqa: E731
    previous = {s: signal.signal(s, mine) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        result = CliRunner().invoke(app, ["monitor", "--replay",
                                          str(TRACES / "h200-1gpu-idle.json"), "--count", "2",
                                          "--no-export", "--no-history", "--no-rules",
                                          "--json"])
        assert result.exit_code == 0, result.output
        assert signal.getsignal(signal.SIGINT) is mine
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
