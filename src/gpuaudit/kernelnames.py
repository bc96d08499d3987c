"""What a CUDA kernel's name says it does: the one vocabulary that `diagnose.kernels` (HTA's
kernel types, tensor cores), `workloads.opclass.kernel_class` (the op profile's classes),
`workloads.opclass.disagrees` (the second witness) and `predict.kernels` (re-reading recorded
classes) share.

Each predicate takes a kernel's demangled name as the profiler records it (Kineto's `name`, or
the op profile's shortened one: the last 60 characters before the arguments) and looks for its
fragments anywhere in it, ignoring case, unless its docstring says otherwise. The predicates
overlap (cuDNN's fused attention names say `flash` and `wgmma`; cuDNN's batch norm says
`cudnn`): each caller asks them in its own order, and that order is part of its meaning.

Names are a heuristic: what a kernel did is the profiler's hardware counters' to say. Pure
Python, no torch and no hw: any layer may import it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable


def _has(name: str, fragments: Iterable[str]) -> bool:
    n = name.lower()
    return any(f in n for f in fragments)


# --- communication --------------------------------------------------------------------------

COMM = ("nccl",)


def is_comm(name: str) -> bool:
    """NCCL's collectives and point-to-point kernels (`ncclDevKernel_AllReduce_Sum_f32_RING_LL`,
    `ncclKernel_…`; RCCL keeps NCCL's names on ROCm), wherever "nccl" stands in the name.

    HTA's own communication type (`diagnose.kernels.kernel_type`) is narrower and anchored:
    it is kept there as HTA writes it, so that the doctor's kernel types stay HTA's."""
    return _has(name, COMM)


# --- attention ------------------------------------------------------------------------------

ATTENTION = ("flash", "fmha", "attention", "sdpa")
CUDNN_ATTENTION_HELPERS = ("cudnn::fusion::", "compute_dot_do_o", "convert_dq_to")
# cuDNN's fused attention as the op profile shortens it: `…sh_fprop_wgmma_f16_knob_7_…`.
_CUDNN_FUSED_ATTENTION = re.compile(r"[fb]prop_wgmma_\w*knob")


def is_attention(name: str) -> bool:
    """Fused attention kernels: FlashAttention's (`flash_fwd_kernel`, `flash_bwd_…`, PyTorch's
    own copy of it), the memory-efficient ones of xFormers / PyTorch (`fmha_cutlassF_…`,
    `fmha_cutlassB_…`), cuDNN's fused SDPA (`cudnn_generated_fort_native_sdpa_sm90_flash_…`)
    and any name that says "attention". These run their matmuls on tensor cores too (the doctor
    counts them as matmuls); the op profile gives them a class of their own."""
    return _has(name, ATTENTION)


def is_cudnn_attention_helper(name: str) -> bool:
    """cuDNN attention's backward helpers (`cudnn::fusion::compute_dot_do_o_specialized`,
    `cudnn::fusion::convert_dq_to_16bits`): attention's time, though their names say neither
    attention nor matmul ("cudnn" would make them convolutions)."""
    return _has(name, CUDNN_ATTENTION_HELPERS)


def is_cudnn_fused_attention(name: str) -> bool:
    """cuDNN's fused attention kernel by the part of its name that survives the op profile's
    shortening (`…sh_bprop_wgmma_f16_knob_26_64x64x64_…`): the full name's `sdpa` and
    `flash` are cut off, and what is left reads as a convolution (fprop) or a matmul (wgmma).
    Case-sensitive, as cuDNN writes it."""
    return bool(_CUDNN_FUSED_ATTENTION.search(name))


# --- batch norm and layout ------------------------------------------------------------------

CUDNN_BATCH_NORM = ("cudnn::bn_", "bn_fw_", "bn_bw_")
BATCH_NORM = (*CUDNN_BATCH_NORM, "batch_norm", "batchnorm")


def is_cudnn_batch_norm(name: str) -> bool:
    """cuDNN's batch-norm kernels (`cudnn::bn_fw_tr_1C11_kernel_NCHW`, `cudnn::bn_bw_1C11_…`,
    `…_singleread`): the batch norm that "cudnn" in the name made a convolution in the op
    profiles recorded before 2026-12-01, and that `predict.kernels` moves out of conv."""
    return _has(name, CUDNN_BATCH_NORM)


def is_batch_norm(name: str) -> bool:
    """Batch norm's own kernels: cuDNN's (`is_cudnn_batch_norm`) and PyTorch's
    (`batch_norm_collect_statistics_kernel`, `batch_norm_backward_…`, and the TensorIterator
    kernels whose lambdas are batch norm's); not inductor's fused `triton_*` kernels, which do
    other operators' work too."""
    return not name.lower().startswith("triton") and _has(name, BATCH_NORM)


LAYOUT_TRANSFORMS = ("nchwtonhwc", "nhwctonchw")


def is_layout_transform(name: str) -> bool:
    """cuDNN's NCHW↔NHWC transforms (`cudnn::engines_precompiled::nchwToNhwcKernel`,
    `nhwcToNchwKernel`), run around 16-bit convolutions of NCHW tensors: memory-bound copies
    that "cudnn" in the name makes convolutions."""
    return _has(name, LAYOUT_TRANSFORMS)


# --- convolution ----------------------------------------------------------------------------

CUDNN = ("cudnn", "dgrad", "wgrad", "fprop", "implicit")


_CONV = re.compile(r"conv(?!ert)", re.IGNORECASE)


def is_conv(name: str) -> bool:
    """A name that says convolution: cuDNN's `implicit_convolve_sgemm`,
    `precomputed_convolve_sgemm`, CUTLASS's `…Conv2dProblemSize…`, inductor's
    `triton_tem_fused_convolution_…`. Not "convert" (inductor's dtype casts
    `triton_poi_fused_convert_element_type_…`, cuDNN's `convert_dq_to_16bits`)."""
    return _CONV.search(name) is not None


def is_cudnn(name: str) -> bool:
    """cuDNN's kernels by the library's name or its engines' words: "cudnn"
    (`cudnn::detail::dgrad_engine`, the `…__5x_cudnn` CUTLASS/xmma kernels it ships), `dgrad`,
    `wgrad`, `fprop` and `implicit` (implicit-GEMM convolutions: `sm90_xmma_fprop_implicit_gemm_…`).
    cuDNN runs convolutions, but this takes its batch norm, layout transforms and attention
    helpers too: the op profile asks for those first. The doctor does not use it (it asks
    whether a kernel does matmul work, not whose it is)."""
    return _has(name, CUDNN)


# --- optimizer ------------------------------------------------------------------------------

OPTIMIZER = ("multi_tensor_apply", "fused_adam", "adamw", "fused_sgd", "foreach")


def is_optimizer(name: str) -> bool:
    """The optimizers' fused and multi-tensor kernels: PyTorch's `multi_tensor_apply_kernel`
    (the foreach and fused Adam/AdamW/SGD implementations) and Apex-style `fused_adam`."""
    return _has(name, OPTIMIZER)


# --- matmul ---------------------------------------------------------------------------------

MATMUL = (
    # cuBLAS / cuBLASLt: GEMMs and GEMVs by name, Hopper's nvjet, the xmma kernels
    "gemm", "gemv", "nvjet", "xmma", "matmul",
    # CUTLASS, and the tensor-core instruction names (HMMA Volta–Ampere, (W)GMMA Hopper)
    "cutlass", "hmma", "gmma", "wgmma",
    # cuBLAS's architecture-prefixed kernels (sm90_xmma_gemm_…, ampere_sgemm_…, volta_h884gemm_…)
    "sm90_", "sm80_", "sm89_", "sm100_", "ampere_", "volta_", "turing_",
    # inductor's matmul templates, torch._scaled_mm (fp8)
    "triton_tem_fused_mm", "triton_tem_fused_addmm", "triton_tem_fused_bmm", "_scaled_mm",
)
CUBLAS = ("cublas", "splitkreduce")


def is_matmul(name: str) -> bool:
    """A kernel that multiplies matrices: cuBLAS/cuBLASLt's (`…gemm…`, `…gemv…`, Hopper's
    `nvjet_*`, `sm90_xmma_gemm_*`, the architecture-prefixed `ampere_sgemm_*`,
    `volta_h884gemm_*`), CUTLASS's (`cutlass_80_tensorop_…`, `…wgmma…`), inductor's matmul
    templates (`triton_tem_fused_mm_*`, `…addmm…`, `…bmm…`) and torch's `_scaled_mm`.
    Not cuBLAS's helpers that multiply nothing (`is_cublas`). Many convolution and attention
    kernels answer yes too (their names say gemm or wgmma): callers that want those apart ask
    `is_conv`, `is_cudnn` or `is_attention` first."""
    return _has(name, MATMUL)


def is_cublas(name: str) -> bool:
    """cuBLAS's kernels by the library's name, its helpers included: `cublasLt::splitKreduce_
    kernel` (a split-K GEMM's sum of partial products) and the shortened `…__5x_cublas`
    names. Their time is a matmul call's (the op profile's gemm class), but a helper does no
    multiply: the doctor, asking whether matmuls ran on tensor cores, leaves them out."""
    return _has(name, CUBLAS)
