"""gpuaudit as Slurm's health check, against a real Slurm: Debian's slurmctld and slurmd on
this machine (one node, this host), with deploy/slurm/gpuaudit-healthcheck as
HealthCheckProgram. A node whose snapshot is not what the expectation file says is drained
with the finding as the reason; a good node stays in service and runs jobs."""

from __future__ import annotations

import getpass
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.support.faults import base_doc

ROOT = Path(__file__).resolve().parents[2]
HEALTHCHECK = ROOT / "deploy" / "slurm" / "gpuaudit-healthcheck"
INTERVAL_S = 5
DAEMONS = ("slurmctld", "slurmd", "scontrol", "sinfo", "srun")

pytestmark = pytest.mark.slurm


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def slurm():
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Slurm is not installed ({', '.join(missing)} missing): .ci/run "
                        "installs Debian's slurm-wlm")
        pytest.skip(f"Slurm is not installed ({', '.join(missing)}): apt-get install slurm-wlm")
    if os.geteuid() != 0:
        pytest.skip("slurmd runs as root")
    home = Path(tempfile.mkdtemp(prefix="gas"))
    node = socket.gethostname().split(".")[0]
    for d in ("state", "spool", "log"):
        (home / d).mkdir()
    snapshot = home / "snapshot.json"
    snapshot.write_text(json.dumps(base_doc("h200-2gpu")))  # the real two-H200 recording
    expect = home / "expect.yaml"
    # slurmd runs the health check with an environment of its own: the wrapper sets ours.
    wrapper = home / "healthcheck"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"export SLURM_CONF={home / 'slurm.conf'} PATH={Path(sys.executable).parent}:$PATH\n"
        f"export GPUAUDIT={Path(sys.executable).with_name('gpuaudit')} "
        f"GPUAUDIT_EXPECT={expect}\n"
        f"export GPUAUDIT_FROM={snapshot} GPUAUDIT_ACTION_LOG={home / 'actions.jsonl'}\n"
        f"{HEALTHCHECK}\n"
        f"code=$?\necho $code >> {home / 'checks'}\nexit $code\n")
    wrapper.chmod(0o755)
    user = getpass.getuser()
    (home / "slurm.conf").write_text(f"""ClusterName=gpuaudit-test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/none
CredType=cred/none
SlurmUser={user}
SlurmdUser=root
StateSaveLocation={home}/state
SlurmdSpoolDir={home}/spool
SlurmctldPidFile={home}/slurmctld.pid
SlurmdPidFile={home}/slurmd.pid
SlurmctldLogFile={home}/log/slurmctld.log
SlurmdLogFile={home}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
ReturnToService=2
HealthCheckProgram={wrapper}
HealthCheckInterval={INTERVAL_S}
HealthCheckNodeState=ANY
NodeName={node} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
    env = {**os.environ, "SLURM_CONF": str(home / "slurm.conf")}
    expect.write_text("gpu_count: 2\ngpu_model: NVIDIA H200\n")  # good until a test says
    procs = [subprocess.Popen(["slurmctld", "-D", "-c"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)]
    time.sleep(1.0)
    procs.append(subprocess.Popen(["slurmd", "-D"], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL))
    state = {"home": home, "node": node, "env": env, "expect": expect}
    try:
        _until(lambda: _node_state(state)[0] in ("idle", "drained", "draining"), 60, state)
        yield state
    finally:
        for p in procs[::-1]:
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(home, ignore_errors=True)


def _node_state(slurm: dict) -> tuple[str, str]:
    """(state, reason) of the node, as sinfo shows them."""
    out = subprocess.run(["sinfo", "-h", "-N", "-n", slurm["node"], "-o", "%T|%E"],
                         env=slurm["env"], capture_output=True, text=True, timeout=30).stdout
    state, _, reason = out.strip().partition("|")
    return state, reason


def _until(ok, timeout_s: float, slurm: dict) -> None:
    deadline = time.monotonic() + timeout_s
    while not ok():
        if time.monotonic() > deadline:
            log = (slurm["home"] / "log" / "slurmd.log").read_text()[-3000:]
            pytest.fail(f"Slurm node still {_node_state(slurm)} after {timeout_s} s:\n{log}")
        time.sleep(1.0)


def _checks(slurm: dict) -> list[int]:
    """The exit code of every health check run so far."""
    path = slurm["home"] / "checks"
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def test_a_good_node_stays_in_service_and_runs_jobs(slurm):
    before = len(_checks(slurm))
    _until(lambda: len(_checks(slurm)) >= before + 2, 8 * INTERVAL_S, slurm)  # checked twice
    assert _checks(slurm)[before:] == [0] * len(_checks(slurm)[before:])  # judged good
    assert _node_state(slurm) == ("idle", "none")
    job = subprocess.run(["srun", "-N1", "-t", "1", "hostname"], env=slurm["env"],
                         capture_output=True, text=True, timeout=120)
    assert job.returncode == 0 and job.stdout.strip(), job.stderr


def test_a_node_that_is_not_what_was_bought_is_drained_with_the_reason(slurm):
    slurm["expect"].write_text("gpu_count: 8\ngpu_model: NVIDIA H200\n")  # bought 8, has 2
    try:
        _until(lambda: _node_state(slurm)[0] in ("drained", "draining"), 10 * INTERVAL_S,
               slurm)
        _, reason = _node_state(slurm)
        # The check that drained it reports its exit code once scontrol has returned.
        _until(lambda: 1 in _checks(slurm), 4 * INTERVAL_S, slurm)
        assert reason.startswith("gpuaudit: 2 GPU(s), the fleet expects 8 (--expect "), reason
        log = [json.loads(line) for line in
               (slurm["home"] / "actions.jsonl").read_text().splitlines()]
        drained = [a for a in log if a["applied"] and a["ok"]]
        assert drained and drained[0]["kind"] == "slurm-drain"
        assert drained[0]["argv"][:4] == ["scontrol", "update", f"NodeName={slurm['node']}",
                                          "State=DRAIN"]
    finally:
        slurm["expect"].write_text("gpu_count: 2\ngpu_model: NVIDIA H200\n")
        subprocess.run(["scontrol", "update", f"NodeName={slurm['node']}", "State=RESUME"],
                       env=slurm["env"], capture_output=True, timeout=30)
    _until(lambda: _node_state(slurm)[0] == "idle", 10 * INTERVAL_S, slurm)
