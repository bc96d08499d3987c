"""A precision change: matmul-bound classes at the other precision's measured matmul rate
with operands of its width; memory-bound classes with the traffic recorded under that
precision family; and what the change does to the program beyond its rates:

- 16-bit (and TF32) convolutions of NCHW tensors run cuDNN's tensor-core kernels in NHWC,
  with a transform of every tensor before and after (`kernels.layout_bytes`); fp32 ones run
  on CUDA cores in NCHW without them. The transforms are added or removed.
  A recording of fp32 can hold a few transforms of its own (cuDNN's fp32 algorithms that
  take NHWC for some convolutions: 1.2 ms in resnet50 on an H200, against 13.5 ms in bf16):
  they say nothing of the 16-bit program's, which are modeled afresh.
- Batch norm of NCHW tensors runs kernels with one thread block per channel (cuDNN's
  `bn_*_1C11` and PyTorch's own contiguous kernels alike: grid = C, 64 blocks on 132 SMs in
  resnet50's first layers), which are bound by the latency of their loads, not by the
  bandwidth: their time follows the element count, not the bytes. Across a change of element
  width batch norm keeps its time; the class's other operators move with their traffic.
  Its time is the kernels' where the recording lists them; otherwise the class's time less
  its other operators at the copy rate (which they cannot beat), so at most that.
- Batch norm changes implementation: PyTorch calls cuDNN's unless the input is bf16
  (aten/src/ATen/native/Normalization.cpp, `_batch_norm_impl_index`), its own kernels then.
  Both run one block per channel, but at their own rate per element, which the recording
  holds for one of them only: ±50 % on batch norm's time (on an H200 PyTorch's bf16 kernels
  took about 1.4 × cuDNN's fp32 time for the same elements), and the notes say so.
- Where the recording timed the step's batch-norm layers alone in both precision families
  (recordings before the unit timings: forward + backward at its biggest shapes, memory
  format and dtypes),
  batch norm's time moves by their ratio instead, whatever the implementations: the target's
  time ÷ the source's, summed over the shapes timed in both, each × its layers per step (a
  time-weighted mean of the per-shape ratios). Its band is then what that timing leaves
  open: the ratio of kernels timed alone carried into the step (±12 %: the one such
  comparison recorded, gpt-124m's matmuls on an H200, gave 12.9 alone for 14.7 in the
  steps), the untimed share of its traffic at ±50 %, and, where the recording lists no
  batch-norm kernels, its source time's own range (the upper bound above down to its share
  of the class's traffic).
"""

from __future__ import annotations

from gpuaudit.errors import BadInputError
from gpuaudit.model.opprofile import ACTIVATION, TENSOR_CLASSES

from .ideal import ELEMENT_BYTES, ideal_seconds, matmul_rate, memory_seconds
from .kernels import LAYOUT, layout_bytes
from .profile import Gemm, OpWork, StepProfile
from .state import ClassState, StepState, retime

TRAIN_PRECISIONS = ("fp32", "tf32", "bf16", "fp16")  # what --precision may ask for
TENSOR_CORE_CONV = ("tf32", "bf16", "fp16")  # cuDNN's tensor-core convolutions take NHWC

U_PRECISION = 0.10
U_BYTES_GUESSED = 0.25
U_LAYOUT = 0.25  # transforms not in the recording: their traffic at the copy rate
U_DISPATCH = 0.5  # batch norm's time when its implementation changes: not in the recording
U_NORM_TIMED = 0.12  # a time ratio of kernels timed alone, carried into the step (docstring)
U_CONV_UNTIMED = 0.25  # convolution layers not timed alone: taken to move as the timed ones
NORM = "batch_norm"  # the batch-norm operators of the tally (cudnn_batch_norm, native_…)


def check(state: StepState, target: str) -> None:
    """Bad input unless `target` is a training precision with a rate here."""
    if target not in TRAIN_PRECISIONS:
        raise BadInputError(f"--precision {target!r}: expected one of "
                            f"{', '.join(TRAIN_PRECISIONS)}")
    matmul_rate(state.roofs, target)


