"""`gpuaudit fleet run`: one audit task per GPU node of a Ray cluster, results saved as they
arrive, every node accounted for.

Each node gets one task pinned to it (node affinity, not soft) that asks for all of its GPUs,
so nothing else Ray schedules shares them while they are measured. The task streams its
progress (a Ray generator task); the driver saves each node's Run the moment it arrives
(through the `save` callback: this layer does not know the store), so a node that fails later,
or Ctrl-C, loses nothing already measured. A node is TIMED_OUT past the per-node timeout
(counted from submission, so a node whose GPUs are held by other work times out too) and its
task cancelled; LOST when Ray marks the node dead; FAILED when its task raised.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuaudit._version import __version__
from gpuaudit.errors import BadInputError
from gpuaudit.model import Run, RunStatus, load_run, new_run_id, utc_now

from .cluster import ClusterNode, alive_node_ids, choose, connect, gpu_nodes
from .node import audit_node
from .records import FleetRun, NodeOutcome, NodeState

DEFAULT_TIMEOUT_S = 1800.0
LIVENESS_EVERY_S = 2.0


@dataclass(frozen=True)
class NodeProgress:
    """What the driver knows of one node now: `state` is "waiting" (submitted, not started),
    "running", or a NodeState value once it is over."""

    node: ClusterNode
    hostname: str
    state: str
    text: str


Save = Callable[[Run], tuple[bool, str | None]]  # (saved in the store, file it was kept in)
Progress = Callable[[NodeProgress], None]


@dataclass
class _Task:
    node: ClusterNode
    gen: Any
    submitted: float
    hostname: str
    step: str | None = None
    started: bool = False
    outcome: NodeOutcome | None = None


def _cause(exc: BaseException) -> str:
    """One line for why a node's task raised: the node's own exception where there is one."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        exc = cause
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").startswith("gpuaudit"):
        return f"gpuaudit is not installed on the node (no module {exc.name!r})"
    lines = [x for x in str(exc).strip().splitlines() if x.strip()]
    text = lines[-1].strip() if lines else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Fleet:
    def __init__(self, ray: Any, nodes: list[ClusterNode], *, fleet_id: str, profile: str,
                 bench: bool, timeout_s: float, save: Save,
                 on_progress: Progress | None) -> None:
        self.ray, self.nodes, self.fleet_id = ray, nodes, fleet_id
        self.profile, self.bench, self.timeout_s = profile, bench, timeout_s
        self.save, self.on_progress = save, on_progress
        self.tasks: list[_Task] = []

    def _report(self, task: _Task, state: str, text: str) -> None:
        if self.on_progress:
            self.on_progress(NodeProgress(task.node, task.hostname, state, text))

    def submit(self) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        remote = self.ray.remote(audit_node)
        for node in self.nodes:
            gen = remote.options(
                num_cpus=0, num_gpus=node.gpus, max_retries=0, retry_exceptions=False,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
            ).remote(self.profile, self.fleet_id, self.bench)
            task = _Task(node=node, gen=gen, submitted=time.monotonic(), hostname=node.hostname)
            self.tasks.append(task)
            self._report(task, "waiting", "submitted")

    def _end(self, task: _Task, state: NodeState, reason: str | None = None, *,
             run: Run | None = None, saved: bool = False, kept_at: str | None = None,
             cancel: bool = False) -> None:
        if cancel:
            # Already finished, or its node gone: nothing left to stop.
            with contextlib.suppress(Exception):
                self.ray.cancel(task.gen, force=True)
        task.outcome = NodeOutcome(
            ray_node_id=task.node.node_id, hostname=task.hostname, node_ip=task.node.ip,
            gpus=task.node.gpus, state=state, reason=reason,
            last_step=task.step if state is not NodeState.DONE else None,
            run_id=run.id if run else None, verdict=run.verdict if run else None,
            saved=saved, kept_at=kept_at, elapsed_s=round(time.monotonic() - task.submitted, 3))
        text = (f"{run.verdict.value}, run {run.id}" + ("" if saved else f", NOT SAVED ({kept_at})")
                if run else reason or state.value)
        self._report(task, state.value, text)

    def _event(self, task: _Task, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "step":
            task.started, task.step = True, str(event.get("text"))
            self._report(task, "running", task.step)
        elif kind == "identity":
            task.started, task.hostname = True, str(event.get("hostname") or task.hostname)
            self._report(task, "running", f"{event.get('gpus')} GPU(s)")
        elif kind == "run":
            try:
                run = load_run(str(event["document"]), origin=f"the run of {task.hostname}")
            except BadInputError as exc:  # e.g. a newer gpuaudit on the node
                self._end(task, NodeState.FAILED, str(exc))
                return
            task.hostname = run.node.hostname if run.node else task.hostname
            saved, kept_at = self.save(run)
            self._end(task, NodeState.DONE, None if saved else "the store refused the run",
                      run=run, saved=saved, kept_at=kept_at)

    def _lost(self, task: _Task) -> None:
        self._end(task, NodeState.LOST, "the node left the Ray cluster (Ray marked it dead)",
                  cancel=True)

    def _step_task(self, task: _Task) -> None:
        """Take the next event of a task that has one ready."""
        ray_errors = self.ray.exceptions
        try:
            ref = next(task.gen)
            event = self.ray.get(ref)
        except StopIteration:
            if task.outcome is None:
                self._end(task, NodeState.FAILED, "the node's task ended without a result")
            return
        except ray_errors.NodeDiedError:
            self._lost(task)
            return
        except (ray_errors.ObjectLostError, ray_errors.OwnerDiedError,
                ray_errors.WorkerCrashedError) as exc:
            if task.node.node_id not in alive_node_ids(self.ray):
                self._lost(task)
            else:
                self._end(task, NodeState.FAILED,
                          f"the node's worker process died ({type(exc).__name__}: killed, or "
                          "out of memory?)")
            return
        except ray_errors.TaskCancelledError:
            self._end(task, NodeState.FAILED, "the node's task was cancelled")
            return
        except ray_errors.RayError as exc:
            self._end(task, NodeState.FAILED, _cause(exc))
            return
        self._event(task, event)

    def wait(self, poll_s: float) -> None:
        next_liveness = time.monotonic() + LIVENESS_EVERY_S
        while pending := [t for t in self.tasks if t.outcome is None]:
            ready, _ = self.ray.wait([t.gen for t in pending], num_returns=1, timeout=poll_s)
            by_gen = {id(t.gen): t for t in pending}
            for gen in ready:
                self._step_task(by_gen[id(gen)])
            now = time.monotonic()
            for task in pending:
                if task.outcome is None and now - task.submitted > self.timeout_s:
                    why = (f"no result within {self.timeout_s:g} s" if task.started else
                           f"did not start within {self.timeout_s:g} s (its GPUs held by "
                           "other Ray work?)")
                    self._end(task, NodeState.TIMED_OUT, why, cancel=True)
            if now >= next_liveness:
                next_liveness = now + LIVENESS_EVERY_S
                alive = alive_node_ids(self.ray)
                for task in pending:
                    if task.outcome is None and task.node.node_id not in alive:
                        self._lost(task)

    def interrupt(self) -> None:
        for task in self.tasks:
            if task.outcome is None:
                self._end(task, NodeState.INTERRUPTED, "interrupted (Ctrl-C)", cancel=True)


def run_fleet(address: str, *, profile: str = "quick", nodes: int | None = None,
              timeout_s: float = DEFAULT_TIMEOUT_S, bench: bool = True,
              collectives: bool = True, save: Save,
              save_fleet: Callable[[FleetRun], None] | None = None,
              on_progress: Progress | None = None,
              on_stage: Callable[[str], None] | None = None,
              poll_s: float = 0.5, connect_timeout_s: float = 10.0) -> FleetRun:
    """Audit every GPU node (or the first `nodes`) of the Ray cluster at `address`.

    Returns the FleetRun: every node's outcome and the cross-node all-reduce figures.
    Bad input (unreachable address, no GPU node, Ray missing) raises BadInputError before
    anything runs. Ctrl-C stops waiting: the runs already saved stay, the FleetRun is PARTIAL.
    """
    if timeout_s <= 0:
        raise BadInputError("the per-node timeout must be more than zero")
    ray = connect(address, timeout_s=connect_timeout_s)
    started = utc_now()
    fleet_id = new_run_id()
    status = RunStatus.COMPLETE
    measured: list = []
    skipped_why: str | None = None
    try:
        chosen = choose(gpu_nodes(ray), nodes, address)
        if on_stage:
            on_stage(f"auditing {len(chosen)} node(s)")
        fleet = _Fleet(ray, chosen, fleet_id=fleet_id, profile=profile, bench=bench,
                       timeout_s=timeout_s, save=save, on_progress=on_progress)
        try:
            fleet.submit()
            fleet.wait(poll_s)
        except KeyboardInterrupt:
            fleet.interrupt()
            status = RunStatus.PARTIAL
        outcomes = tuple(t.outcome for t in fleet.tasks if t.outcome is not None)
        done = [t.node for t in fleet.tasks
                if t.outcome is not None and t.outcome.state is NodeState.DONE]
        if status is RunStatus.PARTIAL:
            skipped_why = "interrupted"
        elif not collectives:
            skipped_why = "not asked for (--no-collectives)"
        else:
            if on_stage:
                on_stage(f"all-reduce across {len(done)} node(s)")
            from .allreduce import all_reduce_across

            try:
                measured, skipped_why = all_reduce_across(ray, done, profile=profile,
                                                          timeout_s=min(timeout_s, 600.0))
            except KeyboardInterrupt:
                status, skipped_why = RunStatus.PARTIAL, "interrupted"
    finally:
        ray.shutdown()
    result = FleetRun(id=fleet_id, address=address, profile=profile, tool_version=__version__,
                      started_at=started, finished_at=utc_now(), status=status,
                      nodes=outcomes, collectives=tuple(measured),
                      collectives_skipped=skipped_why)
    if save_fleet is not None:
        save_fleet(result)
    return result
