"""The prediction: a recorded step, changed one thing at a time (model size, precision, GPU
model, GPU count), each operator class re-timed from the rates it is bound by.

Calibration. Every class of the recorded step (its kernel times re-read by name first:
`kernels.reattribute`) is compared with what this machine's measured rates allow for its
work: matmuls at the bench's matmul rate of the precision, each shape after its wave
quantization and split of K, capped by the roofline on its bytes; convolutions the same,
at least their tensors' traffic; attention as its fused kernels spend it (`attention`);
memory-bound classes (elementwise, optimizer, copies, layout transforms) at the measured
copy bandwidth. The ratio, the share of that ideal the class achieved, is kept; a changed
step is its new ideal time divided by that share.

- size (`params`): the family's other model, its work from `family.resize`;
- precision (`precision.change`): the matmul rate of the other precision (measured here),
  operands of its width, the traffic recorded under that precision family, the layout
  transforms 16-bit convolutions add, batch norm's change of implementation flagged;
- GPU model: its datasheet roofs × the efficiencies measured here (`hardware.scaled_roofs`);
  matmul kernels re-quantized into waves on its SM count (Habitat's wave scaling, with the
  recorded grids); a memory-bound class's time at the copy bandwidth scaled by bandwidth^γ ×
  compute^(1−γ) (Habitat's roofline γ), the rest of its time by SMs × clock;
- GPU count: DDP, the same per-GPU batch; the gradient buckets all-reduced at the measured
  bus bandwidth for their size, overlapping the backward (`ddp.simulate`).

The host's launch gaps (timed step − GPU busy time) are carried over, scaled by the number
of operators. Each class carries a relative uncertainty per change (combined in
quadrature); the band is the sum of the classes at their low and high ends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuaudit.errors import BadInputError
from gpuaudit.model.opprofile import TENSOR_CLASSES
from gpuaudit.specs.catalog import GpuSpec, SpecCatalog

from . import checks, grouped, replaynotes
from . import precision as precision_change
from .ddp import simulate
from .hardware import Roofs, habitat_gamma, scaled_roofs, waves
from .ideal import ELEMENT_BYTES, MEMORY_BOUND, ideal_seconds, matmul_rate, memory_seconds
from .kernels import Reattributed, reattribute
from .profile import OpWork, StepProfile
from .rates import AllReduce, MachineRates
from .records import ClassTime, Prediction, Scenario
from .state import ClassState, StepState, retime

__all__ = ["ELEMENT_BYTES", "Change", "ideal_seconds", "memory_seconds", "predict"]

# Relative uncertainty each change adds to a class (combined in quadrature). Set from how far
# each rule reaches; docs/predict.md records how they compare with measurements.
U_PARAMS = 0.08
U_PRECISION = precision_change.U_PRECISION
U_GPU = {True: {"tensor": 0.12, "memory": 0.08}, False: {"tensor": 0.30, "memory": 0.15}}
U_ALLREDUCE = 0.30
U_IDLE = 0.50
# A step whose device waits on its host this share of the replay or more is one another GPU
# barely moves: said, beside the host it keeps (a DLRM's fp32 step, 51 %: H100 → H200 6.13 →
# 6.14 ms predicted, where its H200 loan's faster host ran it at 4.69).
HOST_BOUND_GPU_NOTE = 0.2

# Where no all-reduce was measured: a ring reaches this share of one direction of the GPU's
# link at large sizes, and this share of that at 1 MiB (both measured on 2 × H200, NV18:
# 342 GB/s busbw at 4 GiB of 450 GB/s per direction; 59 GB/s at 1 MiB).
RING_EFFICIENCY = 0.76
SMALL_MESSAGE_SHARE = 0.17
PCIE_GBPS = {3: 15.75, 4: 31.5, 5: 63.0, 6: 126.0}  # per direction, x16


@dataclass(frozen=True)
class Change:
    """What to change; None keeps the recorded value."""

    gpus: int | None = None
    precision: str | None = None
    gpu: str | None = None
    params: float | None = None
    batch: int | None = None
    seq_len: int | None = None
    model: str | None = None  # another size of the user's model: its pkg.module:build

    @property
    def empty(self) -> bool:
        return all(v is None for v in (self.gpus, self.precision, self.gpu, self.params,
                                        self.batch, self.model))


# --- the source ------------------------------------------------------------------------------


def _start(profile: StepProfile, rates: MachineRates) -> StepState:
    roofs = rates.roofs
    if profile.precision not in ELEMENT_BYTES:
        raise BadInputError(f"{profile.workload}: precision {profile.precision!r} is not one "
                            f"this model knows ({', '.join(ELEMENT_BYTES)})")
    matmul_rate(roofs, profile.precision)
    total = sum(w.ms for w in profile.classes.values())
    # The profiler's steps can outlast the timed ones; never let the classes exceed them.
    scale = min(1.0, profile.step_ms / total) if total else 1.0
    # Recordings made before the unit classes classed kernels by their names: re-read them.
    read = reattribute(profile.classes) if profile.legacy else \
        Reattributed(classes=dict(profile.classes), basis=())
    elementwise = read.classes.get("elementwise")
    norm_ms = read.batch_norm_ms + (elementwise.norm.ms if elementwise is not None and
                                    elementwise.norm is not None else 0.0)
    classes = {}
    for cls, w in read.classes.items():
        ms = w.ms * scale
        ideal = ideal_seconds(cls, w, roofs, profile.precision) * 1e3
        classes[cls] = ClassState(work=w, measured_ms=ms, ms=ms,
                                  achieved=ideal / ms if ideal > 0 and ms > 0 else None)
    state = StepState(classes=classes, idle_ms=max(0.0, profile.step_ms - total * scale),
                      idle_unc=0.0, precision=profile.precision, roofs=roofs, gpus=1,
                      batch=profile.batch, tokens=profile.tokens_per_sample,
                      model=profile.model,
                      matmul_params=_int(profile.model_params.get("matmul_params")),
                      buckets=profile.buckets, grad_bytes=profile.grad_bytes,
                      allreduce=rates.allreduce,
                      channels_last=bool(profile.model_params.get("channels_last")),
                      norm_ms=norm_ms * scale if norm_ms > 0 else None)
    state.basis.append(f"recorded step: {profile.workload} in run {profile.run_id}, "
                       f"{profile.step_ms:.3g} ms (p50), GPU busy {profile.busy_ms:.3g} ms "
                       f"({profile.kernel_source or 'kernels'})")
    state.basis.extend(read.basis)
    state.basis.append("matmuls at the bench's rate after wave quantization and split-K, "
                       "capped by their roofline; attention's matmuls (causal work), "
                       "exponentials and traffic; memory classes at the copy bandwidth")
    state.basis.extend(roofs.basis)
    if scale < 1.0:
        state.notes.append(f"profiled kernels summed to {total:.3g} ms, more than the timed "
                           f"step: scaled by {scale:.3f}")
    return state


def _int(v: object) -> int | None:
    return int(v) if isinstance(v, int | float) else None


# --- the changes -----------------------------------------------------------------------------


def _resize(state: StepState, profile: StepProfile, change: Change) -> None:
    from .family import resize

    assert change.params is not None
    r = resize(profile, change.params, batch=change.batch, seq_len=change.seq_len)
    for cls, c in state.classes.items():
        work = r.classes.get(cls, c.work)
        c.work = work
        c.ms = retime(c, cls, state.roofs, state.precision, r.ratios.get(cls, 1.0))
        c.add_unc(U_PARAMS)
        c.basis.append(f"{r.source.name} → {r.target.name}: work ×{r.ratios.get(cls, 1):.3g}")
    state.idle_ms *= r.op_ratio
    state.idle_unc = math.sqrt(state.idle_unc**2 + U_PARAMS**2)
    state.batch, state.tokens = r.target.batch, r.target.seq_len
    state.model, state.matmul_params = r.target.name, r.target.matmul_params
    state.buckets = r.buckets
    state.grad_bytes = sum(b for b, _ in r.buckets) or r.grad_bytes
    state.changes.append("params")
    state.basis.extend(r.basis)


def _legacy_batch(state: StepState, profile: StepProfile, change: Change) -> None:
    """Another batch of a step recorded before the unit groups: the reference transformer
    families re-tallied at it (the size change's rules at the same size); others refused."""
    from .family import source_shape

    try:
        shape = source_shape(profile)
    except BadInputError:
        raise BadInputError(f"--batch-size: run {profile.run_id} was recorded before the unit "
                            "groups (gpuaudit's op profile schema 3): record it again with "
                            f"`gpuaudit bench train --op-profile` to predict another batch of "
                            f"{profile.model!r}") from None
    _resize(state, profile, Change(params=float(shape.matmul_params), batch=change.batch,
                                   seq_len=change.seq_len))


def _gpu(state: StepState, target: GpuSpec) -> None:
    here = state.roofs
    if target.id == here.gpu.id:
        return
    theirs = scaled_roofs(target, here)
    matmul_rate(theirs, state.precision)
    same_arch = target.architecture == here.gpu.architecture
    r_here, r_there = matmul_rate(here, state.precision), matmul_rate(theirs, state.precision)
    s_here, s_there = here.sms, theirs.sms
    for cls, c in state.classes.items():
        w = c.work
        if cls in TENSOR_CLASSES:
            if w.kernels and s_here and s_there:
                c.ms = _wave_scaled(c, w, r_here, r_there, s_here, s_there)
                how = f"{len(w.kernels)} recorded kernel grids re-quantized into waves"
            else:
                c.ms = retime(c, cls, theirs, state.precision, r_here / r_there)
                how = ("its matmuls, exponentials and traffic on its roofs"
                       if cls == "attention" else
                       "shapes re-quantized into waves" if s_there else "no SM count: no waves")
            c.add_unc(U_GPU[same_arch]["tensor"])
            c.basis.append(f"{here.gpu.id} → {target.id}: {how}, matmul "
                           f"{r_here:.4g} → {r_there:.4g} TFLOP/s")
        elif cls in MEMORY_BOUND:
            gamma = habitat_gamma(w.flops, w.bytes, theirs.vector_tflops, theirs.memory_gbps)
            compute = ((here.vector_tflops or 1.0) / (theirs.vector_tflops or 1.0))
            roofline = (here.memory_gbps / theirs.memory_gbps) ** gamma * compute ** (1 - gamma)
            share = _traffic_share(c, cls, here, state.precision)
            factor = (roofline if share is None else
                      share * roofline + (1 - share) * _sm_pace(here, theirs, compute))
            c.ms *= factor
            c.add_unc(U_GPU[same_arch]["memory"])
            whole = (f"bandwidth^{gamma:.2g} {here.memory_gbps:.4g} → "
                     f"{theirs.memory_gbps:.4g} GB/s")
            how = ("no traffic recorded: all of it by " + whole if share is None else
                   "at the copy bandwidth: all of it by " + whole if share >= 1 else
                   f"its traffic ({share:.0%} of its time at the copy bandwidth) by "
                   f"{whole}, the rest by the SMs × clock")
            c.basis.append(f"{here.gpu.id} → {target.id}: {how} (×{factor:.3g})")
    state.idle_unc = math.sqrt(state.idle_unc**2 + U_IDLE**2)
    if state.allreduce is not None:
        ratio = _link_gbps(target) / _link_gbps(here.gpu)
        state.allreduce = state.allreduce.scaled(
            ratio, f"{state.allreduce.source}, × {ratio:.3g} ({target.name}'s link ÷ "
                   f"{here.gpu.name}'s)")
    state.roofs = theirs
    state.changes.append("gpu")
    state.basis.extend(theirs.basis)
    if not same_arch:
        state.notes.append(f"{here.gpu.architecture} → {target.architecture}: other kernels, "
                           "other efficiencies; a wide band")


def _traffic_share(c: ClassState, cls: str, roofs: Roofs, precision: str) -> float | None:
    """The share of a memory-bound class's time its bytes take at the copy bandwidth here;
    only that share moves with the other GPU's bandwidth. The rest is time its kernels spend
    short of the bandwidth (too few blocks in flight, per-channel reductions, launch ramps),
    which follows the SMs: on an H200 MobileNetV2's batch norm moved 3.1 GB in 15.7 ms (5 %
    of the copy bandwidth), and on an H100, 30 % less bandwidth, its bf16 step took 1.04×,
    where the bandwidth alone put it at 1.26×. None where no traffic is recorded (the class
    is then taken as bandwidth-bound)."""
    ideal_ms = ideal_seconds(cls, c.work, roofs, precision) * 1e3
    return min(1.0, ideal_ms / c.ms) if ideal_ms > 0 and c.ms > 0 else None


def _sm_pace(here: Roofs, theirs: Roofs, fallback: float) -> float:
    """Time there ÷ here of work short of the bandwidth: SMs × the highest SM clock here ÷
    there (a block's latency, not its lanes: Hopper doubled the fp32 lanes of an SM, which
    such kernels do not fill); `fallback` (the fp32 peaks' ratio) where a datasheet lacks
    either."""
    a, b = here.sm_cycles_per_s, theirs.sm_cycles_per_s
    return a / b if a and b else fallback


def _wave_scaled(c: ClassState, w: OpWork, r_here: float, r_there: float, s_here: int,
                 s_there: int) -> float:
    """Habitat's wave scaling: a kernel's time × its waves there ÷ here × the time of one
    wave there ÷ here (the per-SM rate: matmul rate ÷ SMs), one block resident per SM (the
    recording has grids, not residency). A grid of exactly the SMs here is a persistent
    kernel (cuBLAS's nvjet on Hopper): it is launched with the other GPU's SM count, its
    tiles spread over them, so it scales as the matmul rate does.

    The grids' ratio is applied to the class's time, in the share of its recorded time the
    grids hold, the rest at the matmul rate's ratio: the grids' own times are the profile's
    raw sums, which the class's time is not where the profiled kernels summed to more than
    the timed step (it is scaled to it) or a change before this one moved it. Taken as
    times, a ConvNeXt's fp32 step whose kernels summed to 1.7× its step came out 1.65× as
    long on a GPU of the same SMs and rates (H200 → H100 SXM, where it measured 1.05×)."""
    per_wave = (r_here / s_here) / (r_there / s_there)
    seen = sum(k.us for k in w.kernels) / 1e3
    if seen <= 0 or w.ms <= 0:
        return c.ms * r_here / r_there
    scaled = sum(k.us / 1e3 * (s_here / s_there if k.blocks == s_here else
                               waves(k.blocks, s_there) / waves(k.blocks, s_here))
                 for k in w.kernels) * per_wave
    held = min(1.0, seen / w.ms)
    return c.ms * (held * scaled / seen + (1 - held) * r_here / r_there)


def _link_gbps(gpu: GpuSpec) -> float:
    """One direction of the GPU's fastest link to its peers (GB/s)."""
    if gpu.nvlink_bandwidth_gbps:
        return gpu.nvlink_bandwidth_gbps / 2
    return PCIE_GBPS.get(gpu.pcie_generation, 15.75) * gpu.pcie_width / 16


def spec_allreduce(gpu: GpuSpec) -> AllReduce:
    large = RING_EFFICIENCY * _link_gbps(gpu)
    return AllReduce((2**20, 2**32), (large * SMALL_MESSAGE_SHARE, large), 2,
                     f"no all-reduce measured: {RING_EFFICIENCY:.0%} of {gpu.name}'s link "
                     f"({_link_gbps(gpu):.4g} GB/s per direction) assumed at large sizes")


# --- the entry point -------------------------------------------------------------------------


def predict(profile: StepProfile, rates: MachineRates, change: Change,
            specs: SpecCatalog) -> Prediction:
    """`profile` with `change` applied (module docstring)."""
    if change.empty:
        raise BadInputError("nothing to predict: give --gpus, --precision, --gpu, --params or "
                            "--batch-size")
    state = _start(profile, rates)
    checks.refuse_or_note(profile, state)
    source = _scenario(state, profile, profile.mode)
    source_compute = state.compute_ms
    source_batch = state.batch
    measured = {cls: c.measured_ms for cls, c in state.classes.items()}
    achieved = {cls: c.achieved for cls, c in state.classes.items()}
    g = grouped.start(profile.record) if change.params is None else None
    if change.params is not None and change.model is not None:
        raise BadInputError("--params and --model are two ways to say another size: give one")
    if change.params is not None:
        _resize(state, profile, change)
    if change.model is not None:
        if g is None:
            raise BadInputError(f"--model: run {profile.run_id}'s {profile.workload} was "
                                "recorded before the unit groups (op profile schema 3): record "
                                "it again with `gpuaudit bench train --op-profile`")
        grouped.size(g, state, profile, change.model)
    if change.precision is not None:
        target = change.precision.strip().lower()
        precision_change.check(state, target)
        precision_change.check_weights(profile, target)
        precision_change.check_ran(profile, target)
        if g is not None and target != state.precision:
            grouped.precision(g, state, target)
        else:
            precision_change.change(state, target)
    if change.batch is not None and change.params is None and change.batch != state.batch:
        if change.batch < 1:
            raise BadInputError(f"--batch-size {change.batch}: must be at least 1")
        if g is not None:
            grouped.batch(g, state, change.batch)
        else:
            _legacy_batch(state, profile, change)
    if change.gpu is not None:
        before = {cls: (c.ms, c.unc) for cls, c in state.classes.items()}
        _gpu(state, _spec(specs, change.gpu))
        if g is not None:
            grouped.class_changed(g, state, before)
    checks.roofline(state, tuple(state.changes), achieved)
    gpus = change.gpus or 1
    if gpus < 1:
        raise BadInputError(f"--gpus {gpus}: must be at least 1")
    compute = state.compute_ms
    step = compute + state.idle_ms
    low = sum(c.ms * (1 - c.unc) for c in state.classes.values()) + \
        state.idle_ms * max(0.0, 1 - state.idle_unc)
    high = sum(c.ms * (1 + c.unc) for c in state.classes.values()) + \
        state.idle_ms * (1 + state.idle_unc)
    replayed = grouped.replay(g, state, profile.step_spread) if g is not None else None
    if replayed is not None:
        step, low, high = replayed.ms, replayed.low_ms, replayed.high_ms
        state.idle_ms = max(0.0, step - compute)
        grows = change.model is not None or (change.batch or 0) > source_batch
        state.basis.append(replaynotes.basis(replayed))
        state.notes.extend(replaynotes.notes(replayed, g.record.host_batch, source_batch,
                                             grows))
    if "gpu" in state.changes:
        waits = replayed.host_bound_share if replayed is not None else 0.0
        state.notes.append(
            f"the device waits on the host {waits:.0%} of this step: on the "
            f"{state.roofs.gpu.id} it follows the host that issues it, not the GPU, and holds "
            "for a host as fast as the recorded one; fewer launches a step (torch.compile, "
            "CUDA graphs, a larger batch) would move it more than another GPU does"
            if waits >= HOST_BOUND_GPU_NOTE else
            "the host is taken to be as fast as the recorded one (its launch gaps are kept)")
    ar_ms = exposed = None
    if gpus > 1:
        ar = state.allreduce or spec_allreduce(state.roofs.gpu)
        backward = profile.phases_ms.get("backward", 0.0) * (compute / source_compute
                                                             if source_compute else 1.0)
        if not state.buckets:
            raise BadInputError(f"run {profile.run_id}: {profile.workload}/op/step has no "
                                "ddp_buckets: cannot place the all-reduces")
        ov = simulate(state.buckets, backward, gpus, ar)
        ar_ms, exposed = ov.allreduce_ms, ov.exposed_ms
        hidden = ov.allreduce_ms - ov.exposed_ms
        step += exposed
        low += exposed * (1 - U_ALLREDUCE)
        high += exposed * (1 + U_ALLREDUCE) + 0.2 * hidden
        state.changes.append("gpus")
        state.basis.append(f"DDP on {gpus} GPUs: {ov.buckets} gradient bucket(s) "
                           f"({state.grad_bytes / 1e6:,.0f} MB) all-reduced during a "
                           f"{backward:.3g} ms backward: {ov.allreduce_ms:.3g} ms of "
                           f"all-reduce, {ov.exposed_ms:.3g} ms past its end")
        state.basis.append(ar.source)
        state.gpus = gpus
        if gpus > 8:
            state.notes.append("more than 8 GPUs: one NVLink domain assumed (no inter-node "
                               "bandwidth measured)")
    target = _scenario(state, profile, _mode_of(profile, state.precision))
    samples = state.gpus * state.batch * 1e3
    tokens = state.tokens
    classes = tuple(ClassTime(op_class=cls, measured_ms=round(measured.get(cls, 0.0), 6),
                              predicted_ms=round(c.ms, 6),
                              uncertainty_pct=round(100 * c.unc, 2),
                              achieved_pct=(round(100 * achieved[cls], 2)
                                            if achieved.get(cls) else None),
                              basis="; ".join(c.basis) or "unchanged")
                    for cls, c in state.classes.items())
    _memory_note(state, profile, change)
    return Prediction(
        run_id=profile.run_id, rates_run_id=rates.run_id, source=source, target=target,
        changes=tuple(state.changes), measured_step_ms=profile.step_ms,
        step_ms=round(step, 6), step_ms_low=round(low, 6), step_ms_high=round(high, 6),
        samples_per_s=samples / step, samples_per_s_low=samples / high,
        samples_per_s_high=samples / low,
        tokens_per_s=samples * tokens / step if tokens else None,
        tokens_per_s_low=samples * tokens / high if tokens else None,
        tokens_per_s_high=samples * tokens / low if tokens else None,
        uncertainty_pct=round(100 * (high - low) / 2 / step, 2),
        idle_ms=round(state.idle_ms, 6),
        allreduce_ms=round(ar_ms, 6) if ar_ms is not None else None,
        exposed_allreduce_ms=round(exposed, 6) if exposed is not None else None,
        classes=classes, basis=tuple(state.basis), notes=tuple(state.notes),
        dry_run=profile.device == "cpu")


def _mode_of(profile: StepProfile, precision: str) -> str:
    _, *flags = profile.mode.split("+")
    return "+".join([precision, *flags])


def _scenario(state: StepState, profile: StepProfile, mode: str) -> Scenario:
    return Scenario(gpu=state.roofs.gpu.id, gpu_name=state.roofs.gpu.name, gpus=state.gpus,
                    precision=state.precision, model=state.model, mode=mode,
                    batch_per_gpu=state.batch, tokens_per_sample=state.tokens,
                    matmul_params=state.matmul_params)


def _spec(specs: SpecCatalog, gpu: str) -> GpuSpec:
    spec = specs.get(gpu.strip().lower())
    if spec is None:
        from gpuaudit import parse

        raise parse.unknown("--gpu", gpu, (g.id for g in specs.gpus), "GPU")
    return spec


def _memory_note(state: StepState, profile: StepProfile, change: Change) -> None:
    if profile.peak_memory_gb is None or change.params is not None:
        return
    have = state.roofs.gpu.memory_gb
    if profile.peak_memory_gb > 0.95 * have:
        state.notes.append(f"the recorded step used {profile.peak_memory_gb:.3g} GB; "
                           f"{state.roofs.gpu.name} has {have:g} GB: it may not fit")
