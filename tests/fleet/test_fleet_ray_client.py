"""`gpuaudit fleet run` as operators start Ray: `ray start --head` with its Ray Client server,
workers joined with `ray start --address`, the driver a separate `gpuaudit` process (through
`ray://` as the shipped Kubernetes Job, or straight to the GCS). Each node replays a recorded
H200 machine (tests/support/fleet_replays.py). One cluster for the module: 3 raylets on 2 cores."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from gpuaudit.cli.app import app
from gpuaudit.fleet.node import REPLAY_ENV
from gpuaudit.fleet.records import FleetReport, FleetRun, NodeState
from gpuaudit.store import Store
from tests.support.fleet_replays import OLD_DRIVER, write_plans

ray = pytest.importorskip("ray")
RAY = Path(sys.executable).with_name("ray")
# Ray notices a dead node by missed health checks: seconds here, not its default half minute.
# And a node told to stop (SIGTERM) stops: `ray start --block` otherwise first drains its
# node for up to 30 s, and the head, whose Ray Client server keeps its leases, never finishes
# draining (the module's teardown waited out its 15 s for it).
FAST_DEATH = {"RAY_health_check_initial_delay_ms": "0", "RAY_health_check_period_ms": "500",
              "RAY_health_check_failure_threshold": "4",
              "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RayNodes:
    """Ray nodes started with `ray start --block`, each in a session of its own, so that
    stopping one ends exactly the processes it started (raylet, workers, agents)."""

    def __init__(self, plans: dict[str, Path]) -> None:
        self.plans = plans
        self.temp = tempfile.mkdtemp(prefix="gar")  # short: Ray's socket paths must fit
        self.gcs_port, self.client_port = _free_port(), _free_port()
        self.procs: dict[str, subprocess.Popen] = {}

    def _start(self, name: str, args: list[str]) -> None:
        env = {**os.environ, **FAST_DEATH, REPLAY_ENV: str(self.plans[name]),
               "RAY_USAGE_STATS_ENABLED": "0"}
        log = open(Path(self.temp) / f"{name}.log", "wb")  # noqa: SIM115 - the node's life
        self.procs[name] = subprocess.Popen(
            [str(RAY), "start", "--block", "--num-cpus", "1", "--num-gpus", "2",
             "--resources", json.dumps({f"replay-{name}": 1}), "--temp-dir", self.temp,
             "--dashboard-agent-listen-port", "0", "--dashboard-agent-grpc-port", "0",
             "--metrics-export-port", "0", "--runtime-env-agent-port", "0", *args],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def head(self, name: str) -> None:
        self._start(name, ["--head", "--port", str(self.gcs_port), "--include-dashboard=false",
                           "--ray-client-server-port", str(self.client_port),
                           "--disable-usage-stats"])

    def worker(self, name: str) -> None:
        """Started once the nodes before it have joined: two raylets starting at once on one
        host pick the same socket names."""
        self._start(name, ["--address", f"127.0.0.1:{self.gcs_port}"])
        assert set(self.node_ids()) == set(self.procs), self.logs()

    @property
    def gcs(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    def node_ids(self, timeout_s: float = 120.0) -> dict[str, str]:
        """Replay name → Ray node id of every alive node, once all started have joined."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = {}
            with contextlib.suppress(Exception):
                ray.init(address=self.gcs, logging_level="ERROR")
                try:
                    for n in ray.nodes():
                        for key in n["Resources"] if n["Alive"] else ():
                            if key.startswith("replay-"):
                                found[key.removeprefix("replay-")] = n["NodeID"]
                finally:
                    ray.shutdown()
            if set(found) == set(self.procs) or time.monotonic() > deadline:
                return found
            time.sleep(1.0)

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        proc = self.procs.pop(name)
        session = proc.pid  # start_new_session: the session id is the process id
        members = [p for p in psutil.process_iter() if _sid(p.pid) == session]
        for p in members:
            with contextlib.suppress(psutil.Error):
                p.send_signal(sig)
        _, alive = psutil.wait_procs(members, timeout=15)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        proc.wait(timeout=30)

    def logs(self) -> str:
        return "\n".join(f"{p.name}: {p.read_text()[-2000:]}"
                         for p in sorted(Path(self.temp).glob("*.log")))

    def close(self) -> None:
        for name in list(self.procs)[::-1]:
            self.stop(name)
        shutil.rmtree(self.temp, ignore_errors=True)


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_plans(tmp_path_factory.mktemp("replays"), hold_s=600.0)


