"""The fleet's records: what one `fleet run` did on each node, and what `fleet report` finds.

Documents carry their own `schema_version` (FLEET_SCHEMA_VERSION); the per-node runs are plain
`Run` documents tagged with their node (`Run.node`).
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Literal, NamedTuple

from pydantic import Field

from gpuaudit.model import Measurement, Record, RunStatus, Severity

from .actions import Action
from .expect import Expectation

FLEET_SCHEMA_VERSION = 1


class NodeState(str, Enum):
    DONE = "done"  # audited; its run is in the store (or in the file `kept_at` names)
    FAILED = "failed"  # the node's task raised: `reason` says what
    TIMED_OUT = "timed_out"  # no result within the per-node timeout; the task was cancelled
    LOST = "lost"  # the node left the cluster (died, was removed) while its task ran
    INTERRUPTED = "interrupted"  # Ctrl-C before the node finished


class NodeOutcome(Record):
    """One node of a fleet run."""

    ray_node_id: str
    # The node's name in the fleet: as Ray knows the node until its audit arrives, then the
    # audit's node name (see NodeIdentity.node_name).
    hostname: str
    node_ip: str | None = None
    gpus: int = 0  # GPUs Ray offers on the node
    state: NodeState
    reason: str | None = None  # why it is not DONE
    last_step: str | None = None  # what it was doing when it failed, hung or was lost
    run_id: str | None = None
    verdict: Severity | None = None
    saved: bool = False  # the run is in the store
    kept_at: str | None = None  # the file holding a run the store refused
    elapsed_s: float | None = None
    # Where the audited node differs from what the fleet expects (GPU count, model, driver,
    # CUDA, NVML answering): see FleetRun.expectation.
    problems: tuple[str, ...] = ()


class FleetRun(Record):
    """One `gpuaudit fleet run`: every node asked, what became of it, and the figures
    measured across nodes (the multi-node all-reduce)."""

    schema_version: int = FLEET_SCHEMA_VERSION
    kind: Literal["fleet-run"] = "fleet-run"
    id: str
    address: str
    profile: str
    tool_version: str
    started_at: datetime
    finished_at: datetime | None = None
    status: RunStatus = RunStatus.COMPLETE
    nodes: tuple[NodeOutcome, ...] = ()
    # all_reduce across the nodes that finished their audit (busbw by the nccl-tests factor
    # 2(n-1)/n, n = all ranks on all nodes); empty when not run, with `collectives_skipped`.
    collectives: tuple[Measurement, ...] = ()
    collectives_skipped: str | None = None
    # What every node was judged against (an --expect file or the fleet's majority), and the
    # fields it could not judge.
    expectation: Expectation | None = None
    notes: tuple[str, ...] = ()

    def failed(self) -> list[NodeOutcome]:
        return [n for n in self.nodes if n.state is not NodeState.DONE]

    def bad(self) -> list[NodeOutcome]:
        """The nodes not audited, with a FAIL finding, or not what the fleet expects."""
        return [n for n in self.nodes if n.state is not NodeState.DONE
                or n.verdict is Severity.FAIL or n.problems]


# -- what the store hands the report: plain rows, many of them, so no validation each -------


class NodeRow(NamedTuple):
    run_id: str
    hostname: str
    started_at: datetime
    ray_node_id: str | None
    node_ip: str | None
    fleet_id: str | None
    driver_version: str | None
    gpu_summary: str | None
    verdict: str


class GpuRow(NamedTuple):
    run_id: str
    gpu_index: int
    name: str
    uuid: str | None
    serial: str | None
    vbios_version: str | None


class FigureRow(NamedTuple):
    """A figure's row. The store hands plain tuples of this shape (see store.fleet)."""

    run_id: str
    suite: str
    name: str
    unit: str
    value: float
    gpu_index: int | None


class FindingRow(NamedTuple):
    run_id: str
    code: str
    severity: str
    gpu_index: int | None
    message: str