def check_weights(profile: StepProfile, target: str) -> None:
    """A refusal where the recorded model held its own 16-bit weights (its build made them
    so; `bench train` records `weights`): its step in another precision would hold other
    weights, gradients and optimizer state, none of which the recording shows."""
    held = profile.model_params.get("weights")
    if held and target != profile.precision:
        raise BadInputError(
            f"--precision {target}: run {profile.run_id}'s {profile.workload} trained its "
            f"model's own {held} weights (no float32 master copy): a step in {target} holds "
            "other weights, gradients and optimizer state; profile the model cast to float32 "
            "in build() to predict it")


def check_ran(profile: StepProfile, target: str) -> None:
    """A refusal where the same run tried `target` and the model's code raised there: a
    prediction would be of a step that does not run."""
    why = profile.failed_modes.get(target)
    if why is not None:
        raise BadInputError(f"--precision {target}: {profile.model} failed in {target} in run "
                            f"{profile.run_id} ({why}): its step does not run there")


def change(state: StepState, target: str) -> None:
    """`state` re-timed in `target` precision (module docstring)."""
    check(state, target)
    src = state.precision
    if target == src:
        return
    roofs = state.roofs
    width = ELEMENT_BYTES[target]
    conv = state.classes.get("conv")
    conv_timed = timed_conv_ratio(conv.work, src, target) if conv is not None else None
    for cls, c in state.classes.items():
        if cls == LAYOUT:
            continue
        if cls == "conv" and conv_timed:
            _timed_conv(c, state, src, target, conv_timed)
        elif cls in TENSOR_CLASSES:
            _tensor(c, cls, state, src, target)
        elif cls == "elementwise" and _norm_bytes(c.work) and (
                not state.channels_last or timed_norm_ratio(c.work, src, target)):
            _elementwise(c, state, src, target)
        else:
            _memory(c, src, target)
    if not conv_timed:
        _layout(state, src, target)
    state.precision = target
    state.changes.append("precision")
    state.basis.append(f"precision {src} → {target}: matmuls at the measured {target} rate "
                       f"({matmul_rate(roofs, target):.4g} TFLOP/s) with the source's "
                       f"achieved share, {width}-byte operands; traffic of the other precision "
                       "as recorded")


def _traffic(w: OpWork, src: str, target: str) -> tuple[float, str, float]:
    """(bytes in `target`, how they were found, their uncertainty)."""
    width = ELEMENT_BYTES[target]
    if ELEMENT_BYTES[src] == width:
        return w.bytes, "same traffic", 0.02
    if w.alt_bytes is not None and w.alt_precision is not None and \
            ELEMENT_BYTES.get(w.alt_precision) == width:
        return w.alt_bytes, f"traffic recorded under {w.alt_precision}", 0.05
    return (w.bytes * (0.6 if width < ELEMENT_BYTES[src] else 1.6),
            "traffic not recorded for it: ×0.6 / ×1.6 assumed", U_BYTES_GUESSED)


def _in_width(w: OpWork, src: str, target: str) -> tuple[OpWork, str]:
    """A matmul class's work with operands of the target's width, and how its traffic was
    found."""
    width = ELEMENT_BYTES[target]
    shapes = tuple(Gemm(g.m, g.n, g.k, g.batch, width, g.count, g.flops) for g in w.shapes)
    new, how, u = _traffic(w, src, target)
    if u == U_BYTES_GUESSED:  # matmul operands: their width is known
        new, how = w.bytes * width / ELEMENT_BYTES[src], f"{width}-byte operands"
    return w.with_(shapes=shapes, kernels=(), bytes=new, alt_bytes=w.bytes,
                   alt_precision=src), how


def _tensor(c: ClassState, cls: str, state: StepState, src: str, target: str) -> None:
    c.work, how = _in_width(c.work, src, target)
    roofs = state.roofs
    c.ms = retime(c, cls, roofs, target, matmul_rate(roofs, src) / matmul_rate(roofs, target))
    c.add_unc(U_PRECISION)
    c.basis.append(f"{src} → {target}: matmul rate {matmul_rate(roofs, src):.4g} → "
                   f"{matmul_rate(roofs, target):.4g} TFLOP/s, {how}")


