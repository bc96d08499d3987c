"""What every step of one `recommend` call shares: the task, constraints, assumptions, specs,
the task's work and model shape, and a memo of everything computed once per distinct plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuaudit.model.recommendation import Assumptions, FeedNeed, ModelShape
from gpuaudit.specs.figures import FigureCatalog

from .tasks import Constraints, Task


@dataclass(repr=False, eq=False)
class Context:
    task: Task
    cons: Constraints
    ass: Assumptions
    specs: FigureCatalog  # or a full SpecCatalog: the same questions are asked of both
    flops: float = 0.0  # train/fine-tune/benchmarked work, in the rate's unit × seconds
    shape: ModelShape | None = None
    memo: dict[Any, Any] = field(default_factory=dict)
    # an all-reduce measured across nodes (measured.MeasuredAllReduce), for the offers whose
    # GPUs it was measured on
    allreduce: Any = None
    feed: FeedNeed | None = None  # the job's input need (feed.py)

