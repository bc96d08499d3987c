"""A precision change: matmul-bound classes at the other precision's measured matmul rate
with operands of its width; memory-bound classes with the traffic recorded under that
precision family; and what the change does to the program beyond its rates:

- 16-bit (and TF32) convolutions of NCHW tensors run cuDNN's tensor-core kernels in NHWC,
  with a transform of every tensor before and after (`kernels.layout_bytes`); fp32 ones run
  on CUDA cores in NCHW without them. The transforms are added or removed.
- Batch norm changes implementation: PyTorch calls cuDNN's unless the input is bf16
  (aten/src/ATen/native/Normalization.cpp, `_batch_norm_impl_index`), its own kernels then.
  The recording holds the time of one implementation only: the other's is not predicted
  from it; the batch-norm operators' share of the class is flagged, with ±100 % on it.
"""

from __future__ import annotations

from gpuaudit.errors import BadInputError
from gpuaudit.workloads.ops import TENSOR_CLASSES

from .ideal import ELEMENT_BYTES, matmul_rate, memory_seconds
from .kernels import LAYOUT, layout_bytes
from .profile import Gemm, OpWork
from .state import ClassState, StepState, retime

TRAIN_PRECISIONS = ("fp32", "tf32", "bf16", "fp16")  # what --precision may ask for
TENSOR_CORE_CONV = ("tf32", "bf16", "fp16")  # cuDNN's tensor-core convolutions take NHWC

U_PRECISION = 0.10
U_BYTES_GUESSED = 0.25
U_LAYOUT = 0.25  # transforms not in the recording: their traffic at the copy rate
U_DISPATCH = 1.0  # the operators whose implementation changes: not in the recording


def change(state: StepState, target: str) -> None:
    """`state` re-timed in `target` precision (module docstring)."""
    if target not in TRAIN_PRECISIONS:
        raise BadInputError(f"--precision {target!r}: expected one of "
                            f"{', '.join(TRAIN_PRECISIONS)}")
    src = state.precision
    if target == src:
        return
    roofs = state.roofs
    matmul_rate(roofs, target)
    width = ELEMENT_BYTES[target]
    for cls, c in state.classes.items():
        if cls == LAYOUT:
            continue
        if cls == "elementwise":
            _batch_norm(c, state, src, target)
        if cls in TENSOR_CLASSES:
            _tensor(c, cls, state, src, target)
        else:
            _memory(c, src, target)
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


def _tensor(c: ClassState, cls: str, state: StepState, src: str, target: str) -> None:
    w = c.work
    width = ELEMENT_BYTES[target]
    shapes = tuple(Gemm(g.m, g.n, g.k, g.batch, width, g.count, g.flops) for g in w.shapes)
    new, how, u = _traffic(w, src, target)
    if u == U_BYTES_GUESSED:  # matmul operands: their width is known
        new, how, u = w.bytes * width / ELEMENT_BYTES[src], f"{width}-byte operands", 0.05
    c.work = w.with_(shapes=shapes, kernels=(), bytes=new, alt_bytes=w.bytes,
                     alt_precision=src)
    roofs = state.roofs
    c.ms = retime(c, cls, roofs, target, matmul_rate(roofs, src) / matmul_rate(roofs, target))
    c.add_unc(U_PRECISION)
    c.basis.append(f"{src} → {target}: matmul rate {matmul_rate(roofs, src):.4g} → "
                   f"{matmul_rate(roofs, target):.4g} TFLOP/s, {how}")


def _memory(c: ClassState, src: str, target: str) -> None:
    w = c.work
    new, how, u = _traffic(w, src, target)
    ratio = new / w.bytes if w.bytes else 1.0
    c.work = w.with_(bytes=new, alt_bytes=w.bytes, alt_precision=src)
    c.ms *= ratio
    c.add_unc(u)
    c.basis.append(f"{src} → {target}: {how} (×{ratio:.3g})")


def cudnn_batch_norm(precision: str) -> bool:
    """Whether PyTorch runs batch norm with cuDNN in this training precision (autocast keeps
    the weights fp32; cuDNN takes any input but bf16)."""
    return precision != "bf16"


def _batch_norm(c: ClassState, state: StepState, src: str, target: str) -> None:
    w = c.work
    norm = sum(b for op, b in w.op_bytes.items() if "batch_norm" in op)
    if not norm or not w.bytes or cudnn_batch_norm(src) == cudnn_batch_norm(target):
        return
    share = min(1.0, norm / w.bytes)
    was, now = ("cuDNN", "PyTorch's own") if cudnn_batch_norm(src) else \
        ("PyTorch's own", "cuDNN")
    c.add_unc(share * U_DISPATCH)
    c.basis.append(f"batch norm ({share:.0%} of the traffic) runs {now} kernels in {target}, "
                   f"{was} in the recording: not predicted from it (±100 % on its share)")
    state.notes.append(f"batch norm changes implementation ({was} kernels in {src}, {now} in "
                       f"{target}: PyTorch takes cuDNN's only for non-bf16 inputs); the "
                       "recording does not time the new ones: this prediction may be far off")


def _layout(state: StepState, src: str, target: str) -> None:
    conv = state.classes.get("conv")
    if conv is None or not conv.work.flops or state.channels_last:
        return
    before, after = src in TENSOR_CORE_CONV, target in TENSOR_CORE_CONV
    layout = state.classes.get(LAYOUT)
    if after and layout is None:
        work = OpWork(cls=LAYOUT, ms=0.0, flops=0.0, bytes=layout_bytes(conv.work.bytes))
        ms = memory_seconds(work, state.roofs) * 1e3
        layout = ClassState(work=work, measured_ms=0.0, ms=ms, achieved=None)
        layout.add_unc(U_LAYOUT)
        layout.basis.append(f"{target} convolutions of NCHW tensors: cuDNN transforms each "
                            f"tensor to NHWC and back, {work.bytes / 1e9:.3g} GB at the copy "
                            "rate (not in the recording)")
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
