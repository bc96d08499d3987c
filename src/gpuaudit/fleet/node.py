"""What runs on each node of a fleet audit: inspect + the bench profile on the node's GPUs,
reported as a stream of events.

`audit_node` yields the events; `node_task` (the Ray task) posts them to the driver's progress
board (an actor) as they happen and returns the run document. Not a Ray generator task: Ray
Client (`ray://`) does not carry those, and a plain task's result behaves the same in both.

Events are plain dicts: {"event": "step", "text"}, {"event": "identity", "hostname",
"node_name", "gpus"}, and last {"event": "run", "document"} (the Run as JSON, tagged with the
node's identity).

Replay: with GPUAUDIT_FLEET_REPLAY set on a node (its raylet's environment) to a JSON plan
{"inspect": PATH, "bench": PATH, "hold_s": SECONDS}, the node plays back recorded documents
instead of measuring: the machine of the inspect document is judged as if read live, and the
bench document's figures are taken as measured (findings recomputed). This is how a fleet
audit is rehearsed on CPU (the tests' local cluster), never a way to fake a real one: the run's
`source` says "replay ...".
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gpuaudit.errors import BadInputError
from gpuaudit.model import NodeIdentity, Run

REPLAY_ENV = "GPUAUDIT_FLEET_REPLAY"
# The node's name in the fleet when the platform knows one: on Kubernetes the downward API's
# spec.nodeName (a pod's host name is the pod's name, not the node's).
NODE_NAME_ENV = "GPUAUDIT_NODE_NAME"


def _ray_identity() -> tuple[str | None, str | None]:
    """(node id, node IP) of the Ray node this runs on; Nones outside Ray."""
    try:
        import ray

        if not ray.is_initialized():
            return None, None
        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()
    except Exception:  # outside a Ray worker the context has no node: not an error here
        return None, None


def identify(run: Run, fleet_id: str | None) -> Run:
    """`run` tagged with this node's identity."""
    node_id, ip = _ray_identity()
    machine = run.machine
    hostname = machine.host.hostname if machine else os.uname().nodename
    gpus = machine.gpus if machine else ()
    return run.model_copy(update={"node": NodeIdentity(
        hostname=hostname, node_name=os.environ.get(NODE_NAME_ENV) or None,
        ray_node_id=node_id, node_ip=ip, fleet_id=fleet_id,
        gpu_uuids=tuple(g.uuid for g in gpus), gpu_serials=tuple(g.serial for g in gpus))})


def _replay(plan_path: Path, step: Callable[[str], None],
            on_machine: Callable[[Any], None]) -> Run:
    from gpuaudit.bench.runner import bench_findings
    from gpuaudit.inspect import inspect_machine, read_snapshot
    from gpuaudit.model.schema import read_run
    from gpuaudit.reading import read_json

    plan = read_json(plan_path, "replay plan")
    if not isinstance(plan, dict) or not isinstance(plan.get("inspect"), str):
        raise BadInputError(f"replay plan {plan_path}: expected an object naming its "
                            "\"inspect\" snapshot")
    base = plan_path.parent
    step("inspect (replay)")
    machine = read_snapshot(base / plan["inspect"])
    on_machine(machine)
    inspected = inspect_machine(machine, source=f"replay {plan_path}")
    hold = float(plan.get("hold_s", 0))
    end = time.monotonic() + hold
    while time.monotonic() < end:  # a node that takes its time (or hangs, in tests)
        step(f"bench (replay, holding {hold:g} s)")
        time.sleep(min(1.0, max(0.0, end - time.monotonic())))
    measured: tuple = ()
    if plan.get("bench"):
        step("bench (replay)")
        bench_path = base / plan["bench"]
        measured = read_run(bench_path, "bench").measurements
    return inspected.model_copy(update={
        "kind": "run", "measurements": measured,
        "findings": inspected.findings + tuple(bench_findings(list(measured)))})


def _live(profile: str, bench: bool, step: Callable[[str], None],
          on_machine: Callable[[Any], None]) -> Run:
    from gpuaudit.bench.context import Profile
    from gpuaudit.bench.runner import run_bench
    from gpuaudit.inspect import inspect_machine

    step("inspect")
    inspected = inspect_machine()
    if inspected.machine is not None:
        on_machine(inspected.machine)
    if not bench:
        return inspected.model_copy(update={"kind": "run"})
    benched = run_bench(machine=inspected.machine, profile=Profile(profile), step=step)
    return benched.model_copy(update={"kind": "run", "started_at": inspected.started_at,
                                      "findings": inspected.findings + benched.findings})


def audit_node(profile: str = "quick", fleet_id: str | None = None,
               bench: bool = True) -> Iterator[dict[str, Any]]:
    """The node's audit as events (see the module doc). The audit runs in a thread so that
    progress flows while it measures; an error there ends the stream by raising it."""
    from gpuaudit.hw.torch_env import apply_safe_env

    apply_safe_env()  # this process and every worker it starts: NVLink multicast off
    events: queue.Queue[dict[str, Any] | None] = queue.Queue()
    result: list[Run] = []
    failure: list[BaseException] = []

    def step(text: str) -> None:
        events.put({"event": "step", "text": text})

    def on_machine(machine: Any) -> None:
        events.put({"event": "identity", "hostname": machine.host.hostname,
                    "node_name": os.environ.get(NODE_NAME_ENV) or None,
                    "gpus": len(machine.gpus)})

    def work() -> None:
        try:
            plan = os.environ.get(REPLAY_ENV)
            run = (_replay(Path(plan), step, on_machine) if plan
                   else _live(profile, bench, step, on_machine))
            result.append(identify(run, fleet_id))
        except BaseException as exc:  # handed to the caller's thread below
            failure.append(exc)
        finally:
            events.put(None)

    thread = threading.Thread(target=work, name="gpuaudit-node-audit", daemon=True)
    thread.start()
    while (event := events.get()) is not None:
        yield event
    thread.join()
    if failure:
        raise failure[0]
    yield {"event": "run", "document": result[0].model_dump_json()}


def node_task(profile: str, fleet_id: str | None, bench: bool, board: Any, key: str) -> str:
    """The Ray task: the node's audit, each event posted to `board` (fire and forget: a
    board that is gone must not stop the audit), the run document returned."""
    document = ""
    for event in audit_node(profile, fleet_id, bench):
        if event["event"] == "run":
            document = str(event["document"])
        else:
            with contextlib.suppress(Exception):
                board.post.remote(key, event)
    return document


class ProgressBoard:
    """The driver's mailbox for the nodes' progress (a Ray actor, no CPU): nodes post, the
    driver takes everything posted since it last looked."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def post(self, key: str, event: dict[str, Any]) -> None:
        self.events.append((key, event))

    def take(self) -> list[tuple[str, dict[str, Any]]]:
        taken, self.events = self.events, []
        return taken
