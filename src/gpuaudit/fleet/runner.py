"""`gpuaudit fleet run`: one audit task per GPU node of a Ray cluster, results saved as they
arrive, every node accounted for.

Each node gets one task pinned to it (node affinity, not soft) that asks for all of its GPUs,
so nothing else Ray schedules shares them while they are measured. The task posts its
progress to a board (an actor the driver reads every poll) and returns its run; the driver
works the same connected directly or through Ray Client. It saves each node's Run the moment
it arrives
(through the `save` callback: this layer does not know the store), so a node that fails later,
or Ctrl-C, loses nothing already measured. A node is TIMED_OUT past the per-node timeout
(counted from submission, so a node whose GPUs are held by other work times out too) and its
task cancelled; LOST when Ray marks the node dead; FAILED when its task raised. At the end
every audited node is judged against what the fleet expects (fleet.expect).
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
from .expect import Expectation, NodeFacts, facts_of, judge, majority
from .node import ProgressBoard, node_task
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
    ref: Any
    submitted: float
    hostname: str
    step: str | None = None
    started: bool = False
    outcome: NodeOutcome | None = None
    facts: NodeFacts | None = None


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
        self.by_key: dict[str, _Task] = {}
        self.names: dict[str, str] = {}  # node name → the Ray node id that has it
        self.board: Any = None

    def _report(self, task: _Task, state: str, text: str) -> None:
        if self.on_progress:
            self.on_progress(NodeProgress(task.node, task.hostname, state, text))

    def submit(self) -> None:
        affinity = self.ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy
        self.board = self.ray.remote(num_cpus=0)(ProgressBoard).remote()
        remote = self.ray.remote(node_task)
        for node in self.nodes:
            ref = remote.options(
                num_cpus=0, num_gpus=node.gpus, max_retries=0, retry_exceptions=False,
                scheduling_strategy=affinity(node.node_id, soft=False),
            ).remote(self.profile, self.fleet_id, self.bench, self.board, node.node_id)
            task = _Task(node=node, ref=ref, submitted=time.monotonic(), hostname=node.hostname)
            self.tasks.append(task)
            self.by_key[node.node_id] = task
            self._report(task, "waiting", "submitted")

    def _end(self, task: _Task, state: NodeState, reason: str | None = None, *,
             run: Run | None = None, saved: bool = False, kept_at: str | None = None,
             cancel: bool = False) -> None:
        if cancel:
            # Already finished, or its node gone: nothing left to stop.
            with contextlib.suppress(Exception):
                self.ray.cancel(task.ref, force=True)
        task.outcome = NodeOutcome(
            ray_node_id=task.node.node_id, hostname=task.hostname, node_ip=task.node.ip,
            gpus=task.node.gpus, state=state, reason=reason,
            last_step=task.step if state is not NodeState.DONE else None,
            run_id=run.id if run else None, verdict=run.verdict if run else None,
            saved=saved, kept_at=kept_at, elapsed_s=round(time.monotonic() - task.submitted, 3))
        text = (f"{run.verdict.value}, run {run.id}" + ("" if saved else f", NOT SAVED ({kept_at})")
                if run else reason or state.value)
        self._report(task, state.value, text)

    def _name(self, task: _Task, run: Run) -> Run:
        """`run` with its node's name in the fleet: its own (Kubernetes node name or host
        name), or that with the Ray node id when another node of this run has it already."""
        node = run.node
        if node is None:
            return run
        name = node.node_name or node.hostname
        holder = self.names.setdefault(name, task.node.node_id)
        if holder != task.node.node_id:
            name = f"{name}@{task.node.node_id[:12]}"
            self.names[name] = task.node.node_id
        return run.model_copy(update={"node": node.model_copy(update={"node_name": name})})

    def _progress(self) -> None:
        """The events the nodes posted since the last look."""
        try:
            posted = self.ray.get(self.board.take.remote(), timeout=10.0)
        except Exception:  # the board's node gone: progress stops, results still arrive
            return
        for key, event in posted:
            task = self.by_key.get(key)
            if task is None or task.outcome is not None:
                continue
            task.started = True
            if event.get("event") == "step":
                task.step = str(event.get("text"))
                self._report(task, "running", task.step)
            elif event.get("event") == "identity":
                task.hostname = str(event.get("node_name") or event.get("hostname")
                                    or task.hostname)
                self._report(task, "running", f"{event.get('gpus')} GPU(s)")

    def _arrived(self, task: _Task, document: str) -> None:
        try:
            run = load_run(document, origin=f"the run of {task.hostname}")
        except BadInputError as exc:  # e.g. a newer gpuaudit on the node
            self._end(task, NodeState.FAILED, str(exc))
            return
        run = self._name(task, run)
        task.hostname = run.node.node_name if run.node and run.node.node_name else task.hostname
        if run.machine is not None:
            task.facts = facts_of(task.hostname, run.machine)
        saved, kept_at = self.save(run)
        self._end(task, NodeState.DONE, None if saved else "the store refused the run",
                  run=run, saved=saved, kept_at=kept_at)

    def _lost(self, task: _Task) -> None:
        self._end(task, NodeState.LOST, "the node left the Ray cluster (Ray marked it dead)",
                  cancel=True)

    def _collect(self, task: _Task) -> None:
        """The result of a task that has finished, or why it has none."""
        ray_errors = self.ray.exceptions
        try:
            document = self.ray.get(task.ref)
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
        if not document:
            self._end(task, NodeState.FAILED, "the node's task ended without a result")
            return
        self._arrived(task, document)

    def wait(self, poll_s: float) -> None:
        next_liveness = time.monotonic() + LIVENESS_EVERY_S
        while pending := [t for t in self.tasks if t.outcome is None]:
            ready, _ = self.ray.wait([t.ref for t in pending], num_returns=len(pending),
                                     timeout=poll_s)
            self._progress()
            # By the object's id: through Ray Client, wait() hands back new ref objects.
            by_ref = {t.ref.hex(): t for t in pending}
            for ref in ready:
                self._collect(by_ref[ref.hex()])
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

    def judged(self, expect: Expectation | None) -> tuple[tuple[NodeOutcome, ...],
                                                          Expectation | None, list[str]]:
        """Every outcome, the audited nodes judged against `expect` (None: the majority of
        the audited nodes)."""
        audited = [t.facts for t in self.tasks if t.facts is not None]
        notes: list[str] = []
        if expect is None and audited:
            expect, notes = majority(audited)
        outcomes = []
        for t in self.tasks:
            if t.outcome is None:
                continue
            problems = judge(t.facts, expect) if t.facts and expect else ()
            outcomes.append(t.outcome.model_copy(update={"problems": problems})
                            if problems else t.outcome)
        return tuple(outcomes), expect, notes


def run_fleet(address: str, *, profile: str = "quick", nodes: int | None = None,
              timeout_s: float = DEFAULT_TIMEOUT_S, bench: bool = True,
              collectives: bool = True, save: Save,
              save_fleet: Callable[[FleetRun], None] | None = None,
              on_progress: Progress | None = None,
              on_stage: Callable[[str], None] | None = None,
              expect: Expectation | None = None,
              poll_s: float = 0.5, connect_timeout_s: float = 10.0,
              ray: Any = None) -> FleetRun:
    """Audit every GPU node (or the first `nodes`) of the Ray cluster at `address`.

    Returns the FleetRun: every node's outcome (judged against `expect`, or the fleet's
    majority) and the cross-node all-reduce figures. `ray`: an already connected Ray (or a
    stand-in with its API, for driving the loop at scale) instead of connecting to `address`.
    Bad input (unreachable address, no GPU node, Ray missing) raises BadInputError before
    anything runs. Ctrl-C stops waiting: the runs already saved stay, the FleetRun is PARTIAL.
    """
    if timeout_s <= 0:
        raise BadInputError("the per-node timeout must be more than zero")
    if ray is None:
        ray = connect(address, timeout_s=connect_timeout_s)
    started = utc_now()
    fleet_id = new_run_id()
    status = RunStatus.COMPLETE
    measured: list = []
    skipped_why: str | None = None
    outcomes: tuple[NodeOutcome, ...] = ()
    expectation = expect
    notes: list[str] = []
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
        outcomes, expectation, notes = fleet.judged(expect)
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
                      collectives_skipped=skipped_why, expectation=expectation,
                      notes=tuple(notes))
    if save_fleet is not None:
        save_fleet(result)
    return result
