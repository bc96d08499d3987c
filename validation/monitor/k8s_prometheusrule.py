"""Write deploy/kubernetes/gpuaudit-prometheusrule.yaml from the shipped alert rules.

The Prometheus Operator loads rules from PrometheusRule objects, whose spec.groups is a rule
file's `groups`. This keeps the two the same:
`python validation/monitor/k8s_prometheusrule.py` rewrites the manifest;
tests/deploy/test_deploy_k8s.py fails when it is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "src" / "gpuaudit" / "data" / "alerts.yml"
TARGET = ROOT / "deploy" / "kubernetes" / "gpuaudit-prometheusrule.yaml"

HEADER = """\
# GENERATED from src/gpuaudit/data/alerts.yml by validation/monitor/k8s_prometheusrule.py: edit that
# file and run the script, never this one (tests/deploy/test_deploy_k8s.py checks they agree).
# The Prometheus Operator loads it into the Prometheus whose ruleSelector matches its labels
# (kube-prometheus-stack's default selector wants release: <the stack's release name>).
"""


class _Literal(str):
    """A multi-line string written as a YAML literal block (|-), as in the rule file."""


def _literal(dumper: yaml.SafeDumper, value: _Literal) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")


def _blocks(node: object) -> object:
    if isinstance(node, dict):
        return {k: _blocks(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_blocks(v) for v in node]
    if isinstance(node, str) and "\n" in node:
        return _Literal(node)
    return node


def render(rules_text: str) -> str:
    groups = yaml.safe_load(rules_text)["groups"]
    manifest = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "gpuaudit-alerts",
                     "labels": {"app.kubernetes.io/name": "gpuaudit-monitor",
                                "app.kubernetes.io/component": "alerts"}},
        "spec": {"groups": _blocks(groups)},
    }
    dumper = yaml.SafeDumper
    dumper.add_representer(_Literal, _literal)
    return HEADER + yaml.dump(manifest, Dumper=dumper, sort_keys=False, width=100,
                              allow_unicode=True)


def main() -> int:
    TARGET.write_text(render(RULES.read_text()))
    print(f"wrote {TARGET.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
