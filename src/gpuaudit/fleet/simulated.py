"""A simulated Ray cluster: the part of Ray's API `fleet.runner` uses, over any number of GPU
nodes that live in this process. For driving `run_fleet` itself at a scale no test machine
has (validation/fleet/scale_run.py: the driver's time and memory at 1,000 nodes) and for tests
of its bookkeeping (every node accounted for when some fail, hang or die).

Each simulated node takes a drawn time to "audit", posts progress steps to the driver's
board on the way, and returns the run document a real node would (fleet.synthetic: real H200
medians with noise), unless it is planted to fail (its task raises), hang (never returns), or
die (Ray reports its node dead). What it does not simulate: Ray's own scheduling, transport
and object store costs, and the cross-node all-reduce (run it with collectives off).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from gpuaudit.model import utc_now

from .node import ProgressBoard
from .synthetic import SyntheticFleet

STEPS = ("inspect", "matmul bf16", "memory", "transfer", "collectives all_reduce")


class RayError(Exception):
    pass


class NodeDiedError(RayError):
    pass


class _Other(RayError):
    pass


class RayTaskError(RayError):
    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


EXCEPTIONS = SimpleNamespace(RayError=RayError, NodeDiedError=NodeDiedError,
                             ObjectLostError=_Other, OwnerDiedError=_Other,
                             WorkerCrashedError=_Other, TaskCancelledError=_Other)


@dataclass(frozen=True)
class NodeAffinitySchedulingStrategy:
    node_id: str
    soft: bool = False


@dataclass
class _Ref:
    key: str
    value: Any = None
    task: _Task | None = None

    def hex(self) -> str:
        return self.key


@dataclass
class _Task:
    node: int
    node_id: str
    start: float
    end: float
    fate: str  # "done", "fail", "hang", "die"
    posted: int = 0
    cancelled: bool = False


@dataclass
class _Remote:
    sim: SimulatedRay
    target: Any
    options_: dict[str, Any] = field(default_factory=dict)

    def options(self, **kwargs: Any) -> _Remote:
        return _Remote(self.sim, self.target, {**self.options_, **kwargs})

    def remote(self, *args: Any) -> Any:
        if self.target is ProgressBoard:
            return _Actor(self.sim)
        return self.sim._submit(self.options_["scheduling_strategy"].node_id)


class _Actor:
    """The progress board: take() hands the steps each running node has reached."""

    def __init__(self, sim: SimulatedRay) -> None:
        self.sim = sim
        self.take = SimpleNamespace(remote=lambda: _Ref(sim._key(), value=sim._posted()))
        self.post = SimpleNamespace(remote=lambda *a: None)


class SimulatedRay:
    """`nodes` GPU nodes of `fleet` (SyntheticFleet), each audited in a time drawn from
    `duration_s` (uniform, seconds from submission); the nodes numbered in `fail`, `hang`
    and `die` do that instead (a dying node dies at its drawn time)."""

    def __init__(self, fleet: SyntheticFleet, *, duration_s: tuple[float, float] = (1.0, 5.0),
                 fail: frozenset[int] = frozenset(), hang: frozenset[int] = frozenset(),
                 die: frozenset[int] = frozenset(), seed: int = 0,
                 started: datetime | None = None) -> None:
        self.fleet, self.duration_s = fleet, duration_s
        self.fates = {**dict.fromkeys(fail, "fail"), **dict.fromkeys(hang, "hang"),
                      **dict.fromkeys(die, "die")}
        self.rng = random.Random(seed)
        self.started = started or utc_now()
        self.tasks: dict[str, _Task] = {}
        self.dead_at: dict[str, float] = {}
        self.exceptions = EXCEPTIONS
        self.util = SimpleNamespace(scheduling_strategies=SimpleNamespace(
            NodeAffinitySchedulingStrategy=NodeAffinitySchedulingStrategy))
        self._count = 0
        self.document_s = 0.0  # time spent making the nodes' documents (not the driver's)
        self._ids = {f"{i:056x}": i for i in range(fleet.nodes)}

    # -- the API fleet.runner calls ------------------------------------------------------

    def nodes(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [{"NodeID": nid, "NodeManagerHostname": self.fleet.hostname(i),
                 "NodeManagerAddress": f"10.1.{i // 250}.{i % 250 + 1}",
                 "Resources": {"GPU": float(self.fleet.gpus_per_node), "CPU": 64.0},
                 "Alive": self.dead_at.get(nid, float("inf")) > now}
                for nid, i in self._ids.items()]

    def remote(self, target: Any = None, **options: Any) -> Any:
        if target is None:  # ray.remote(num_cpus=0)(cls)
            return lambda t: _Remote(self, t, options)
        return _Remote(self, target, options)

    def wait(self, refs: list[_Ref], *, num_returns: int = 1, timeout: float | None = None
             ) -> tuple[list[_Ref], list[_Ref]]:
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        while True:
            now = time.monotonic()
            ready = [r for r in refs if r.task and r.task.fate != "hang" and r.task.end <= now]
            if len(ready) >= num_returns or now >= deadline:
                return ready, [r for r in refs if r not in ready]
            soonest = min((r.task.end for r in refs
                           if r.task and r.task.fate != "hang" and r.task.end > now),
                          default=deadline)
            time.sleep(max(0.0, min(soonest, deadline) - now))

    def get(self, ref: _Ref, timeout: float | None = None) -> Any:
        task = ref.task
        if task is None:
            return ref.value
        if task.fate == "fail":
            raise RayTaskError(RuntimeError("CUDA error: an illegal memory access was "
                                            "encountered"))
        if task.fate == "die":
            raise NodeDiedError(f"the node {task.node_id} died")
        t = time.perf_counter()
        run = self.fleet.run(task.node, self.started, fleet_id=None)
        document = run.model_dump_json()
        self.document_s += time.perf_counter() - t
        return document

    def cancel(self, ref: _Ref, force: bool = False) -> None:
        if ref.task is not None:
            ref.task.cancelled = True

    def shutdown(self) -> None:
        pass

    # -- the simulation -------------------------------------------------------------------

    def _key(self) -> str:
        self._count += 1
        return f"{self._count:040x}"

    def _submit(self, node_id: str) -> _Ref:
        node = self._ids[node_id]
        now = time.monotonic()
        task = _Task(node=node, node_id=node_id, start=now,
                     end=now + self.rng.uniform(*self.duration_s),
                     fate=self.fates.get(node, "done"))
        if task.fate == "die":
            self.dead_at[node_id] = task.end
        ref = _Ref(self._key(), task=task)
        self.tasks[ref.key] = task
        return ref

    def _posted(self) -> list[tuple[str, dict[str, Any]]]:
        """The steps each running node has reached since the last look (the identity
        first, as a real node posts it after inspect)."""
        now = time.monotonic()
        events = []
        for task in self.tasks.values():
            if task.cancelled or (task.node_id in self.dead_at and self.dead_at[
                    task.node_id] <= now):
                continue
            span = (task.end - task.start) if task.fate != "hang" else 1.0
            reached = min(len(STEPS), int(len(STEPS) * (now - task.start) / span) + 1)
            for i in range(task.posted, reached):
                if i == 1:
                    events.append((task.node_id, {
                        "event": "identity", "hostname": self.fleet.hostname(task.node),
                        "node_name": None, "gpus": self.fleet.gpus_per_node}))
                events.append((task.node_id, {"event": "step", "text": STEPS[i]}))
            task.posted = max(task.posted, reached)
        return events


__all__ = ["SimulatedRay"]
