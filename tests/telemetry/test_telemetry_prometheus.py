"""A real Prometheus (Debian's prometheus package; .ci/run installs it) checks our alert rules,
scrapes our exporter and loads the rules, as on a user's server."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

import gpuaudit
from gpuaudit.model import GpuSample, Sample, XidEvent
from gpuaudit.telemetry import exporter
from gpuaudit.telemetry.metrics import XidTally
from gpuaudit.telemetry.state import Latest, MonitorState

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
ALERTS = Path(gpuaudit.__file__).parent / "data" / "alerts.yml"
WAIT_S = 60  # the longest any wait here may take; CI's limit is 300 s per test

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(
        not (PROMETHEUS and PROMTOOL),
        reason="needs the prometheus and promtool binaries (Debian: apt-get install "
               "prometheus; .ci/run does it)"),
]


def test_promtool_accepts_the_shipped_alert_rules():
    assert ALERTS.is_file(), f"{ALERTS} is missing: the package must ship its alert rules"
    out = subprocess.run([PROMTOOL, "check", "rules", str(ALERTS)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    alerts, records = rule_names()
    assert alerts, f"{ALERTS} has no alerting rule"
    assert "SUCCESS" in out.stdout, out.stdout
    assert f"{len(alerts) + len(records)} rules found" in out.stdout, out.stdout


def rule_names() -> tuple[set[str], set[str]]:
    """The alerting and the recording rules' names in alerts.yml."""
    doc = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    rules = [r for g in doc["groups"] for r in g["rules"]]
    alerts = {r["alert"] for r in rules if "alert" in r}
    return alerts, {r["record"] for r in rules if "record" in r}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(base: str, path: str, **params: str) -> dict:
    url = f"{base}{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=5) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]


