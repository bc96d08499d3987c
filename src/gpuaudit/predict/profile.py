"""A workload's step as a stored run recorded it (`bench train --op-profile`,
`model.OpProfile`; or, for runs recorded before it, its op measurements: `predict.legacy`):
per operator class its device time, FLOPs, bytes, matmul shapes and kernel grids; the timed
step; the phases; the gradient buckets; the unit groups, units timed alone and timeline of
the record. The engine's working form of it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from gpuaudit.errors import BadInputError
from gpuaudit.model.opprofile import OpClassRecord, OpProfile
from gpuaudit.model.run import Run

from . import legacy

OPTIMIZER_RUN = "gpuaudit bench train --op-profile"


@dataclass(frozen=True)
class Gemm:
    m: int
    n: int
    k: int
    batch: int
    dtype_bytes: int
    count: float
    flops: float

    @property
    def bytes(self) -> float:
        """Operands read and result written once, per call × calls."""
        b = self.batch * self.dtype_bytes
        return self.count * b * (self.m * self.k + self.k * self.n + self.m * self.n)


@dataclass(frozen=True)
class KernelGrid:
    name: str
    blocks: int
    per_sm: float
    count: float  # per step
    us: float  # per step


@dataclass(frozen=True)
class Timed:
    """A matmul shape or an attention shape timed alone on the recorded GPU."""

    kind: str  # "gemm" or "attention"
    shape: tuple[Any, ...]  # (m, n, k, batch) or (B, H, T, S, Q, causal)
    precision: str
    tflops: float


@dataclass(frozen=True)
class NormTimed:
    """A batch-norm layer's shape timed alone (forward + backward, training) in a precision."""

    shape: tuple[int, ...]
    memory_format: str
    precision: str
    dtype: str
    count: float  # layers of this shape per step
    ms: float


@dataclass(frozen=True)
class BatchNorm:
    """Batch norm within the elementwise class (recordings before the norm class): its
    kernels' own time per
    step (0 where none was recognized), its shapes timed alone, and the share of its
    traffic those shapes hold."""

    ms: float
    timed: tuple[NormTimed, ...] = ()
    timed_share: float = 0.0


@dataclass(frozen=True)
class ConvTimed:
    """A convolution layer timed alone (forward + backward) in a precision: `layer` is its
    input and weight shapes, stride, padding, dilation, groups, bias, input gradient and
    memory format (recordings before the unit timings)."""

    layer: tuple[Any, ...]
    precision: str
    count: float  # layers like it per step
    ms: float


@dataclass(frozen=True)
class ConvTiming:
    """The conv class's layers timed alone (recordings before the unit timings), and the
    share of its forward
    FLOPs they hold."""

    timed: tuple[ConvTimed, ...]
    flops_share: float


@dataclass(frozen=True)
class OpWork:
    """One operator class of a step."""

    cls: str
    ms: float
    flops: float
    bytes: float
    ops: int = 0
    alt_precision: str | None = None
    alt_bytes: float | None = None
    op_bytes: dict[str, float] = field(default_factory=dict)
    shapes: tuple[Gemm, ...] = ()
    kernels: tuple[KernelGrid, ...] = ()
    timed: tuple[Timed, ...] = ()
    # attention forward calls: ((B, H, T, S, Q, causal), count, forward FLOPs)
    attention: tuple[tuple[tuple[Any, ...], float, float], ...] = ()
    norm: BatchNorm | None = None  # the elementwise class's batch norm, where recorded
    convs: ConvTiming | None = None  # the conv class's layers timed alone, where recorded

    def with_(self, **changes: Any) -> OpWork:
        return replace(self, **changes)


@dataclass(frozen=True)
class StepProfile:
    run_id: str
    workload: str  # "<model>/<mode>"
    model: str
    mode: str
    precision: str
    compiled: bool
    batch: int
    tokens_per_sample: int | None
    step_ms: float  # timed p50
    busy_ms: float
    idle_ms: float
    phases_ms: dict[str, float]
    grad_bytes: int
    param_count: int
    ops_per_step: int
    buckets: tuple[tuple[int, float], ...]
    classes: dict[str, OpWork]
    model_params: dict[str, Any]
    device: str
    kernel_source: str
    peak_memory_gb: float | None = None
    record: OpProfile | None = None  # the typed record it was read from
    # half the timed steps' interquartile range ÷ their median: how far the pace moved while
    # the source was timed (0 where the run does not say)
    step_spread: float = 0.0
    # modes of the same model in the same run whose step raised in the user's code: mode →
    # the error (`nn.AdaptiveLogSoftmaxWithLoss` under CUDA autocast, say)
    failed_modes: dict[str, str] = field(default_factory=dict)

    @property
    def legacy(self) -> bool:
        return self.record is None or self.record.legacy

    @property
    def samples_per_s(self) -> float:
        return self.batch / (self.step_ms / 1e3)


def workloads_in(run: Run) -> list[str]:
    """The `<model>/<mode>` whose op profile `run` holds, in run order."""
    return [p.workload for p in run.op_profiles] or legacy.workloads(run)


