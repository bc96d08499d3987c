"""Recommendations: what a task needs in GPU memory, and which offers to rent for it.

Every figure is an estimate from a stated model (see docs/cost-recommend.md); each record
carries its ``basis`` so that a reader knows what it rests on. Bytes are plain bytes; GB in
messages is 10^9 B.
"""

from __future__ import annotations

from enum import Enum

from pydantic import Field

from .base import Record
from .cost import Offer
from .pricing import PricingModel

# The version of recommend's document (`RecommendResult`). 2: `pricing` takes the values of
# the one PricingModel enum (on_demand, spot, reserved_1y, reserved_3y; 1 had on-demand,
# reserved-1y, reserved-3y), the same as `PriceRef.kind` and `PricingOption.name`.
RECOMMEND_SCHEMA_VERSION = 2


class TaskKind(str, Enum):
    TRAIN = "train"
    FINETUNE = "finetune"
    SERVE = "serve"
    INFER = "infer"  # memory only: weights + KV cache, no throughput target
    BENCHMARKED = "benchmarked"  # a workload measured in a stored run


class MemoryEstimate(Record):
    """Memory one GPU needs for a task, by component, after sharding over ``gpus`` GPUs."""

    kind: TaskKind
    params: float
    gpus: int = Field(ge=1)
    sharding: str  # "none", "zero-1", "zero-2", "zero-3", "tensor-parallel"
    weights_bytes: float  # per GPU
    gradients_bytes: float = 0.0
    optimizer_bytes: float = 0.0
    activations_bytes: float = 0.0
    kv_cache_bytes: float = 0.0
    states_total_bytes: float  # weights + gradients + optimizer state before sharding
    checkpointing: str | None = None  # activation recomputation: none, selective, full
    basis: tuple[str, ...] = ()

    @property
    def per_gpu_bytes(self) -> float:
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
                + self.activations_bytes + self.kv_cache_bytes)


class MemoryFit(Record):
    """The verdict for one GPU size: does ``estimate`` fit once ``margin`` is set aside?"""

    estimate: MemoryEstimate
    gpu_memory_bytes: float
    margin: float  # share of the GPU's memory kept free (CUDA context, fragmentation)
    fits: bool
    usable_bytes: float
    reason: str


class Recommendation(Record):
    """One offer, ranked: how long the task takes on it, what it costs, and why."""

    rank: int = Field(ge=1)
    offer: Offer
    nodes: int = Field(ge=1)  # instances rented at once (serving: replicas)
    gpus: int = Field(ge=1)  # all GPUs over all nodes
    pricing: PricingModel
    price_per_hour: float  # all nodes together, in `currency`
    currency: str
    hours: float  # estimated wall-clock time of the task (serving: the hours asked for)
    cost: float  # expected cost of the task in `currency`
    rate: float  # achieved work rate: TFLOP/s (train, fine-tune, benchmarked) or tokens/s
    rate_unit: str
    memory_per_gpu_bytes: float | None = None
    sharding: str | None = None
    measured: bool = False  # the rate comes from a measurement on this GPU model
    reasons: tuple[str, ...] = ()
    basis: tuple[str, ...] = ()


class Exclusion(Record):
    """An offer left out, with the one-line reason."""

    offer_key: str
    gpu_model: str
    gpu_count: int
    kind: str  # "memory", "deadline", "budget", "price", "spec", "currency", "latency"
    reason: str


class Assumptions(Record):
    """The model's stated knobs; defaults are documented in docs/cost-recommend.md."""

    mfu: float = Field(default=0.40, gt=0, le=1)
    intra_node_efficiency_nvlink: float = Field(default=0.95, gt=0, le=1)
    intra_node_efficiency_pcie: float = Field(default=0.85, gt=0, le=1)
    # across nodes for a benchmarked workload (no model to size its step); training and
    # fine-tuning compute it from the offer's network (cost/recommend/network.py)
    inter_node_efficiency: float = Field(default=0.90, gt=0, le=1)
    global_batch_tokens: float = Field(default=4_194_304, gt=0)  # tokens per optimizer step
    comm_overlap: float = Field(default=2 / 3, ge=0, le=1)  # of a step's compute (backward)
    allow_pooling: bool = False  # pool instances with no known network between them
    pooled_network_gbps: float = Field(default=10.0, gt=0)  # assumed for those, when allowed
    bandwidth_efficiency: float = Field(default=0.80, gt=0, le=1)
    memory_margin: float = Field(default=0.10, ge=0, lt=1)
    max_nodes: int = Field(default=64, ge=1)
    # Spot, priced by gpuaudit.cost.pricing (Daly's checkpoint interval and expected time):
    # the probability that one instance is interrupted within an hour, read as `gpuaudit cost
    # job --interruption-rate` reads it (exponential lifetimes: MTBI = −1 h / ln(1 − p), 19.5 h
    # at 0.05); a job on n instances stops when any of them is, so its MTBI is that ÷ n.
    spot_interruptions_per_hour: float = Field(default=0.05, gt=0, lt=1)
    checkpoint_minutes: float = Field(default=5.0, gt=0)  # δ: writing one checkpoint
    restart_minutes: float = Field(default=10.0, ge=0)  # R: from an interruption back to work


class RecommendResult(Record):
    schema_version: int = RECOMMEND_SCHEMA_VERSION
    task: dict[str, str | int | float | bool | None]
    currency: str
    assumptions: Assumptions
    ranked: tuple[Recommendation, ...] = ()
    excluded: tuple[Exclusion, ...] = ()  # the first few, cheapest first
    considered: int = 0
    feasible: int = 0
    excluded_counts: dict[str, int] = Field(default_factory=dict)
    notes: tuple[str, ...] = ()


class ModelShape(Record):
    """A decoder-only transformer as the memory and FLOP formulas see it."""

    params: float = Field(gt=0)
    layers: int = Field(ge=1)
    hidden: int = Field(ge=1)
    heads: int = Field(ge=1)
    kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    derived: bool = False  # layers/hidden were derived from `params`, not given