class FleetRows(NamedTuple):
    """Each node's latest audit and the one before it (`previous`), with their figures, GPUs
    and WARN/FAIL findings; the fleet runs of the period, newest first (JSON documents)."""

    latest: list[NodeRow]
    previous: list[NodeRow]
    gpus: list[GpuRow]
    figures: list[tuple]  # FigureRow-shaped: (run_id, suite, name, unit, value, gpu_index)
    findings: list[FindingRow]
    fleet_runs: list[str]


# -- the report ------------------------------------------------------------------------------


class Deviation(Record):
    """A GPU (or a node, for node-wide figures) outside its model's fleet spread."""

    hostname: str
    run_id: str
    gpu_index: int | None = None
    uuid: str | None = None
    serial: str | None = None
    value: float
    deviation_pct: float  # (value - median) / median, in %
    robust_z: float | None = None  # (value - median) / (1.4826 MAD); None when MAD is 0
    worse: bool  # on the slow side (below for throughput, above for latency)


class FigureSpread(Record):
    """One figure across the fleet's GPUs of one model (scope "gpu") or across its nodes of
    one make-up, e.g. "8× NVIDIA H200" (scope "node")."""

    model: str
    scope: Literal["gpu", "node"]
    suite: str
    name: str
    unit: str
    lower_is_better: bool
    count: int
    median: float
    mad: float  # median absolute deviation from the median
    low: float  # values outside [low, high] are outside the spread
    high: float
    outside: tuple[Deviation, ...] = ()


class NodeSummary(Record):
    hostname: str
    run_id: str
    started_at: datetime
    ray_node_id: str | None = None
    node_ip: str | None = None
    gpu_summary: str | None = None
    verdict: Severity


class FailFinding(Record):
    hostname: str
    run_id: str
    code: str
    gpu_index: int | None = None
    message: str


class NodeChange(Record):
    """What differs between a node's latest audit and the one before it."""

    hostname: str
    run_id: str
    previous_run_id: str
    previous_started_at: datetime
    changes: tuple[str, ...]


class FleetCheck(Record):
    """`gpuaudit fleet check`: one node judged by itself against an expectation file (a
    scheduler's health check), and what was done about it."""

    schema_version: int = FLEET_SCHEMA_VERSION
    kind: Literal["fleet-check"] = "fleet-check"
    node: str
    checked_at: datetime
    source: str  # "live" or the snapshot read
    expectation: Expectation
    reasons: tuple[str, ...] = ()  # empty: the node is good
    actions: tuple[Action, ...] = ()

    @property
    def bad(self) -> bool:
        return bool(self.reasons)


class BadNode(Record):
    hostname: str
    run_id: str | None = None  # None: the node failed in the last fleet run, no audit then
    ray_node_id: str | None = None
    node_ip: str | None = None
    reasons: tuple[str, ...]


class FleetReport(Record):
    """`gpuaudit fleet report`: the fleet as its latest audits show it."""

    schema_version: int = FLEET_SCHEMA_VERSION
    kind: Literal["fleet-report"] = "fleet-report"
    generated_at: datetime
    since: datetime | None = None
    nodes: tuple[NodeSummary, ...] = ()
    gpus: int = 0
    spreads: tuple[FigureSpread, ...] = ()
    fail_findings: tuple[FailFinding, ...] = ()
    changed: tuple[NodeChange, ...] = ()
    bad_nodes: tuple[BadNode, ...] = ()
    last_fleet_run: FleetRun | None = None
    # The newest all-reduce across nodes in the period (suite "fleet"), and its fleet run.
    cross_node: tuple[Measurement, ...] = ()
    cross_node_fleet_id: str | None = None
    # What each node was judged against (an --expect file or the fleet's majority).
    expectation: Expectation | None = None
    # What was done (or, in a dry run, would be done) about the bad nodes.
    actions: tuple[Action, ...] = ()
    notes: tuple[str, ...] = Field(default=())

    @property
    def bad(self) -> bool:
        return bool(self.bad_nodes)
