"""What to do about a bad node: drain it in Slurm, cordon or taint it in Kubernetes, tell a
webhook. Dry-run unless applied; every action, planned or done, is logged.

Each action is an argument list for the scheduler's own tool (`scontrol`, `kubectl`: no shell,
nothing to quote) or one JSON POST, so what a dry run shows is exactly what would run. The
reason the scheduler records is the node's first reason, cut to what the tool keeps.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Sequence
from datetime import datetime
from enum import Enum
from pathlib import Path

from gpuaudit.errors import BadInputError
from gpuaudit.model import Record, utc_now

TAINT_KEY = "gpuaudit.io/unhealthy"
REASON_ANNOTATION = "gpuaudit.io/reason"
REASON_PREFIX = "gpuaudit: "
MAX_REASON = 200  # Slurm keeps a reason of any length; sinfo's column, and people, do not
TOOL_TIMEOUT_S = 60.0


class ActionKind(str, Enum):
    SLURM_DRAIN = "slurm-drain"
    K8S_CORDON = "k8s-cordon"
    K8S_TAINT = "k8s-taint"
    WEBHOOK = "webhook"


class Action(Record):
    """One action on one node: what it is, and (once applied) how it went."""

    kind: ActionKind
    node: str
    reason: str
    argv: tuple[str, ...] = ()  # the command, for slurm and kubernetes
    url: str | None = None  # for a webhook
    applied: bool = False  # False: a dry run, nothing was done
    ok: bool | None = None  # None until applied
    detail: str | None = None  # the tool's answer, or why it failed
    at: datetime


def reason_text(reasons: Sequence[str]) -> str:
    first = reasons[0] if reasons else "bad node"
    more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
    text = " ".join(f"{REASON_PREFIX}{first}".split())
    limit = MAX_REASON - len(more)
    return (text if len(text) <= limit else text[:limit - 1] + "…") + more


def plan(kinds: Sequence[ActionKind], bad: Sequence[tuple[str, Sequence[str]]], *,
         webhook: str | None = None) -> list[Action]:
    """The actions for each (node, reasons) in `bad`, in the order of `kinds`."""
    if ActionKind.WEBHOOK in kinds and not webhook:
        raise BadInputError("--action webhook needs --webhook URL")
    if webhook and not webhook.startswith(("http://", "https://")):
        raise BadInputError(f"--webhook {webhook}: not an http:// or https:// URL")
    now = utc_now()
    actions = []
    for node, reasons in bad:
        reason = reason_text(reasons)
        for kind in kinds:
            argv: tuple[str, ...] = ()
            if kind is ActionKind.SLURM_DRAIN:
                argv = ("scontrol", "update", f"NodeName={node}", "State=DRAIN",
                        f"Reason={reason}")
            elif kind is ActionKind.K8S_CORDON:
                argv = ("kubectl", "cordon", node)
            elif kind is ActionKind.K8S_TAINT:
                # A taint's value must be a label value (63 characters, no spaces): the reason
                # goes in an annotation beside it.
                argv = ("kubectl", "taint", "nodes", node, f"{TAINT_KEY}=true:NoSchedule",
                        "--overwrite")
            actions.append(Action(kind=kind, node=node, reason=reason, argv=argv,
                                  url=webhook if kind is ActionKind.WEBHOOK else None, at=now))
            if kind is ActionKind.K8S_TAINT:
                actions.append(Action(kind=kind, node=node, reason=reason, at=now, argv=(
                    "kubectl", "annotate", "node", node, "--overwrite",
                    f"{REASON_ANNOTATION}={reason}")))
    return actions


def _run(action: Action) -> tuple[bool, str]:
    try:
        done = subprocess.run(list(action.argv), capture_output=True, text=True,
                              timeout=TOOL_TIMEOUT_S, check=False)
    except FileNotFoundError:
        return False, f"{action.argv[0]} is not installed (not on PATH)"
    except subprocess.TimeoutExpired:
        return False, f"{action.argv[0]} did not finish within {TOOL_TIMEOUT_S:g} s"
    said = " ".join((done.stdout + " " + done.stderr).split())
    return done.returncode == 0, (said or f"exit {done.returncode}")[:500]


def _post(action: Action) -> tuple[bool, str]:
    body = json.dumps({"source": "gpuaudit", "action": "bad-node", "node": action.node,
                       "reason": action.reason, "at": action.at.isoformat()}).encode()
    request = urllib.request.Request(str(action.url), data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TOOL_TIMEOUT_S) as answer:
            return 200 <= answer.status < 300, f"HTTP {answer.status}"
    except urllib.error.HTTPError as exc:
        return False, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        return False, str(getattr(exc, "reason", exc))


def apply(action: Action) -> Action:
    """`action` done: its outcome recorded (a failure is recorded, not raised: the other
    nodes' actions still go)."""
    ok, detail = _post(action) if action.kind is ActionKind.WEBHOOK else _run(action)
    return action.model_copy(update={"applied": True, "ok": ok, "detail": detail,
                                     "at": utc_now()})


def carry_out(actions: Sequence[Action], *, dry_run: bool, log: Path | None) -> list[Action]:
    """Each action applied (or, in a dry run, only planned), each appended to `log` as one
    JSON line as it is done."""
    done = []
    for action in actions:
        result = action if dry_run else apply(action)
        done.append(result)
        if log is not None:
            try:
                log.parent.mkdir(parents=True, exist_ok=True)
                with log.open("a") as f:
                    f.write(result.model_dump_json() + "\n")
            except OSError as exc:
                raise BadInputError(f"cannot write the action log {log}: "
                                    f"{exc.strerror or exc}") from None
    return done


__all__ = ["Action", "ActionKind", "apply", "carry_out", "plan", "reason_text"]