def timed_conv_ratio(w: OpWork, src: str, target: str) -> tuple[float, int, float] | None:
    """(the convolutions' time in `target` ÷ in `src` from their layers timed alone: Σ count ×
    time in `target` ÷ Σ count × time in `src` over the layers timed in both; how many layers;
    the share of the class's forward FLOPs the timed layers hold), or None where the
    recording lacks either precision (recordings before the unit timings)."""
    if w.convs is None:
        return None
    have = {t.layer: t for t in w.convs.timed if t.precision == src}
    want = {t.layer: t for t in w.convs.timed if t.precision == target}
    both = [k for k in have if k in want]
    before = sum(have[k].count * have[k].ms for k in both)
    after = sum(want[k].count * want[k].ms for k in both)
    if not both or before <= 0 or after <= 0:
        return None
    return after / before, len(both), w.convs.flops_share


def _timed_conv(c: ClassState, state: StepState, src: str, target: str,
                timed: tuple[float, int, float]) -> None:
    """The convolutions and cuDNN's layout transforms around them, moved together by their
    layers' timed ratio (the transforms are in a layer's time alone, in the layout class in
    the step); the class re-calibrated there, for the changes that follow."""
    ratio, layers, share = timed
    layout = state.classes.get(LAYOUT)
    moved = layout.ms if layout is not None else 0.0
    before = c.ms + moved
    c.work, _ = _in_width(c.work, src, target)
    c.ms = before * ratio
    ideal = ideal_seconds("conv", c.work, state.roofs, target) * 1e3
    c.achieved = ideal / c.ms if c.ms > 0 else c.achieved
    u = (U_NORM_TIMED**2 + ((1 - share) * U_CONV_UNTIMED) ** 2) ** 0.5
    c.add_unc(u)
    with_layout = f" and its {moved:.3g} ms of layout transforms" if moved else ""
    c.basis.append(f"{src} → {target}: the convolution layers timed alone in both precisions "
                   f"(forward + backward, {layers} layers, {share:.0%} of the class's FLOPs, "
                   f"cuDNN's transforms included): {target} ÷ {src} ×{ratio:.3g}, "
                   f"time-weighted; the class's {c.measured_ms:.3g} ms{with_layout} → "
                   f"{c.ms:.3g} ms, ±{u:.0%} (a ratio timed alone carried into the step "
                   f"±{U_NORM_TIMED:.0%}, the untimed {1 - share:.0%} ±{U_CONV_UNTIMED:.0%})")
    if layout is not None:
        layout.ms = 0.0
        layout.work = layout.work.with_(bytes=0.0)
        layout.basis.append(f"{src} → {target}: in the convolutions' timed ratio")


def _memory(c: ClassState, src: str, target: str) -> None:
    w = c.work
    new, how, u = _traffic(w, src, target)
    ratio = new / w.bytes if w.bytes else 1.0
    c.work = w.with_(bytes=new, alt_bytes=w.bytes, alt_precision=src)
    c.ms *= ratio
    c.add_unc(u)
    c.basis.append(f"{src} → {target}: {how} (×{ratio:.3g})")


def _norm_bytes(w: OpWork) -> float:
    return sum(b for op, b in w.op_bytes.items() if NORM in op)


def norm_split(c: ClassState, state: StepState) -> tuple[float, str, float]:
    """(batch norm's time in the elementwise class, ms; where it comes from; the low end of
    its range, ms: the time itself where its kernels are listed, else its share of the
    class's traffic × the class's time)."""
    w = c.work
    if state.norm_ms is not None:
        ms = min(state.norm_ms, c.ms)
        return ms, "its kernels' time in the recording", ms
    others = memory_seconds(w.with_(bytes=w.bytes - _norm_bytes(w)), state.roofs) * 1e3
    share = _norm_bytes(w) / w.bytes if w.bytes else 0.0
    return (max(c.ms - others, share * c.ms),
            "the class's time less its other operators at the copy rate", share * c.ms)