def choose(run: Run, workload: str | None) -> str:
    found = workloads_in(run)
    if workload is not None:
        if workload not in found:
            have = ", ".join(found) or "none"
            raise BadInputError(f"run {run.id} has no op profile for {workload!r} (it has: "
                                f"{have}); record one with `{OPTIMIZER_RUN} --model M "
                                "--precision P`")
        return workload
    if not found:
        # `<model>/<mode>/<figure>`: a mode's figures
        modes = [m for m in run.measurements if m.suite == "train" and m.name.count("/") >= 2]
        skipped = {m.name.rsplit("/", 1)[0]: m.skipped_reason for m in modes if m.skipped}
        if skipped and all(m.skipped for m in modes):
            # no mode ran, so none was profiled: say why rather than ask for the profile
            why = "; ".join(f"{mode}: {reason}" for mode, reason in list(skipped.items())[:2])
            raise BadInputError(f"run {run.id} has no op profile: no training mode ran "
                                f"({why})")
        raise BadInputError(f"run {run.id} has no op profile: missing <model>/<mode>/op/step "
                            f"and op/<class> measurements; record them with `{OPTIMIZER_RUN}`")
    if len(set(found)) > 1:
        raise BadInputError(f"run {run.id} has op profiles for {', '.join(found)}: choose "
                            "one with --workload MODEL/MODE")
    return found[0]


def op_work(c: OpClassRecord, alt_precision: str | None) -> OpWork:
    """A class record as the engine works on it."""
    norm = None
    if c.batch_norm is not None:
        norm = BatchNorm(ms=c.batch_norm.us_per_step / 1e3, timed=tuple(
            NormTimed(shape=t.shape, memory_format=t.memory_format, precision=t.precision,
                      dtype=t.dtype, count=t.count, ms=t.ms) for t in c.batch_norm.timed),
            timed_share=c.batch_norm.timed_traffic_share)
    convs = None
    if c.conv_timing is not None:
        convs = ConvTiming(timed=tuple(
            ConvTimed(layer=(t.layer.input, t.layer.weight, t.layer.stride, t.layer.padding,
                             t.layer.dilation, t.layer.groups, t.layer.bias,
                             t.layer.input_grad, t.layer.memory_format),
                      precision=t.precision, count=t.count, ms=t.ms)
            for t in c.conv_timing.timed), flops_share=c.conv_timing.timed_flops_share)
    return OpWork(
        cls=c.op_class, ms=c.ms_per_step, flops=c.flops, bytes=c.bytes, ops=c.ops_per_step,
        alt_precision=alt_precision if c.alt_bytes is not None else None,
        alt_bytes=c.alt_bytes, op_bytes={t.op: t.bytes for t in c.op_traffic},
        shapes=tuple(Gemm(g.m, g.n, g.k, g.batch, g.dtype_bytes, g.count, g.flops)
                     for g in c.shapes),
        kernels=tuple(KernelGrid(k.name, k.blocks, k.blocks_per_sm, k.count_per_step,
                                 k.us_per_step) for k in c.kernels),
        timed=tuple(Timed(t.kind, tuple(t.shape), t.precision, t.tflops)
                    for t in c.timed_shapes),
        attention=tuple(((a.batch, a.heads, a.q_len, a.kv_len, a.head_dim, a.causal), a.count,
                         a.forward_flops) for a in c.attention),
        norm=norm, convs=convs)


def step_profile(run_id: str, p: OpProfile) -> StepProfile:
    """The engine's working form of a typed op profile."""
    return StepProfile(
        run_id=run_id, workload=p.workload, model=p.model, mode=p.mode, precision=p.precision,
        compiled=p.compiled, batch=p.batch, tokens_per_sample=p.tokens_per_sample,
        step_ms=p.step_ms, busy_ms=p.busy_ms, idle_ms=max(0.0, p.step_ms - p.busy_ms),
        phases_ms={"forward": p.forward_ms, "backward": p.backward_ms,
                   "optimizer": p.optimizer_ms},
        grad_bytes=p.grad_bytes, param_count=p.param_count, ops_per_step=p.ops_per_step,
        buckets=tuple((b.bytes, b.ready_fraction) for b in p.buckets),
        classes={c.op_class: op_work(c, p.alt_precision) for c in p.classes},
        model_params={**p.model_params, "channels_last": p.channels_last
                      or bool(p.model_params.get("channels_last"))},
        device=p.device, kernel_source=p.kernel_source, peak_memory_gb=p.peak_memory_gb,
        record=p)


def load_profile(run: Run, workload: str | None = None) -> StepProfile:
    """The step profile of `workload` (or the run's only one); bad input naming what is
    missing when the run cannot give it."""
    name = choose(run, workload)
    record = next((p for p in run.op_profiles if p.workload == name), None)
    if record is None:
        record = legacy.read(run, name, OPTIMIZER_RUN)
    return replace(step_profile(run.id, record), step_spread=_spread(run, name),
                   failed_modes=_failed_modes(run, record))


def _failed_modes(run: Run, record: OpProfile) -> dict[str, str]:
    """The modes of the recorded model that raised in this run (`StepProfile.failed_modes`)."""
    from gpuaudit.workloads.entry import raised

    names = {record.model, record.model_params.get("entry")} - {None}
    return {str(m.params["mode"]): str(m.skipped_reason) for m in run.measurements
            if m.suite == "train" and m.skipped and m.name.endswith("/throughput")
            and m.params.get("model") in names and "mode" in m.params
            and raised(m.skipped_reason)}


def _spread(run: Run, workload: str) -> float:
    """Half the interquartile range of the workload's timed steps ÷ their median."""
    m = next((m for m in run.measurements if m.name == f"{workload}/step_time"
              and m.spread_kind == "IQR"), None)
    if m is None or m.spread_low is None or m.spread_high is None or m.value <= 0:
        return 0.0
    return max(0.0, m.spread_high - m.spread_low) / 2 / m.value
