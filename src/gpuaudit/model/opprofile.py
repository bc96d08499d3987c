"""The op profile of one training mode (`gpuaudit bench train --op-profile`), as `predict`
reads it: per operator class and per operator unit the step's device time and its work
(FLOPs, bytes), the units timed alone in other precisions and at other batch sizes, the
kernels of the profiled steps in launch order (the timeline), the DDP buckets.

A *unit* is what the user's code called, whatever module called it: the outermost aten
operator of a forward call (`aten::linear`, `aten::conv2d`, `aten::scaled_dot_product_attention`,
`aten::lstm`, `aten::layer_norm`, `aten::add`…); its backward belongs to it through the autograd
node it created. A unit's *class* is what it is (`workloads.opclass`): gemm, attention, conv,
rnn, norm, embedding, elementwise, optimizer, comm, copy; `unknown` for operators the model does
not understand (other namespaces, kernels that contradict the operator), `unattributed` for
device time no operator launched.
"""

from __future__ import annotations

from pydantic import Field

from .base import Amounts, Record

# The classes, as `workloads.opclass` assigns them. Matmul-bound classes are timed by the
# matmul rate; memory-bound ones by the copy bandwidth.
CLASSES = ("gemm", "attention", "conv", "rnn", "norm", "embedding", "elementwise",
           "optimizer", "comm", "copy", "unknown", "unattributed")
TENSOR_CLASSES = ("gemm", "attention", "conv", "rnn")
MEMORY_CLASSES = ("norm", "embedding", "elementwise", "optimizer", "copy")
# Classes the prediction cannot model: their time is carried with a wide band, or refused.
OPAQUE_CLASSES = ("unknown", "unattributed")
# The activations' dtype each training precision feeds the layers autocast leaves alone
# (batch norm takes the convolution's output as it is).
ACTIVATION = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# The precisions a recording times its units in: fp32 (TF32 off), tf32, bf16 (autocast).
TIMED_PRECISIONS = ("fp32", "tf32", "bf16")
# The batch sizes (× the recorded one) a recording times its matmul-bound units at.
BATCH_SCALES = (0.5, 2.0)


class GemmShape(Amounts):
    """A matmul shape of the step (a convolution as its implicit GEMM): (m, n, k, batch)."""

    m: int
    n: int
    k: int
    batch: int
    dtype_bytes: int
    count: float  # calls per step
    flops: float  # per step


class AttentionShape(Amounts):
    """A fused attention forward call: (B, H, T, S, Q, causal)."""

    batch: int
    heads: int
    q_len: int
    kv_len: int
    head_dim: int
    causal: bool
    count: float
    forward_flops: float


class KernelGrid(Amounts):
    """A kernel of a matmul-bound class with its grid (its waves)."""

    name: str
    blocks: int
    blocks_per_sm: float
    count_per_step: float
    us_per_step: float


class OpTraffic(Amounts):
    """An aten operator's traffic per step within a class."""

    op: str
    bytes: float
    count: float


class TimedShape(Amounts):
    """A matmul or attention shape timed alone (recordings before the unit timings)."""

    kind: str  # "gemm" or "attention"
    shape: tuple[int | bool, ...]  # (m, n, k, batch) or (B, H, T, S, Q, causal)
    precision: str
    tflops: float


class NormTiming(Amounts):
    """A batch-norm layer shape timed alone (recordings before the unit timings)."""

    shape: tuple[int, ...]
    memory_format: str
    precision: str
    dtype: str
    count: float
    ms: float


class BatchNormRecord(Amounts):
    """Batch norm within the elementwise class (recordings before the norm class)."""

    us_per_step: float
    timed: tuple[NormTiming, ...] = ()
    timed_traffic_share: float = 0.0


class ConvLayer(Amounts):
    input: tuple[int, ...]
    weight: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int
    bias: bool
    input_grad: bool
    memory_format: str


class ConvTiming(Amounts):
    """A convolution layer timed alone (recordings before the unit timings)."""

    layer: ConvLayer
    precision: str
    count: float
    ms: float


class ConvTimingRecord(Amounts):
    timed: tuple[ConvTiming, ...]
    timed_flops_share: float


class OpClassRecord(Amounts):
    """One operator class of the step."""

    op_class: str
    ms_per_step: float
    kernels_per_step: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0
    alt_bytes: float | None = None  # under the other precision family (alt_precision)
    ops_per_step: int = 0
    gemm_dtype: str | None = None
    shapes: tuple[GemmShape, ...] = ()
    attention: tuple[AttentionShape, ...] = ()
    kernels: tuple[KernelGrid, ...] = ()
    op_traffic: tuple[OpTraffic, ...] = ()
    timed_shapes: tuple[TimedShape, ...] = ()
    batch_norm: BatchNormRecord | None = None
    conv_timing: ConvTimingRecord | None = None


