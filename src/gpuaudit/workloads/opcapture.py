"""The op profile of one training mode, recorded for `gpuaudit predict` (`model.OpProfile`).

Views of the same step, joined by operator unit and class (`workloads.opclass`):

- what the step asks for (`tally`): one eager step counted operator by operator in its own
  precision family, in the other one (fp32 ↔ 16-bit autocast: a precision change's real
  traffic) and at another batch size (what follows the batch and what does not);
- what it took (`kernelview`): three steps of the mode as it runs (compiled or not) under
  the profiler, every kernel charged to its unit, with the timeline;
- the units timed alone (`units`) in each precision and at other batch sizes;
- when (`buckets`): the phases on the device clock and the DDP buckets.

On a CPU there are no kernels: the class times are the aten operators' own CPU times.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuaudit.model import Measurement
from gpuaudit.model.opprofile import (
    ACTIVATION,
    CLASSES,
    TENSOR_CLASSES,
    AttentionShape,
    DdpBucket,
    GemmShape,
    KernelGrid,
    OpClassRecord,
    OpProfile,
    OpTraffic,
    SyncSpan,
    TimedUnit,
    Timeline,
    UnitGroup,
    UnknownOp,
)
from gpuaudit.workloads.buckets import ddp_buckets, phase_times_ms
from gpuaudit.workloads.hosttime import HostTime, alt_precision, eager_step, host_time
from gpuaudit.workloads.kernelview import KernelView, profile_kernels
from gpuaudit.workloads.records import TRAIN, single
from gpuaudit.workloads.tally import OpTally, count_ops
from gpuaudit.workloads.units import time_units

if TYPE_CHECKING:
    from gpuaudit.workloads.trainer import Trainer

SHAPES_KEPT = 48
OPS_KEPT = 40


@dataclass
class Captured:
    precision: str
    tally: OpTally
    kernels: KernelView
    phases_ms: dict[str, float]
    buckets: list[tuple[int, float]]
    grad_bytes: int
    params: int
    alt_precision: str | None = None
    alt_tally: OpTally | None = None
    alt_batch: int | None = None
    batch_tally: OpTally | None = None
    timed: list[TimedUnit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    host: HostTime | None = None


def other_batch(batch: int) -> int:
    return batch // 2 if batch >= 2 else 2


def capture(trainer: Trainer, *, steps: int = 3, keep_trace: str | None = None,
            host: HostTime | None = None) -> Captured:
    """The whole profile of a ready, warmed-up Trainer (module docstring). `host`: the host's
    own time per step as measured before (`hosttime.host_time`), else measured here.

    What is timed comes before the kernel profile: a process that has run a CUDA profile
    launches slower afterwards, and on an H200 a batch-1 step timed after the profile took
    longer than the whole batch's step timed before it (ConvNeXt bf16: 18.9 against 12.6
    ms)."""
    import torch

    from gpuaudit.workloads.precision import float32_matmuls

    device, mode = trainer.device, trainer.mode
    w = trainer.workload
    notes: list[str] = []
    phases = phase_times_ms(torch, device, trainer, steps)
    if host is None:
        host = host_time(trainer, notes)
    tally = count_ops(eager_step(trainer, mode.precision), record_calls=True)
    alt: str | None = alt_precision(mode.precision)
    alt_tally: OpTally | None = None
    try:
        with float32_matmuls(torch, tf32=alt != "fp32"):
            alt_tally = count_ops(eager_step(trainer, str(alt)), record_calls=True)
    except RuntimeError as exc:  # e.g. bf16 autocast unsupported here
        notes.append(f"no {alt} traffic: {str(exc).splitlines()[0][:80]}")
        alt = None
    batch_tally: OpTally | None = None
    half = other_batch(w.batch_size)
    try:
        batch_tally = count_ops(eager_step(trainer, mode.precision, *trainer.data_at(half)),
                                record_calls=True)
    except (RuntimeError, ValueError, TypeError) as exc:
        notes.append(f"not counted at batch {half}: {str(exc).splitlines()[0][:80]}")
    timed: list[TimedUnit] = []
    if mode.compile:
        notes.append("units not timed alone: a compiled step runs inductor's own kernels")
    else:
        families = {ACTIVATION[alt]: alt_tally.calls} if alt and alt_tally else {}
        timed = time_units(torch, device, mode.precision, tally.calls, families,
                           batch_tally.calls if batch_tally else None, w.batch_size,
                           half if batch_tally else None, notes=notes)
    kernels = profile_kernels(torch, device, trainer.step, steps, keep=keep_trace)
    params = list(trainer.net.parameters())
    unique = {id(p): p for p in params if p.requires_grad}
    grad_bytes = sum(p.numel() * p.element_size() for p in unique.values())
    return Captured(precision=mode.precision, tally=tally, kernels=kernels, phases_ms=phases,
                    buckets=ddp_buckets(params), grad_bytes=grad_bytes,
                    params=sum(p.numel() for p in unique.values()), alt_precision=alt,
                    alt_tally=alt_tally, alt_batch=half if batch_tally else None,
                    batch_tally=batch_tally, timed=timed, notes=notes, host=host)


# --- the record --------------------------------------------------------------------------


def _top(items: list[Any], key: Callable[[Any], float], n: int) -> list[Any]:
    return sorted(items, key=key, reverse=True)[:n]


def _class_record(c: Captured, cls: str) -> OpClassRecord:
    t, k = c.tally, c.kernels
    steps = k.steps
    shapes = [GemmShape(m=m, n=n, k=kk, batch=b, dtype_bytes=size, count=v[0], flops=v[1])
              for (cl, m, n, kk, b, size), v in t.shapes.items() if cl == cls]
    attention = [AttentionShape(batch=b, heads=h, q_len=q, kv_len=s, head_dim=d, causal=cz,
                                count=v[0], forward_flops=v[1])
                 for (b, h, q, s, d, cz), v in t.attention.items()] if cls == "attention" else []
    grids = [KernelGrid(name=name, blocks=blocks, blocks_per_sm=per_sm,
                        count_per_step=round(v[0] / steps, 3), us_per_step=round(v[1] / steps, 3))
             for (name, blocks, per_sm), v in k.grids.items()
             if k.grid_class.get((name, blocks, per_sm)) == cls] if cls in TENSOR_CLASSES else []
    traffic = [OpTraffic(op=op, bytes=b, count=t.op_count[op]) for op, b in t.op_bytes.items()
               if t.op_class.get(op) == cls]
    alt = c.alt_tally.bytes.get(cls) if c.alt_tally is not None else None
    return OpClassRecord(
        op_class=cls, ms_per_step=k.per_step_ms(cls),
        kernels_per_step=round(k.count.get(cls, 0) / steps, 2), flops=float(t.flops.get(cls, 0)),
        bytes=float(t.bytes.get(cls, 0)), alt_bytes=float(alt) if alt is not None else None,
        ops_per_step=int(t.ops.get(cls, 0)), gemm_dtype=t.gemm_dtype if cls == "gemm" else None,
        shapes=tuple(_top(shapes, lambda g: g.flops, SHAPES_KEPT)), attention=tuple(attention),
        kernels=tuple(_top(grids, lambda g: g.us_per_step, SHAPES_KEPT)),
        op_traffic=tuple(_top(traffic, lambda o: o.bytes, OPS_KEPT)))


def op_profile(c: Captured, *, workload: str, model: str, mode: Any, batch: int,
               tokens_per_sample: int | None, step_ms: float, device: str,
               model_params: dict[str, Any], peak_memory_gb: float | None) -> OpProfile:
    """The typed record of a capture (the timed step's p50 is `step_ms`)."""
    k, t = c.kernels, c.tally
    steps = k.steps
    names = [cls for cls in CLASSES if k.us.get(cls) or t.flops.get(cls) or t.bytes.get(cls)]
    keys = sorted(set(k.group_us) | set(t.group_bytes) | set(t.group_flops) |
                  set(t.group_calls))
    alt, half = c.alt_tally, c.batch_tally
    groups = tuple(UnitGroup(
        op_class=cls, unit=unit, kernel_us=round(k.group_us.get((cls, unit), 0.0) / steps, 3),
        kernels=round(k.group_count.get((cls, unit), 0) / steps, 2),
        calls=float(t.group_calls.get((cls, unit), 0)),
        flops=float(t.group_flops.get((cls, unit), 0)),
        bytes=float(t.group_bytes.get((cls, unit), 0)),
        alt_bytes=float(alt.group_bytes.get((cls, unit), 0)) if alt is not None else None,
        alt_batch_flops=float(half.group_flops.get((cls, unit), 0)) if half else None,
        alt_batch_bytes=float(half.group_bytes.get((cls, unit), 0)) if half else None,
        strided_bytes=float(t.group_strided.get((cls, unit), 0)))
        for cls, unit in keys)
    index = {key: i for i, key in enumerate(keys)}
    timeline = None
    tl = k.timeline
    if tl is not None and tl.dur_us:
        timeline = Timeline(steps=steps, launch_us=tuple(tl.launch_us),
                            start_us=tuple(tl.start_us), dur_us=tuple(tl.dur_us),
                            group=tuple(index.get(g, -1) for g in tl.group),
                            syncs=tuple(SyncSpan(start_us=a, end_us=b) for a, b in tl.syncs),
                            step_start_us=tuple(tl.step_start_us),
                            blocked_us=tuple(tl.blocked_us))
    busy = k.busy_us / steps / 1e3
    params = {key: v for key, v in model_params.items()
              if isinstance(v, str | int | float | bool) or v is None}
    return OpProfile(
        workload=workload, model=model, mode=mode.id, precision=mode.precision,
        compiled=mode.compile, channels_last=mode.channels_last, batch=batch,
        tokens_per_sample=tokens_per_sample, device=device, kernel_source=k.source,
        step_ms=round(step_ms, 4), profiled_steps=steps, span_ms=round(k.span_us / steps / 1e3, 4),
        busy_ms=round(busy, 4), forward_ms=round(c.phases_ms.get("forward", 0.0), 4),
        backward_ms=round(c.phases_ms.get("backward", 0.0), 4),
        optimizer_ms=round(c.phases_ms.get("optimizer", 0.0), 4), grad_bytes=c.grad_bytes,
        host_step_ms=c.host.step_ms if c.host else None,
        host_batch=c.host.batch if c.host else 1,
        host_rounds_ms=c.host.rounds_ms if c.host else (),
        alt_host_rounds_ms=c.host.alt_rounds_ms if c.host else (),
        host_held_ms=dict(c.host.held_ms) if c.host else {},
        host_held_paired=bool(c.host and c.host.paired),
        param_count=c.params, ops_per_step=t.total_ops, peak_memory_gb=peak_memory_gb,
        buckets=tuple(DdpBucket(bytes=b, ready_fraction=round(f, 4)) for b, f in c.buckets),
        alt_precision=c.alt_precision, alt_batch=c.alt_batch,
        classes=tuple(_class_record(c, cls) for cls in names), groups=groups,
        timed=tuple(c.timed), timeline=timeline,
        unknown=tuple(UnknownOp(op=op, ms_per_step=round(us / steps / 1e3, 4), why=why)
                      for (op, why), us in sorted(k.unknown.items(), key=lambda kv: -kv[1])),
        model_params=params, notes=tuple(c.notes))


def with_kernel_view(p: OpProfile, k: KernelView) -> OpProfile:
    """`p` with its kernel view read again from its trace (`kernelview.parse_trace`): each
    class's and group's time, the grids, the timeline and what the model does not understand,
    for recordings whose trace was kept. The counted work stays as recorded (a group the new
    view adds has none)."""
    steps = k.steps
    by_key = {(g.op_class, g.unit): g for g in p.groups}
    keys = sorted(set(by_key) | set(k.group_us))
    groups = []
    for cls, unit in keys:
        old = by_key.get((cls, unit)) or UnitGroup(op_class=cls, unit=unit)
        groups.append(old.model_copy(update={
            "kernel_us": round(k.group_us.get((cls, unit), 0.0) / steps, 3),
            "kernels": round(k.group_count.get((cls, unit), 0) / steps, 2)}))
    index = {key: i for i, key in enumerate(keys)}
    classes = {c.op_class: c for c in p.classes}
    for cls in CLASSES:
        if cls not in classes and k.us.get(cls):
            classes[cls] = OpClassRecord(op_class=cls, ms_per_step=0.0)
    new_classes = []
    for cls in CLASSES:
        c = classes.get(cls)
        if c is None:
            continue
        grids = [KernelGrid(name=name, blocks=blocks, blocks_per_sm=per_sm,
                            count_per_step=round(v[0] / steps, 3),
                            us_per_step=round(v[1] / steps, 3))
                 for (name, blocks, per_sm), v in k.grids.items()
                 if k.grid_class.get((name, blocks, per_sm)) == cls]
        new_classes.append(c.model_copy(update={
            "ms_per_step": k.per_step_ms(cls),
            "kernels_per_step": round(k.count.get(cls, 0) / steps, 2),
            "kernels": tuple(_top(grids, lambda g: g.us_per_step, SHAPES_KEPT))}))
    tl = k.timeline
    timeline = None
    if tl is not None and tl.dur_us:
        timeline = Timeline(steps=steps, launch_us=tuple(tl.launch_us),
                            start_us=tuple(tl.start_us), dur_us=tuple(tl.dur_us),
                            group=tuple(index.get(g, -1) for g in tl.group),
                            syncs=tuple(SyncSpan(start_us=a, end_us=b) for a, b in tl.syncs),
                            step_start_us=tuple(tl.step_start_us),
                            blocked_us=tuple(tl.blocked_us))
    return p.model_copy(update={
        "groups": tuple(groups), "classes": tuple(new_classes), "timeline": timeline,
        "busy_ms": round(k.busy_us / steps / 1e3, 4),
        "span_ms": round(k.span_us / steps / 1e3, 4),
        "unknown": tuple(UnknownOp(op=op, ms_per_step=round(us / steps / 1e3, 4), why=why)
                         for (op, why), us in sorted(k.unknown.items(), key=lambda kv: -kv[1]))})


def measurements(p: OpProfile, *, base: dict[str, Any], gpu_index: int | None
                 ) -> Iterator[Measurement]:
    """`<model>/<mode>/op/<class>` (ms per step, FLOPs, bytes, kernels) for every class that
    did something, then `<model>/<mode>/op/step` (phases, busy and idle time): the op
    profile's figures for people; `predict` reads the record itself."""
    prefix = f"{p.model}/{p.mode}/op"
    for c in p.classes:
        yield single(TRAIN, f"{prefix}/{c.op_class}", "ms", c.ms_per_step, gpu_index=gpu_index,
                     statistic=f"mean of {p.profiled_steps} profiled steps",
                     notes=(f"{p.kernel_source}; FLOPs and bytes from one eager step's aten "
                            "operators",),
                     params={**base, "op_class": c.op_class, "flops_per_step": int(c.flops),
                             "bytes_per_step": int(c.bytes), "ops_per_step": c.ops_per_step,
                             "kernels_per_step": c.kernels_per_step})
    yield single(TRAIN, f"{prefix}/step", "ms", p.span_ms, gpu_index=gpu_index,
                 statistic=f"mean of {p.profiled_steps} profiled steps",
                 notes=("device span of the profiled steps; the timed step is step_time",
                        *p.notes),
                 params={**base, "busy_ms": p.busy_ms, "step_ms": p.step_ms,
                         "idle_ms": round(max(0.0, p.step_ms - p.busy_ms), 4),
                         "forward_ms": p.forward_ms, "backward_ms": p.backward_ms,
                         "optimizer_ms": p.optimizer_ms, "grad_bytes": p.grad_bytes,
                         "param_count": p.param_count, "ops_per_step": p.ops_per_step,
                         "kernel_source": p.kernel_source, "profiled_steps": p.profiled_steps})