def timed_norm_ratio(w: OpWork, src: str, target: str) -> tuple[float, int, float] | None:
    """(batch norm's time in `target` ÷ in `src` from its layers timed alone: Σ count × time
    in `target` ÷ Σ count × time in `src` over the shapes timed in both; how many shapes; the
    share of batch norm's traffic they hold), or None where the recording lacks either."""
    norm = w.norm
    if norm is None or ACTIVATION.get(src) is None or ACTIVATION.get(target) is None:
        return None

    def rows(p: str) -> dict[tuple[tuple[int, ...], str], tuple[float, float, float]]:
        return {(t.shape, t.memory_format): (t.count, t.ms, t.count * _numel(t.shape))
                for t in norm.timed if ACTIVATION.get(t.precision) == ACTIVATION[p]}

    have, want = rows(src), rows(target)
    both = [k for k in have if k in want]
    before = sum(have[k][0] * have[k][1] for k in both)
    after = sum(want[k][0] * want[k][1] for k in both)
    if not both or before <= 0 or after <= 0:
        return None
    elements = sum(v[2] for v in have.values())
    share = norm.timed_share * (sum(have[k][2] for k in both) / elements if elements else 0.0)
    return after / before, len(both), share


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _elementwise(c: ClassState, state: StepState, src: str, target: str) -> None:
    """NCHW batch norm keeps its time (per element: latency-bound); the rest of the class
    moves with its traffic (module docstring)."""
    w = c.work
    norm = _norm_bytes(w)
    new, how, u = _traffic(w, src, target)
    width = ELEMENT_BYTES[target] / ELEMENT_BYTES[src]
    norm_ms, where, low = norm_split(c, state)
    rest_ms = c.ms - norm_ms
    rest_ratio = (new - norm * width) / (w.bytes - norm) if w.bytes > norm else width
    timed = timed_norm_ratio(w, src, target)
    new_norm = norm_ms * timed[0] if timed else norm_ms
    c.work = w.with_(bytes=new, alt_bytes=w.bytes, alt_precision=src)
    c.ms = new_norm + rest_ms * rest_ratio
    c.add_unc(u * rest_ms * rest_ratio / c.ms if c.ms else u)
    if timed:
        _timed_norm(c, state, src, target, (norm_ms, where, low), timed,
                    f"the other operators, {how} (×{rest_ratio:.3g})")
        return
    c.basis.append(f"{src} → {target}: batch norm (NCHW, one block per channel: "
                   f"latency-bound) keeps its {norm_ms:.3g} ms ({where}); the other "
                   f"operators, {how} (×{rest_ratio:.3g})")
    if cudnn_batch_norm(src) != cudnn_batch_norm(target):
        _dispatch(c, state, src, target, norm_ms / c.ms if c.ms else 0.0)


def _timed_norm(c: ClassState, state: StepState, src: str, target: str,
                split: tuple[float, str, float], timed: tuple[float, int, float],
                rest: str) -> None:
    """Batch norm moved by its layers' timed ratio; its band what that timing leaves open."""
    norm_ms, where, low = split
    ratio, shapes, share = timed
    u_ratio = (U_NORM_TIMED**2 + ((1 - share) * U_DISPATCH) ** 2) ** 0.5
    u_source = (norm_ms - low) / norm_ms if norm_ms > 0 else 0.0
    u_norm = (u_ratio**2 + u_source**2) ** 0.5
    new_norm = norm_ms * ratio
    c.add_unc(u_norm * new_norm / c.ms if c.ms else u_norm)
    bound = (f"; its recorded time an upper bound, down to {low:.3g} ms by its share of the "
             "class's traffic" if u_source > 0 else "")
    c.basis.append(f"{src} → {target}: batch norm's layers timed alone in both precisions "
                   f"(forward + backward at the step's {shapes} biggest shapes, {share:.0%} "
                   f"of its traffic): {target} ÷ {src} ×{ratio:.3g}, time-weighted; its "
                   f"{norm_ms:.3g} ms ({where}) → {new_norm:.3g} ms, ±{u_norm:.0%} (a ratio "
                   f"timed alone carried into the step ±{U_NORM_TIMED:.0%}, the untimed "
                   f"{1 - share:.0%} of its traffic ±{U_DISPATCH:.0%}{bound}); {rest}")
    if cudnn_batch_norm(src) != cudnn_batch_norm(target):
        was, now = ("cuDNN", "PyTorch's own") if cudnn_batch_norm(src) else \
            ("PyTorch's own", "cuDNN")
        state.notes.append(f"batch norm changes implementation ({was} kernels in {src}, {now} "
                           f"in {target}: PyTorch takes cuDNN's only for non-bf16 inputs); "
                           f"both were timed alone on the step's shapes (×{ratio:.3g}): "
                           f"±{u_norm:.0%} on its time")