class UnitGroup(Amounts):
    """The units of one name within one class (e.g. gemm/linear): their device time per step
    from the profiled steps, and their work per step from the counted ones (at the recorded
    batch, under the other precision family, and at `OpProfile.alt_batch`)."""

    op_class: str
    unit: str  # canonical name: "linear", "conv2d", "scaled_dot_product_attention", …
    kernel_us: float = 0.0
    kernels: float = 0.0
    calls: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0
    alt_bytes: float | None = None
    alt_batch_flops: float | None = None
    alt_batch_bytes: float | None = None
    # of `bytes`, what operators moved with an operand out of one dense layout (a slice, a
    # broadcast, a transpose made contiguous: `workloads.tally.strided`); None: not counted
    strided_bytes: float | None = None


class UnitTime(Amounts):
    """A unit timed alone, forward + backward: in a precision, at a batch scale, at a width
    (a convolution at more channels: `workloads.widen`)."""

    precision: str
    batch_scale: float = 1.0
    width_scale: float = 1.0
    ms: float
    # its kernels' own time a call (the union of their intervals, under the profiler): the
    # device's gaps between kernels queued back to back left out, as a step's group times
    # leave them out (None: not profiled; a CPU, or a recording before it was kept)
    busy_ms: float | None = None


class TimedUnit(Amounts):
    """One unit call signature timed alone (`workloads.units`)."""

    op_class: str
    unit: str
    signature: str  # its inputs, for people: "bf16[128,197,768] · fp32[2304,768] · …"
    count: float  # calls like it per step
    flops: float  # per call, counted
    times: tuple[UnitTime, ...] = ()


class SyncSpan(Record):
    """A host call that waited for the device (a synchronize, a blocking copy)."""

    start_us: float
    end_us: float


class Timeline(Record):
    """The profiled steps' kernels in launch order (µs from the first launch): when the host
    launched each, when it ran and how long, and its unit group (index into
    `OpProfile.groups`, -1 for none); the host's waits for the device (synchronizations;
    a full launch queue); each step's first launch."""

    steps: int
    launch_us: tuple[float, ...]
    start_us: tuple[float, ...]
    dur_us: tuple[float, ...]
    group: tuple[int, ...]
    syncs: tuple[SyncSpan, ...] = ()
    step_start_us: tuple[float, ...] = ()
    # host time spent blocked in runtime calls since the launch before each kernel's, beyond
    # those calls' usual length (a full launch queue: the host waited for the device)
    blocked_us: tuple[float, ...] = ()


class DdpBucket(Amounts):
    bytes: int
    ready_fraction: float  # share of the backward done when its last gradient is ready


class UnknownOp(Amounts):
    """Device time the model does not understand: an operator outside aten, an aten family
    without a rule (FFT, linear algebra, …), one with kernels that contradict its class, or
    kernels no operator launched."""

    op: str
    ms_per_step: float
    why: str


Scalar = str | int | float | bool | None


class OpProfile(Amounts):
    """The op profile of `<model>/<mode>`."""

    workload: str  # "<model>/<mode>"
    model: str
    mode: str
    precision: str
    compiled: bool = False
    channels_last: bool = False
    batch: int = Field(ge=1)
    tokens_per_sample: int | None = None
    device: str = "cuda"
    kernel_source: str = ""
    step_ms: float  # timed p50
    profiled_steps: int = 1
    span_ms: float = 0.0  # device span per profiled step
    busy_ms: float = 0.0  # union of kernel intervals per profiled step
    forward_ms: float = 0.0
    backward_ms: float = 0.0
    optimizer_ms: float = 0.0
    grad_bytes: int = 0
    param_count: int = 0
    ops_per_step: int = 0
    peak_memory_gb: float | None = None
    # the timed step at a batch so small that its kernels hide nothing: the host's own time
    # per step without the profiler (None where not measured or not host-bound there)
    host_step_ms: float | None = None
    host_batch: int = 1  # its batch: 2 for a model that cannot train on one sample
    # the same step timed in rounds, each round's median (`workloads.hosttime`), and paired
    # with them the step in the other precision family (autocast switched): the host's cost
    # of autocast in this model, each pair a moment apart on a host whose pace drifts
    host_rounds_ms: tuple[float, ...] = ()
    alt_host_rounds_ms: tuple[float, ...] = ()
    # per precision, the host's time to issue one step at the recorded batch with the device
    # held, one a round (`hosttime.held_host`): the host's work at this batch, where the
    # step at batch 1 can take less (empty: not timed, or the step waits on its device)
    host_held_ms: dict[str, tuple[float, ...]] = Field(default_factory=dict)
    # each held round timed right after the round of `host_rounds_ms` of its index, at one
    # pace (False: all the rounds at batch 1 first, the held ones after)
    host_held_paired: bool = False
    buckets: tuple[DdpBucket, ...] = ()
    alt_precision: str | None = None
    alt_batch: int | None = None
    classes: tuple[OpClassRecord, ...] = ()
    groups: tuple[UnitGroup, ...] = ()
    timed: tuple[TimedUnit, ...] = ()
    timeline: Timeline | None = None
    unknown: tuple[UnknownOp, ...] = ()
    model_params: dict[str, Scalar] = Field(default_factory=dict)
    notes: tuple[str, ...] = ()
    # Read from a run recorded before these records (its op measurements' params): no unit
    # groups, timings or timeline; the classes as the kernels' names gave them.
    legacy: bool = False
