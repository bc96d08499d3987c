"""deploy/kubernetes, checked without a cluster: every object against the Kubernetes schemas
(kubernetes-validate ships them for each release; strict: no unknown field), the Prometheus
Operator kinds against tests/fixtures/k8s-crd, the wiring between them, the alert rules the
same as the shipped file, and the command lines ones gpuaudit accepts."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from gpuaudit.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "kubernetes"
CRD_SCHEMAS = Path(__file__).parent / "fixtures" / "k8s-crd"
# The oldest Kubernetes release still commonly run and the newest the package knows.
VERSIONS = ("1.27", "1.37")
CRD_KINDS = {"ServiceMonitor": "servicemonitor", "PrometheusRule": "prometheusrule"}

kv = pytest.importorskip("kubernetes_validate")


def _objects() -> list[tuple[str, dict]]:
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        found += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return found


def _one(kind: str) -> dict:
    (doc,) = [d for _, d in _objects() if d["kind"] == kind]
    return doc


def test_kustomization_lists_every_manifest_and_nothing_else():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed))
    assert set(listed) == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}


@pytest.mark.parametrize("version", VERSIONS)
def test_kubernetes_kinds_match_the_published_schemas(version: str):
    checked = 0
    for name, doc in _objects():
        if doc["kind"] in CRD_KINDS:
            continue
        try:
            kv.validate(doc, version, strict=True)
        except kv.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{name} ({doc['kind']}) against Kubernetes {version}: {where}: "
                        f"{exc.message}")
        checked += 1
    assert checked == 3  # DaemonSet, Service, Job


def test_the_validation_catches_a_broken_manifest():
    job = _one("Job")
    broken = json.loads(json.dumps(job))
    broken["spec"]["template"]["spec"]["restartPolicy"] = 7
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, VERSIONS[-1], strict=True)
    typo = json.loads(json.dumps(job))
    typo["spec"]["backofLimit"] = 0  # strict: an unknown field is an error
    with pytest.raises(kv.ValidationError):
        kv.validate(typo, VERSIONS[-1], strict=True)


@pytest.mark.parametrize("kind", sorted(CRD_KINDS))
def test_prometheus_operator_kinds_match_their_schema(kind: str):
    schema = json.loads((CRD_SCHEMAS / f"{CRD_KINDS[kind]}.schema.json").read_text())
    doc = _one(kind)
    jsonschema.validate(doc, schema)
    wrong = json.loads(json.dumps(doc))
    wrong["spec"]["unknownField"] = True
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong, schema)


def test_the_servicemonitor_finds_the_monitor_pods():
    ds, svc, sm = _one("DaemonSet"), _one("Service"), _one("ServiceMonitor")
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    (svc_port,) = svc["spec"]["ports"]
    assert svc_port["targetPort"] in ports and svc_port["port"] == ports["metrics"]
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] == svc_port["name"]
    assert endpoint["path"] == container["livenessProbe"]["httpGet"]["path"] == "/metrics"


def _generator():
    spec = importlib.util.spec_from_file_location("k8s_prometheusrule",
                                                  ROOT / "scripts" / "k8s_prometheusrule.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_prometheusrule_is_the_shipped_alert_rules():
    generator = _generator()
    shipped = generator.RULES.read_text()
    assert generator.TARGET.read_text() == generator.render(shipped), (
        "stale: python scripts/k8s_prometheusrule.py")
    assert _one("PrometheusRule")["spec"]["groups"] == yaml.safe_load(shipped)["groups"]


@pytest.mark.prometheus
def test_promtool_accepts_the_prometheusrule_groups(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed")
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": _one("PrometheusRule")["spec"]["groups"]}))
    checked = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout


def test_the_fleet_job_runs_a_command_gpuaudit_accepts(tmp_path):
    job = _one("Job")
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    (container,) = pod["containers"]
    args = list(container["args"])
    env = {e["name"]: e for e in container["env"]}
    assert env["GPUAUDIT_DB"]["valueFrom"]["secretKeyRef"]["key"] == "url"
    for name, value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                        ("NVSHMEM_DISABLE_NVLS", "1")):
        assert env[name]["value"] == value
    # The same parser as in the pod: with nothing listening at the address, it gets as far as
    # trying to reach the Ray cluster.
    at = args.index("--address")
    args[at + 1] = "ray://127.0.0.1:9"
    result = CliRunner().invoke(app, args, env={"GPUAUDIT_DB": str(tmp_path / "f.db")})
    assert result.exit_code == 2, result.output
    assert "gpuaudit: error: cannot reach the Ray cluster at ray://127.0.0.1:9" in result.stderr