class Server:
    def __init__(self, proc: subprocess.Popen, base: str, log: Path) -> None:
        self.proc, self.base, self.log = proc, base, log

    def log_tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])

    def wait_for(self, what: str, check, deadline: float):
        """Poll check() until it returns something truthy; fail (with the server's log) when
        the server dies or the deadline passes."""
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"prometheus exited ({self.proc.returncode}) while waiting for "
                            f"{what}:\n{self.log_tail()}")
            try:
                got = check()
                if got:
                    return got
            except (OSError, ValueError, KeyError) as e:  # not listening yet, or no data yet
                last_error = e
            time.sleep(0.25)
        pytest.fail(f"no {what} within {WAIT_S} s (last error: {last_error}):\n"
                    f"{self.log_tail()}")


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[Server, exporter.ExporterServer]]:
    """Our exporter on an ephemeral 127.0.0.1 port and a real Prometheus scraping it every
    second with alerts.yml loaded; both stopped afterwards whatever happens."""
    assert ALERTS.is_file(), f"{ALERTS} is missing"
    t = datetime(2026, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
    sample = Sample(time=t, hostname="ci-node", interval_s=1.0, gpus=(
        GpuSample(index=0, uuid="GPU-0a", name="NVIDIA H200", utilization_gpu_pct=37.5,
                  memory_used_bytes=3758096384, memory_total_bytes=150754820096,
                  energy_j=1234.5, temperature_gpu_c=41.0,
                  xid_events=(XidEvent(gpu=0, code=79, time=t),)),
        GpuSample(index=1, uuid="GPU-1b", name="NVIDIA H200", error="GPU is lost"),
    ))
    tally = XidTally()
    tally.add(sample)
    ours = exporter.serve(Latest(MonitorState(sample=sample, xids=tally)), port=0,
                          dcgm_names=True)
    proc = None
    try:
        # The port is free when asked, but another process may take it before Prometheus
        # binds: then Prometheus exits at once, and a fresh port is tried (3 times at most).
        for _attempt in range(3):
            port = free_port()
            config = tmp_path / "prometheus.yml"
            config.write_text(yaml.safe_dump({
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                           "evaluation_interval": "1s"},
                "rule_files": [str(ALERTS)],
                "scrape_configs": [{"job_name": "gpuaudit", "static_configs": [
                    {"targets": [f"127.0.0.1:{ours.port}"]}]}],
            }))
            log = tmp_path / "prometheus.log"
            with log.open("w") as out:
                proc = subprocess.Popen(
                    [PROMETHEUS, f"--config.file={config}",
                     f"--storage.tsdb.path={tmp_path / 'data'}",
                     f"--web.listen-address=127.0.0.1:{port}"],
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                break  # still running after 2 s: it has its port
            if "address already in use" not in log.read_text(errors="replace"):
                pytest.fail(f"prometheus exited ({proc.returncode}):\n{log.read_text()}")
        else:
            pytest.fail("prometheus found no free port in 3 attempts")
        yield Server(proc, f"http://127.0.0.1:{port}", log), ours
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        ours.close()


def test_real_prometheus_scrapes_our_exporter_and_loads_our_rules(prometheus):
    server, ours = prometheus
    deadline = time.monotonic() + WAIT_S

    def target_up():
        targets = api(server.base, "/api/v1/targets")["activeTargets"]
        return [t for t in targets if t["health"] == "up"]

    (target,) = server.wait_for("healthy scrape of our exporter", target_up, deadline)
    assert target["scrapeUrl"] == ours.url
    assert target["lastError"] == ""

    def query(expr: str):
        return lambda: api(server.base, "/api/v1/query", query=expr)["result"]

    (used,) = server.wait_for("gpuaudit_memory_used_bytes",
                              query('gpuaudit_memory_used_bytes{gpu="0"}'), deadline)
    assert float(used["value"][1]) == 3758096384.0
    assert used["metric"] == {
        "__name__": "gpuaudit_memory_used_bytes", "gpu": "0", "uuid": "GPU-0a",
        "model": "NVIDIA H200", "hostname": "ci-node", "job": "gpuaudit",
        "instance": f"127.0.0.1:{ours.port}",
    }
    # Counters keep their exact names through Prometheus's OpenMetrics parser, and so do
    # dcgm-exporter's names and units.
    by_query = {
        'gpuaudit_energy_joules_total{gpu="0"}': 1234.5,
        'gpuaudit_xid_errors_total{gpu="0",xid="79"}': 1.0,
        'gpuaudit_up{gpu="1"}': 0.0,
        'DCGM_FI_DEV_FB_USED{gpu="0"}': 3584.0,
        'DCGM_FI_DEV_GPU_UTIL{gpu="0"}': 37.5,
        'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0"}': 1234500.0,
    }
    for expr, want in by_query.items():
        (got,) = server.wait_for(expr, query(expr), deadline)
        assert float(got["value"][1]) == want, expr
    # The GPU that is off the bus has its `up` series and nothing else of ours (alerts and
    # recording rules may well carry its labels: hence the name filter).
    others = api(server.base, "/api/v1/query", query='{gpu="1",__name__=~"(gpuaudit|DCGM)_.*",'
                                                     '__name__!="gpuaudit_up"}')
    assert others["result"] == []

    # Every rule of alerts.yml is loaded and evaluates without error over our series. An
    # evaluation before the first scrape sees no data and is always "ok", so wait for each
    # rule's next evaluation after this point, when the series above are known to be there.
    def all_rules():
        return [r for g in api(server.base, "/api/v1/rules")["groups"] for r in g["rules"]]

    before = {r["name"]: r["lastEvaluation"] for r in all_rules()}

    def rules_evaluated():
        rules = all_rules()
        fresh = all(r["lastEvaluation"] != before.get(r["name"]) for r in rules)
        return rules if rules and fresh else None

    rules = server.wait_for("evaluated alert rules", rules_evaluated, deadline)
    alerts, records = rule_names()
    assert {r["name"] for r in rules if r["type"] == "alerting"} == alerts
    assert {r["name"] for r in rules if r["type"] == "recording"} == records
    broken = {r["name"]: r.get("lastError") for r in rules if r["health"] != "ok"}
    assert broken == {}