def cudnn_batch_norm(precision: str) -> bool:
    """Whether PyTorch runs batch norm with cuDNN in this training precision (autocast keeps
    the weights fp32; cuDNN takes any input but bf16)."""
    return precision != "bf16"


def _dispatch(c: ClassState, state: StepState, src: str, target: str, share: float) -> None:
    was, now = ("cuDNN", "PyTorch's own") if cudnn_batch_norm(src) else \
        ("PyTorch's own", "cuDNN")
    c.add_unc(share * U_DISPATCH)
    c.basis.append(f"batch norm ({share:.0%} of the class's time) runs {now} kernels in "
                   f"{target}, {was} in the recording: their rate per element is not in it "
                   f"(±{U_DISPATCH:.0%} on its time)")
    state.notes.append(f"batch norm changes implementation ({was} kernels in {src}, {now} in "
                       f"{target}: PyTorch takes cuDNN's only for non-bf16 inputs); the "
                       "recording does not time the new ones: its time is carried per element, "
                       f"±{U_DISPATCH:.0%}")


def _layout(state: StepState, src: str, target: str) -> None:
    conv = state.classes.get("conv")
    if conv is None or not conv.work.flops or state.channels_last:
        return
    before, after = src in TENSOR_CORE_CONV, target in TENSOR_CORE_CONV
    layout = state.classes.get(LAYOUT)
    if after and (layout is None or not before):
        # conv's work is the target's already: its traffic in the target's width.
        work = OpWork(cls=LAYOUT, ms=0.0, flops=0.0, bytes=layout_bytes(conv.work.bytes))
        ms = memory_seconds(work, state.roofs) * 1e3
        recorded = layout.measured_ms if layout is not None else 0.0
        layout = ClassState(work=work, measured_ms=recorded, ms=ms, achieved=None)
        layout.add_unc(U_LAYOUT)
        layout.basis.append(f"{target} convolutions of NCHW tensors: cuDNN transforms each "
                            f"tensor to NHWC and back, {work.bytes / 1e9:.3g} GB at the copy "
                            "rate (not in the recording"
                            + (f"; its {recorded:.3g} ms of {src} transforms are a few "
                               "algorithms', not these)" if recorded else ")"))
        state.classes[LAYOUT] = layout
    elif layout is not None and not after:
        layout.ms = 0.0
        layout.work = layout.work.with_(bytes=0.0)
        layout.basis.append(f"{target} convolutions run on CUDA cores in NCHW: no transforms")
    elif layout is not None:
        ratio = ELEMENT_BYTES[target] / ELEMENT_BYTES[src]
        layout.work = layout.work.with_(bytes=layout.work.bytes * ratio)
        layout.ms *= ratio
        layout.basis.append(f"{src} → {target}: transforms of {ELEMENT_BYTES[target]}-byte "
                            f"tensors (×{ratio:.3g})")
    if target == "tf32" and after != before:
        state.notes.append("TF32 convolutions are taken to transform NCHW tensors as 16-bit "
                           "ones do (not measured)")