@pytest.fixture(scope="module")
def cluster(plans: dict[str, Path]):
    nodes = RayNodes(plans)
    try:
        nodes.head("h200-a")
        assert set(nodes.node_ids()) == {"h200-a"}, nodes.logs()  # workers join a live head
        nodes.worker("h200-b")
        nodes.worker("h200-a-twin")
        yield nodes
    finally:
        nodes.close()


def _gpuaudit(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gpuaudit", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def test_through_ray_client_every_node_is_audited_named_and_judged(cluster, tmp_path):
    db = tmp_path / "fleet.db"
    ids = cluster.node_ids()
    proc = _gpuaudit("fleet", "run", "--address", f"ray://127.0.0.1:{cluster.client_port}",
                     "--db", str(db), "--json", "--timeout", "5m")
    out, err = proc.communicate(timeout=280)
    assert proc.returncode == 1, err  # the twin is not what the fleet expects
    assert out.startswith("{"), err
    fleet = FleetRun.model_validate_json(out)  # stdout is the JSON and nothing else
    assert fleet.address.startswith("ray://")
    assert all(n.state is NodeState.DONE and n.saved for n in fleet.nodes)
    by_id = {n.ray_node_id: n for n in fleet.nodes}
    assert set(by_id) == set(ids.values())
    # Two machines that both call themselves h200-a are kept apart, not merged.
    names = sorted(n.hostname for n in fleet.nodes)
    assert names[:2] == ["h200-a", "h200-a@" + names[1].partition("@")[2]]
    assert names[2] == "h200-b" and names[1].partition("@")[2] in {i[:12] for i in ids.values()}
    twin = by_id[ids["h200-a-twin"]]
    assert twin.problems == (f"driver {OLD_DRIVER}, the fleet expects 580.159.04 (the majority "
                             "of 3 nodes)",)
    assert [n.hostname for n in fleet.nodes if n.problems] == [twin.hostname]
    assert fleet.expectation.gpu_count == 2 and fleet.expectation.gpu_model == "NVIDIA H200"
    # The all-reduce ran across the three nodes through the client too.
    peak = [m for m in fleet.collectives if m.name == "all_reduce_busbw_peak"]
    assert peak and peak[0].verified and peak[0].params["nodes"] == 3
    # Off a terminal the progress is plain lines, per node, as it happens.
    lines = err.splitlines()
    assert any(" h200-b: running " in ln for ln in lines), err
    assert any(f" {twin.hostname}: done " in ln for ln in lines), err
    with Store(db, read_only=True) as store:
        assert len({s.id for s in store.list_runs()}) == 3
    report = CliRunner().invoke(app, ["fleet", "report", "--db", str(db), "--json"])
    judged = FleetReport.model_validate_json(report.stdout)
    assert len(judged.nodes) == 3
    bad = {b.hostname: b.reasons for b in judged.bad_nodes}
    assert set(bad) == {"h200-b", twin.hostname}
    assert bad[twin.hostname] == twin.problems


def _read_until(proc: subprocess.Popen, text: str, timeout_s: float) -> list[str]:
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not sel.select(timeout=1.0):
            continue
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return seen
    pytest.fail(f"never saw {text!r} in: {''.join(seen)}")


def test_json_stays_clean_when_a_node_dies_mid_run(cluster, plans, tmp_path):
    cluster.worker("h200-d")  # holds 600 s: killed while it holds
    ids = cluster.node_ids()
    assert "h200-d" in ids
    proc = _gpuaudit("fleet", "run", "--address", cluster.gcs, "--db", str(tmp_path / "f.db"),
                     "--json", "--timeout", "3m", "--no-collectives")
    try:
        _read_until(proc, "h200-d: running bench (replay, holding", 200)
        cluster.stop("h200-d", signal.SIGKILL)  # the raylet and its workers die at once
        out, err = proc.communicate(timeout=200)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    fleet = FleetRun.model_validate(json.loads(out))  # nothing of Ray's before or after
    lost = next(n for n in fleet.nodes if n.ray_node_id == ids["h200-d"])
    assert lost.state is NodeState.LOST and lost.last_step.startswith("bench (replay, holding")
    assert sorted(n.state.value for n in fleet.nodes) == ["done", "done", "done", "lost"]
    assert " h200-d: lost " in err
