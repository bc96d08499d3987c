"""The recorded class times, re-read from the kernels' names where the recording's
classification (`workloads.opclass.kernel_class`, by name) put a kernel's time in a class whose
work it does not do. Since 2026-12-01 `kernel_class` itself puts cuDNN's batch norm in
elementwise and its attention helpers in attention; recordings made before (the fixtures of
that day among them) still need these moves, and the layout transforms always do. Each
move is a kernel's per-step time from the matmul-bound classes' kernel lists (their 48
longest), so what a list does not hold stays where it was.

- cuDNN's batch norm (`cudnn::bn_fw…`, `cudnn::bn_bw…`: "cudnn" in the name made them
  convolutions) → elementwise, where the batch-norm operators' traffic is tallied.
- cuDNN's layout transforms (`nchwToNhwcKernel`, `nhwcToNchwKernel`: a 16-bit convolution
  of NCHW tensors runs its tensor-core kernels in NHWC) → `layout`, a memory-bound class
  whose traffic is every tensor the convolutions read or write, read and written once more.
- cuDNN attention's backward helpers (`cudnn::fusion::compute_dot_do_o…`,
  `convert_dq_to_16bits`) → attention.
- cuDNN's fused attention kernels, whose shortened names (`…sh_fprop_wgmma_f16_knob…`) read
  as convolutions or matmuls, were timed as attention by their full names: they leave the
  other class's list (not its time).
- A convolutional step's matmul kernels: cuDNN runs convolutions with cuBLAS and CUTLASS
  kernels that cannot be told from the step's own matmuls, so gemm is calibrated with conv
  (resnet50 in fp32 on an H200: 11.9 ms of "gemm" kernels for 3.1 GFLOP of matmuls) where
  the matmuls are few beside the convolutions (`MERGE_SHARE`): in a ViT the patch
  convolution is the small one, and merging put its linear layers in conv at 936 % of
  conv's roofline. Recordings since the unit classes charge each kernel to the operator that
  launched it and need none of this.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuaudit import kernelnames as kn
from gpuaudit.model.opprofile import TENSOR_CLASSES

from .profile import KernelGrid, OpWork

LAYOUT = "layout"
MERGE_SHARE = 0.1  # gemm calibrated with conv where its FLOPs are at most this share of conv's
# (what a kernel's name says, the class its work belongs to). cuDNN's batch norm only, not
# `kn.is_batch_norm`: PyTorch's own batch-norm kernels never said "cudnn", so no recording put
# them in a matmul-bound class; and a shortened name may have lost inductor's `triton` prefix.
_MOVES = (
    (kn.is_cudnn_batch_norm, "elementwise"),
    (kn.is_layout_transform, LAYOUT),
    (kn.is_cudnn_attention_helper, "attention"),
)


@dataclass(frozen=True)
class Reattributed:
    classes: dict[str, OpWork]
    basis: tuple[str, ...]
    batch_norm_ms: float = 0.0  # cuDNN batch-norm kernels' time moved to elementwise


def _destination(name: str) -> str | None:
    for says, cls in _MOVES:
        if says(name):
            return cls
    return None


def reattribute(classes: dict[str, OpWork]) -> Reattributed:
    """`classes` with the moves of the module docstring applied (times in ms per step)."""
    ms = {c: w.ms for c, w in classes.items()}
    lists: dict[str, tuple[KernelGrid, ...]] = {}
    moved: dict[tuple[str, str], float] = {}
    for cls, w in classes.items():
        if cls not in TENSOR_CLASSES:
            continue
        keep = []
        for k in w.kernels:
            if cls != "attention" and kn.is_cudnn_fused_attention(k.name):
                continue  # its time is attention's already
            to = _destination(k.name)
            if to is None or to == cls:
                keep.append(k)
                continue
            take = min(k.us / 1e3, ms[cls])
            ms[cls] -= take
            ms[to] = ms.get(to, 0.0) + take
            moved[(cls, to)] = moved.get((cls, to), 0.0) + take
        lists[cls] = tuple(keep)
    out: dict[str, OpWork] = {}
    for cls, t in ms.items():
        w = classes.get(cls)
        if w is None:
            conv = classes.get("conv")
            w = OpWork(cls=cls, ms=0.0, flops=0.0, bytes=0.0)
            if cls == LAYOUT and conv is not None:
                w = w.with_(bytes=layout_bytes(conv.bytes))
        w = w.with_(ms=max(0.0, t), kernels=lists.get(cls, w.kernels))
        if w.ms <= 1e-9 and not w.flops and not w.bytes:
            continue  # nothing left: e.g. a "conv" that was attention's helpers only
        out[cls] = w
    basis = [f"{t:.3g} ms of {a}'s kernels are {b}'s ({_WHY[b]})"
             for (a, b), t in sorted(moved.items()) if t > 0]
    conv, gemm = out.get("conv"), out.get("gemm")
    # Only where the matmuls are a convolutional net's few (resnet50's classifier: 3.1 of
    # 1,300 GFLOP): a ViT's patch convolution would take its linear layers' time with it.
    if conv is not None and gemm is not None and conv.flops > 0 and \
            gemm.flops <= MERGE_SHARE * conv.flops:
        out["conv"] = _merged(conv, gemm)
        del out["gemm"]
        basis.append(f"gemm ({gemm.ms:.3g} ms) calibrated with conv: cuDNN runs convolutions "
                     "with cuBLAS/CUTLASS kernels, not told apart from the matmuls")
    return Reattributed(classes=out, basis=tuple(basis),
                        batch_norm_ms=moved.get(("conv", "elementwise"), 0.0)
                        + moved.get(("gemm", "elementwise"), 0.0))


def layout_bytes(conv_bytes: float) -> float:
    """Traffic of the NCHW↔NHWC transforms around 16-bit convolutions: every tensor the
    convolutions read or write (`conv_bytes`, as the tally counts them) read and written once
    more. (resnet50 bf16, batch 256, H200: 2 × 27.8 GB at the measured copy rate is 13.2 ms;
    its transform kernels took 13.5 ms.)"""
    return 2.0 * conv_bytes


_WHY = {"elementwise": "cuDNN batch norm", LAYOUT: "cuDNN NCHW↔NHWC transforms",
        "attention": "cuDNN attention's backward helpers"}


def _merged(conv: OpWork, gemm: OpWork) -> OpWork:
    alt = None
    if conv.alt_bytes is not None and gemm.alt_bytes is not None:
        alt = conv.alt_bytes + gemm.alt_bytes
    return conv.with_(ms=conv.ms + gemm.ms, flops=conv.flops + gemm.flops,
                      bytes=conv.bytes + gemm.bytes, ops=conv.ops + gemm.ops, alt_bytes=alt,
                      shapes=conv.shapes + gemm.shapes, kernels=conv.kernels + gemm.kernels,
                      timed=conv.timed + gemm.timed)
