"""What a GPU kernel's name says: HTA's kernel types, and whether a matmul or convolution ran on
tensor cores.

Kernel types follow HTA's `get_kernel_type` (hta/common/types.py): the patterns are checked in
order with `re.match`, so they anchor at the start of the name.

Tensor cores from names is a heuristic (the ground truth is a hardware counter: GPM's tensor
activity, or CUPTI's). The names of the PyTorch profiler's former TensorBoard plugin (from
NVIDIA's PyProf) cover Volta to Ampere; Hopper's cuBLAS kernels are named otherwise: the
cuBLASLt `nvjet_*` family (bf16/fp16/tf32/fp8 GEMMs on sm90 and newer, tensor cores only) and
`sm90_xmma_gemm_*`, whose operand types are in the name: `bf16bf16`, `f16f16`, `tf32`, `e4m3`
run on tensor cores; `f32f32_f32` without `tf32` is a plain FP32 GEMM.
"""

from __future__ import annotations

import re
from enum import Enum

from gpuaudit import kernelnames as kn


class KernelType(str, Enum):
    COMMUNICATION = "communication"
    MEMORY = "memory"
    COMPUTATION = "computation"
    OTHER = "other"


# HTA 0.6 hta/common/types.py, in its order. Kept as HTA writes it, not `kernelnames.is_comm`:
# the doctor's kernel types are HTA's (anchored at the start; ROCm's hip and Huawei's hccl).
_COMM = re.compile(r"(^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*)")
_MEMORY = re.compile(r"(^(hip)?Memcpy)|(^(hip)?Memset)|(^dma)")
_NOT_COMPUTE = re.compile(
    r"(^nccl)|(.*Memcpy)|(.*Memset)|(.*dma)|(^.*Sync)|(^Stream Wait Event)|(cuda.*LaunchKernel)"
    r"|(^runFunction)|(^hip)|(^job_exe)|(^packet)|(^pe_exe)|(^cpum_exe_subgraph)|(^hccl)"
    r"|(^collective_subgraph_execution)")


def kernel_type(name: str) -> KernelType:
    if _COMM.match(name):
        return KernelType.COMMUNICATION
    if _MEMORY.match(name):
        return KernelType.MEMORY
    if not _NOT_COMPUTE.match(name):
        return KernelType.COMPUTATION
    return KernelType.OTHER


def _names_matmul(name: str) -> bool:
    """A kernel doing a matmul, a convolution or fused attention (where tensor cores apply).
    Not cuBLAS's helpers (`kn.is_cublas`: split-K's reduction runs no tensor cores), nor the
    rest of cuDNN (`kn.is_cudnn`: its batch norm and layout transforms do no matmul), which
    `workloads.opclass.kernel_class` charges to gemm and conv: it asks whose time, this what
    work."""
    return kn.is_matmul(name) or kn.is_conv(name) or kn.is_attention(name)


# Tensor-core fragments: the former TensorBoard plugin's allowlist (PyProf), then Hopper's.
_TC_PYPROF = ("h884", "s884", "h1688", "s1688", "hmma", "i8816", "16816",
              "dgrad_1x1_stride_2x2", "first_layer_wgrad_kernel", "conv1x1", "conv2d_c1_k1",
              "direct_group", "xmma_implicit_gemm", "xmma_sparse_conv",
              "xmma_warp_specialized_implicit_gemm", "xmma_sparse_gemm", "c1688")
_TC_NEWER = re.compile(r"^nvjet_|gmma|wgmma|tensorop|tf32|bf16|f16f16|fp16|e4m3|e5m2|"
                       r"flash_fwd|flash_bwd|fmha|_h\d{3,5}gemm|i8816", re.IGNORECASE)
# FP32 on the CUDA cores: SIMT GEMMs, cuBLAS sgemm, sm90 xmma with fp32 operands and no tf32.
_FP32 = re.compile(r"sgemm|simt|ffma|f32f32_f32|_sss_|gemv2T_kernel_val<int, int, float|"
                   r"gemvx?::kernel<.*float, float, float", re.IGNORECASE)


class TensorCore(str, Enum):
    YES = "tensor cores"
    NO = "no tensor cores (fp32)"
    UNKNOWN = "not known from the name"
    NOT_MATMUL = "not a matmul"


def tensor_core_use(name: str) -> TensorCore:
    if not _names_matmul(name) and not any(f in name for f in _TC_PYPROF):
        return TensorCore.NOT_MATMUL
    lowered = name.lower()
    if any(f in lowered for f in _TC_PYPROF) or _TC_NEWER.search(name):
        # "f32f32_f32" with tf32 in the name is TF32 on tensor cores; without, it is FP32.
        if "f32f32_f32" in lowered and "tf32" not in lowered:
            return TensorCore.NO
        return TensorCore.YES
    if _FP32.search(name):
        return TensorCore.NO
    return TensorCore.UNKNOWN


# Memcpy kinds as Kineto names them: "Memcpy HtoD (Pageable -> Device)".
_MEMCPY = re.compile(r"Memcpy (?P<dir>HtoD|DtoH|DtoD|HtoH|PtoP)(?: \((?P<src>\w+) -> "
                     r"(?P<dst>\w+)\))?")


def memcpy_kind(name: str) -> tuple[str, bool] | None:
    """(direction, pageable) of a Kineto memcpy event name; None for other names."""
    m = _MEMCPY.search(name)
    if not m:
        return None
    pageable = "Pageable" in (m.group("src") or "", m.group("dst") or "")
    return m.group("dir"), pageable
