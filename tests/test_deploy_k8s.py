"""deploy/kubernetes, checked without a cluster: every object against the Kubernetes schemas
(kubernetes-validate ships them for each release; strict: no unknown field), the Prometheus
Operator kinds against tests/fixtures/k8s-crd, the wiring between them, the alert rules the
same as the shipped file, and the command lines ones gpuaudit accepts."""

from __future__ import annotations

import importlib.util
import json
import shlex
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from gpuaudit.cli.app import app
from gpuaudit.store import Store

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "kubernetes"
CRD_SCHEMAS = Path(__file__).parent / "fixtures" / "k8s-crd"
# The oldest Kubernetes release still commonly run and the newest the package knows.
VERSIONS = ("1.27", "1.37")
CRD_KINDS = {"ServiceMonitor": "servicemonitor", "PrometheusRule": "prometheusrule",
             "RayCluster": "raycluster"}
IMAGE = "ghcr.io/gpuaudit/gpuaudit:latest"
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"

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
    # DaemonSet, Service, Job, CronJob, and the CronJob's ServiceAccount, ClusterRole, binding
    assert checked == 7
    # The RayCluster's pod templates are Kubernetes' own PodTemplateSpecs.
    for where, template in _pod_templates():
        if where.startswith("RayCluster"):
            kv.validate({"apiVersion": "v1", "kind": "PodTemplate",
                         "metadata": {"name": "t"}, "template": template}, version, strict=True)


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


def _pod_templates() -> list[tuple[str, dict]]:
    """(where, pod template) of every object that makes pods."""
    found = []
    for _, doc in _objects():
        kind, spec = doc["kind"], doc.get("spec", {})
        if kind in ("DaemonSet", "Job"):
            found.append((kind, spec["template"]))
        elif kind == "CronJob":
            found.append((kind, spec["jobTemplate"]["spec"]["template"]))
        elif kind == "RayCluster":
            found.append(("RayCluster head", spec["headGroupSpec"]["template"]))
            found += [(f"RayCluster {g['groupName']}", g["template"])
                      for g in spec["workerGroupSpecs"]]
    return found


def test_every_pod_meets_the_restricted_pod_security_standard():
    """Kubernetes' Pod Security Standards, "restricted" profile, rule by rule: non-root,
    no privilege escalation, every capability dropped, the runtime's seccomp profile, no
    host namespaces, ports or paths, only the volume types it allows."""
    templates = _pod_templates()
    assert {w.split()[0] for w, _ in templates} == {"DaemonSet", "Job", "CronJob", "RayCluster"}
    allowed_volumes = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                       "persistentVolumeClaim", "projected", "secret"}
    for where, template in templates:
        pod = template["spec"]
        ctx = pod.get("securityContext", {})
        assert ctx.get("runAsNonRoot") is True and ctx.get("runAsUser", 0) != 0, where
        assert ctx.get("seccompProfile", {}).get("type") in ("RuntimeDefault", "Localhost")
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            assert not pod.get(key), (where, key)
        for volume in pod.get("volumes", []):
            assert set(volume) - {"name"} <= allowed_volumes, (where, volume)
        for c in pod["containers"] + pod.get("initContainers", []):
            sc = c.get("securityContext", {})
            assert sc.get("allowPrivilegeEscalation") is False, (where, c["name"])
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], (where, c["name"])
            assert not sc.get("capabilities", {}).get("add"), (where, c["name"])
            assert not sc.get("privileged"), (where, c["name"])
            assert sc.get("runAsUser", 1) != 0, (where, c["name"])
            assert all("hostPort" not in p for p in c.get("ports", [])), (where, c["name"])
            assert c["image"] == IMAGE, where  # the image deploy/docker/Dockerfile builds


