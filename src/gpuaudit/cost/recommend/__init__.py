"""`recommend`: which catalog offers to rent for a task, ranked by estimated cost (or time).

The model, in one paragraph (docs/cost-recommend.md has the rest): a training task is
6·N·T FLOPs (fine-tuning with LoRA 4·N·T: no weight gradients for the frozen base); an offer
delivers peak (datasheet, dense, the task's precision) × MFU × GPUs × a scaling efficiency;
the memory plan (memory_fit) must fit with a margin, using the least ZeRO sharding that fits;
nodes are added only when the memory or a deadline needs them. Serving is decode-bound: a
decode step reads the weights plus the batch's KV cache from memory, so the step time is
bytes ÷ (bandwidth × efficiency), or the compute time if that is longer; the batch is the
largest that keeps a step within the latency SLO and the KV cache within memory. A benchmarked
workload uses the run's measured rate on the same GPU model, scaled by the spec ratio on
others. The pricing model (on-demand, reserved, spot) and its figures come from
cost/pricing.py: billing rounding, whole reserved terms, spot at Daly's checkpoint interval
with the expected completion time; the choice is compare_job's (the cheapest that meets the
deadline). Everything here is an estimate and says so.

Speed matters (10,000 offers in well under 200 ms): each offer is reduced to numbers first;
hardware plans and pricing.py's figures (linear in the price) are computed once per distinct
plan and billing unit; reasons and records are built only for the offers shown.

The package, by job: `tasks` (what is asked, and its parsing), `hardware` (the hardware plan
of an offer), `prices` (pricing.py's figures per plan, the model picked, its reasons),
`ranking` (evaluation, order, records: `recommend`), `context` (what one call shares).
Everything public is importable from here, as it was from the single module.
"""

from .ranking import recommend
from .tasks import (
    TRAIN_PRECISIONS,
    BenchmarkedTask,
    Constraints,
    FinetuneTask,
    PredictedTask,
    ServeTask,
    Task,
    TrainingTask,
    TrainTask,
    check_precision,
    parse_hours,
    parse_quantity,
    task_from_run,
)

__all__ = [
    "TRAIN_PRECISIONS",
    "BenchmarkedTask",
    "Constraints",
    "FinetuneTask",
    "PredictedTask",
    "ServeTask",
    "Task",
    "TrainTask",
    "TrainingTask",
    "check_precision",
    "parse_hours",
    "parse_quantity",
    "recommend",
    "task_from_run",
]
