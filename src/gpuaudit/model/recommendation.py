"""Recommendations: what a task needs in GPU memory, and which offers to rent for it.

Every figure is an estimate from a stated model (see docs/cost-recommend.md); each record
carries its ``basis`` so that a reader knows what it rests on. Bytes are plain bytes; GB in
messages is 10^9 B.
"""

from __future__ import annotations

from dataclasses import field
from enum import Enum
from typing import Annotated

from .cost import Offer
from .lite import Bound, Lite, check_bounds, record
from .pricing import PricingModel

# The version of recommend's document (`RecommendResult`). 2: `pricing` takes the values of
# the one PricingModel enum (on_demand, spot, reserved_1y, reserved_3y; 1 had on-demand,
# reserved-1y, reserved-3y), the same as `PriceRef.kind` and `PricingOption.name`.
# 3: a recommendation's `serving` (prefill, decode, TPOT, TTFT of a serving task) and `feed`
# (whether the host can feed the GPUs a known input rate).
RECOMMEND_SCHEMA_VERSION = 3


class TaskKind(str, Enum):
    TRAIN = "train"
    FINETUNE = "finetune"
    SERVE = "serve"
    INFER = "infer"  # memory only: weights + KV cache, no throughput target
    BENCHMARKED = "benchmarked"  # a workload measured in a stored run


@record
class MemoryEstimate(Lite):
    """Memory one GPU needs for a task, by component, after sharding over ``gpus`` GPUs."""

    kind: TaskKind
    params: float
    gpus: Annotated[int, Bound(ge=1)]
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


@record
class MemoryFit(Lite):
    """The verdict for one GPU size: does ``estimate`` fit once ``margin`` is set aside?"""

    estimate: MemoryEstimate
    gpu_memory_bytes: float
    margin: float  # share of the GPU's memory kept free (CUDA context, fragmentation)
    fits: bool
    usable_bytes: float
    reason: str


@record
class ServingPlan(Lite):
    """How one offer serves the request stream (means; docs/cost-recommend.md, Serving):
    replicas of one instance each, the batch each decodes, one prompt's prefill, one decode
    step, and the time per output token (TPOT) and to the first token (TTFT) at the rate."""

    replicas: int
    requests_per_s_per_replica: float
    batch: int
    prompt_tokens: int
    output_tokens: int
    prefill_flops_per_request: float
    prefill_ms: float
    decode_step_ms: float
    decode_bound: str  # "memory-bandwidth" | "compute"
    tpot_ms: float
    ttft_ms: float
    tpot_bound_ms: float
    ttft_bound_ms: float | None = None
    limit: str  # what stops a replica going faster: throughput, TPOT, TTFT, memory


@record
class FeedNeed(Lite):
    """What the job's input pipeline needs from the host, per GPU (docs/cost-recommend.md,
    Can the host feed it?): CPU for the data loader at the reference GPU's speed, and the
    memory of its worker processes. `gpu_model` is the GPU the need was measured with (None:
    not known, the need is taken as it is on every GPU)."""

    source: str  # "run ID: bench train data loading", "doctor diagnosis FILE", ...
    loader_vcpus_per_gpu: float  # vCPUs busy loading at the reference rate
    trainer_vcpus_per_gpu: float  # the training process's own, one per GPU
    worker_gib: float  # host memory per loader worker (a process and its batches in flight)
    gpu_model: str | None = None
    samples_per_s_per_gpu: float | None = None  # the reference rate, where known
    basis: tuple[str, ...] = ()


@record
class FeedCheck(Lite):
    """Whether one offer's vCPUs and memory per GPU can feed the need (`FeedNeed`) at the
    speed its GPUs run the task. `verdict`: "feeds", "short" (marked, with the reason) or
    "unknown" (the offer lists no vCPUs)."""

    verdict: str
    vcpus_needed_per_gpu: float
    ram_gib_needed_per_gpu: float
    vcpus_per_gpu: float | None = None
    ram_gib_per_gpu: float | None = None
    gpu_wait_share: float = 0.0  # short of vCPUs: the share of time its GPUs would wait
    reason: str = ""