def _env(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def test_pods_on_gpu_nodes_know_their_node_name():
    node_name = {"fieldRef": {"fieldPath": "spec.nodeName"}}
    for where, template in _pod_templates():
        if where in ("DaemonSet", "RayCluster gpu"):
            (container,) = template["spec"]["containers"]
            assert _env(container)["GPUAUDIT_NODE_NAME"]["valueFrom"] == node_name, where


def test_the_monitor_is_ready_once_its_exporter_answers():
    (container,) = _one("DaemonSet")["spec"]["template"]["spec"]["containers"]
    ready, live = container["readinessProbe"]["httpGet"], container["livenessProbe"]["httpGet"]
    assert ready == live == {"path": "/metrics", "port": "metrics"}
    # Ready sooner than a dead one is restarted: not routed to, then replaced.
    assert (container["readinessProbe"]["periodSeconds"]
            * container["readinessProbe"]["failureThreshold"]
            < container["livenessProbe"]["periodSeconds"]
            * container["livenessProbe"]["failureThreshold"])


def test_the_ray_cluster_is_the_one_the_fleet_jobs_reach():
    rc = _one("RayCluster")
    head_svc = f"{rc['metadata']['name']}-head-svc"  # the Service KubeRay makes for the head
    (head,) = rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"]
    assert {p["name"]: p["containerPort"] for p in head["ports"]}["client"] == 10001
    for kind in ("Job", "CronJob"):
        text = json.dumps(_one(kind))
        assert f"ray://{head_svc}:10001" in text, kind
    (gpu,) = rc["spec"]["workerGroupSpecs"]
    (worker,) = gpu["template"]["spec"]["containers"]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert rc["spec"]["headGroupSpec"]["rayStartParams"]["num-gpus"] == "0"
    import ray

    assert rc["spec"]["rayVersion"] == ray.__version__  # Ray's rule: one version everywhere


def test_the_cronjob_runs_commands_gpuaudit_accepts(tmp_path):
    cron = _one("CronJob")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["sh", "-c"]
    lines = [shlex.split(part) for part in container["args"][0].split(";")]
    assert [line[:3] for line in lines] == [["gpuaudit", "fleet", "run"],
                                           ["gpuaudit", "fleet", "report"]]
    run, report = lines[0][1:], lines[1][1:]
    run[run.index("--address") + 1] = "ray://127.0.0.1:9"
    env = {"GPUAUDIT_DB": str(tmp_path / "f.db")}
    tried = CliRunner().invoke(app, run, env=env)
    assert "cannot reach the Ray cluster at ray://127.0.0.1:9" in tried.stderr, tried.output
    at = report.index("--action-log")
    report[at + 1] = str(tmp_path / "actions.jsonl")
    Store(tmp_path / "f.db").close()
    judged = CliRunner().invoke(app, [*report, "--db", str(tmp_path / "f.db")])
    assert judged.exit_code == 0 and "no audits stored" in judged.stdout, judged.output
    assert "--apply" not in report  # a dry run until the operator says so
    assert pod["serviceAccountName"] == "gpuaudit-fleet"
    (binding,) = [d for _, d in _objects() if d["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"][0]["name"] == "gpuaudit-fleet"
    (role,) = [d for _, d in _objects() if d["kind"] == "ClusterRole"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"],
                              "verbs": ["get", "list", "patch"]}]


def test_the_dockerfile_builds_the_image_the_manifests_run():
    """Parsed by BuildKit's own parser (the `dockerfile` package). Not built here: this
    machine reaches no container registry to pull the base image from."""
    dockerfile = pytest.importorskip("dockerfile")
    steps = dockerfile.parse_file(str(DOCKERFILE))
    cmds = [s.cmd for s in steps]
    assert cmds.count("FROM") == 2 and cmds[-1] == "CMD"
    user = [s.value for s in steps if s.cmd == "USER"]
    assert user == [("1000:1000",)]
    pod_user = _one("Job")["spec"]["template"]["spec"]["securityContext"]
    assert pod_user["runAsUser"] == 1000 and pod_user["runAsGroup"] == 1000
    entry = next(s for s in steps if s.cmd == "ENTRYPOINT")
    assert entry.json and entry.value == ("gpuaudit",)
    installs = " ".join(" ".join(s.value) for s in steps if s.cmd == "RUN")
    assert "pip install '.[fleet,torch,postgres,k8s]'" in installs
    for step in steps:
        if step.cmd == "COPY" and not any(f.startswith("--from") for f in step.flags):
            *sources, _ = step.value
            assert all((ROOT / src).exists() for src in sources), step.original
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert ignore[0] == "*" and "!src/" in ignore  # only what the install needs is sent


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
    spec = importlib.util.spec_from_file_location(
        "k8s_prometheusrule", ROOT / "validation" / "monitor" / "k8s_prometheusrule.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_prometheusrule_is_the_shipped_alert_rules():
    generator = _generator()
    shipped = generator.RULES.read_text()
    assert generator.TARGET.read_text() == generator.render(shipped), (
        "stale: python validation/monitor/k8s_prometheusrule.py")
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


def test_the_pod_attribution_component_mounts_only_the_kubelet_socket(tmp_path):
    """Built by kustomize (kubectl's), where kubectl is installed; the patched DaemonSet is
    still a valid one, and its command line one the monitor accepts."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (kustomize builds the component)")
    shutil.copytree(K8S, tmp_path / "base")
    (tmp_path / "kustomization.yaml").write_text(
        "resources: [base]\ncomponents: [base/pod-attribution]\n")
    built = subprocess.run([kubectl, "kustomize", str(tmp_path)], capture_output=True,
                           text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    (ds,) = [d for d in yaml.safe_load_all(built.stdout) if d and d["kind"] == "DaemonSet"]
    kv.validate(ds, VERSIONS[-1], strict=True)
    pod = ds["spec"]["template"]["spec"]
    (volume,) = pod["volumes"]
    assert volume["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    (container,) = pod["containers"]
    (mount,) = container["volumeMounts"]
    assert mount["readOnly"] is True and mount["mountPath"] == volume["hostPath"]["path"]
    args = container["args"]
    socket = args[args.index("--pod-resources") + 1]
    assert socket.startswith(mount["mountPath"] + "/")
    from tests.support.cli import monitor_accepts

    monitor_accepts(args)
