"""The deploy files that run the monitor as a service restart it on failure, and the command
lines they hold are ones gpuaudit accepts."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

from tests.support.cli import monitor_accepts

DEPLOY = Path(__file__).parent.parent / "deploy"


def _unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """A systemd unit file: section → key → every value given (keys may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
        elif line and not line.startswith("#"):
            key, _, value = line.partition("=")
            current.setdefault(key, []).append(value)
    return sections


def test_systemd_unit_restarts_on_failure_and_keeps_multicast_off():
    unit = _unit(DEPLOY / "systemd" / "gpuaudit-monitor.service")
    service = unit["Service"]
    assert service["Restart"] == ["on-failure"]
    assert int(service["RestartSec"][0]) > 0
    assert int(unit["Unit"]["StartLimitBurst"][0]) > 1
    (exec_start,) = service["ExecStart"]
    argv = shlex.split(exec_start)
    assert argv[0].endswith("/gpuaudit") and argv[1] == "monitor"
    assert "127.0.0.1:9835" in argv  # servers bind loopback unless told otherwise
    envs = " ".join(service["Environment"])
    for var in ("NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1",
                "NVSHMEM_DISABLE_NVLS=1"):
        assert var in envs
    monitor_accepts(argv[1:])


def test_kubernetes_daemonset_always_restarts_and_probes_the_exporter():
    (ds,) = [d for d in yaml.safe_load_all((DEPLOY / "kubernetes" / "monitor-daemonset.yaml")
                                           .read_text()) if d]
    assert ds["kind"] == "DaemonSet"
    pod = ds["spec"]["template"]["spec"]
    assert pod.get("restartPolicy", "Always") == "Always"
    (container,) = pod["containers"]
    probe = container["livenessProbe"]["httpGet"]
    assert probe["path"] == "/metrics"
    port = next(p for p in container["ports"] if p["name"] == probe["port"])
    args = container["args"]
    assert f"0.0.0.0:{port['containerPort']}" in args
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    monitor_accepts(args)