@record
class Recommendation(Lite):
    """One offer, ranked: how long the task takes on it, what it costs, and why."""

    rank: Annotated[int, Bound(ge=1)]
    offer: Offer
    nodes: Annotated[int, Bound(ge=1)]  # instances rented at once (serving: replicas)
    gpus: Annotated[int, Bound(ge=1)]  # all GPUs over all nodes
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
    serving: ServingPlan | None = None  # serving tasks: the replica's figures
    feed: FeedCheck | None = None  # a known input need: can this host feed its GPUs


@record
class Exclusion(Lite):
    """An offer left out, with the one-line reason."""

    offer_key: str
    gpu_model: str
    gpu_count: int
    kind: str  # "memory", "deadline", "budget", "price", "spec", "currency", "latency"
    reason: str


@record
class Assumptions(Lite):
    """The model's stated knobs; defaults are documented in docs/cost-recommend.md."""

    mfu: Annotated[float, Bound(gt=0, le=1)] = 0.40
    intra_node_efficiency_nvlink: Annotated[float, Bound(gt=0, le=1)] = 0.95
    intra_node_efficiency_pcie: Annotated[float, Bound(gt=0, le=1)] = 0.85
    # across nodes for a benchmarked workload (no model to size its step); training and
    # fine-tuning compute it from the offer's network (cost/recommend/network.py)
    inter_node_efficiency: Annotated[float, Bound(gt=0, le=1)] = 0.90
    # tokens per optimizer step
    global_batch_tokens: Annotated[float, Bound(gt=0)] = 4_194_304
    # of a step's compute (the backward pass)
    comm_overlap: Annotated[float, Bound(ge=0, le=1)] = 2 / 3
    allow_pooling: bool = False  # pool instances with no known network between them
    # assumed for those, when allowed
    pooled_network_gbps: Annotated[float, Bound(gt=0)] = 10.0
    bandwidth_efficiency: Annotated[float, Bound(gt=0, le=1)] = 0.80
    memory_margin: Annotated[float, Bound(ge=0, lt=1)] = 0.10
    max_nodes: Annotated[int, Bound(ge=1)] = 64
    # Spot, priced by gpuaudit.cost.pricing (Daly's checkpoint interval and expected time):
    # the probability that one instance is interrupted within an hour, read as `gpuaudit cost
    # job --interruption-rate` reads it (exponential lifetimes: MTBI = −1 h / ln(1 − p), 19.5 h
    # at 0.05); a job on n instances stops when any of them is, so its MTBI is that ÷ n.
    spot_interruptions_per_hour: Annotated[float, Bound(gt=0, lt=1)] = 0.05
    checkpoint_minutes: Annotated[float, Bound(gt=0)] = 5.0  # δ: writing one checkpoint
    # R: from an interruption back to work
    restart_minutes: Annotated[float, Bound(ge=0)] = 10.0

    def __post_init__(self) -> None:
        check_bounds(self)  # the knobs come from users (library and options)


@record
class RecommendResult(Lite):
    schema_version: int = RECOMMEND_SCHEMA_VERSION
    task: dict[str, str | int | float | bool | None]
    currency: str
    assumptions: Assumptions
    ranked: tuple[Recommendation, ...] = ()
    excluded: tuple[Exclusion, ...] = ()  # the first few, cheapest first
    considered: int = 0
    feasible: int = 0
    excluded_counts: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    feed: FeedNeed | None = None  # the input need the offers were checked against


@record
class ModelShape(Lite):
    """A decoder-only transformer as the memory and FLOP formulas see it."""

    params: Annotated[float, Bound(gt=0)]
    layers: Annotated[int, Bound(ge=1)]
    hidden: Annotated[int, Bound(ge=1)]
    heads: Annotated[int, Bound(ge=1)]
    kv_heads: Annotated[int, Bound(ge=1)]
    head_dim: Annotated[int, Bound(ge=1)]
    derived: bool = False  # layers/hidden were derived from `params`, not given
