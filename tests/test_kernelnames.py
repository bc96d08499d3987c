"""gpuaudit.kernelnames: every predicate's answer on kernel names the H200 recorded (the doctor's
traces of 2026-12-01, the op profiles of the predict runs), and the cases where the callers'
old lists differed."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from gpuaudit import kernelnames as kn
from gpuaudit.diagnose.kernels import TensorCore, tensor_core_use
from gpuaudit.workloads.opclass import kernel_class

FIXTURES = Path(__file__).parent / "fixtures"
DOCTOR = "doctor"  # tests/fixtures/doctor/h200-2026-12-01*/*.json.gz: Kineto's full names
PREDICT = "predict"  # tests/fixtures/predict/h200-1gpu-2026-12-01*-runs.json: shortened names

PREDICATES = {
    "comm": kn.is_comm, "attention": kn.is_attention,
    "attention_helper": kn.is_cudnn_attention_helper,
    "fused_attention": kn.is_cudnn_fused_attention, "batch_norm": kn.is_batch_norm,
    "cudnn_batch_norm": kn.is_cudnn_batch_norm, "layout": kn.is_layout_transform,
    "conv": kn.is_conv, "cudnn": kn.is_cudnn, "optimizer": kn.is_optimizer,
    "matmul": kn.is_matmul, "cublas": kn.is_cublas,
}

# (a recorded name, or the part of one that matters; where; the predicates that answer yes:
# every other one answers no)
RECORDED = [
    # cuBLASLt on Hopper
    ("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", DOCTOR, {"matmul"}),
    ("nvjet_sm90_tst_128x128_64x6_2x2_h_bz_splitK_NTT", DOCTOR, {"matmul"}),
    ("nvjet_sm90_tss_128x128_64x6_2x1_v_bz_TNT", PREDICT, {"matmul"}),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float,", DOCTOR,
     {"cublas"}),
    ("void cublasLt::splitKreduce_kernel", PREDICT, {"cublas"}),
    ("warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas", PREDICT, {"cublas"}),
    # CUTLASS
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x64_32x4_nn_align2>",
     DOCTOR, {"matmul"}),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x1_tn_align2>",
     DOCTOR, {"matmul"}),
    ("void cutlass::Kernel2", PREDICT, {"matmul"}),
    # attention: cuDNN's fused SDPA (full and shortened), PyTorch's memory-efficient kernels
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_"
     "cga1x1x1_kernel0_0", DOCTOR, {"attention", "fused_attention", "cudnn", "matmul"}),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_"
     "cga1x1x1_kernel0_0", DOCTOR, {"attention", "fused_attention", "cudnn", "matmul"}),
    ("sh_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0", PREDICT,
     {"fused_attention", "matmul"}),
    ("sh_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0", PREDICT,
     {"fused_attention", "cudnn", "matmul"}),
    ("fmha_cutlassB_f32_aligned_64x64_k64_sm80", PREDICT, {"attention", "matmul"}),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm80", PREDICT, {"attention", "matmul"}),
    ("void cudnn::fusion::compute_dot_do_o_specialized<true, 64>", DOCTOR,
     {"attention_helper", "cudnn"}),
    # "convert", not "conv": see test_convert_is_not_a_convolution
    ("void cudnn::fusion::convert_dq_to_16bits<true>", DOCTOR,
     {"attention_helper", "cudnn"}),
    # cuDNN's convolutions, batch norm and layout transforms (resnet50)
    ("void implicit_convolve_sgemm", PREDICT, {"conv", "cudnn", "matmul"}),
    ("void precomputed_convolve_sgemm", PREDICT, {"conv", "matmul"}),
    ("2ENS1_17Conv2dProblemSizeELNS1_9GroupModeE0EEEEEvNT_6ParamsE", PREDICT, {"conv"}),
    ("void cudnn::detail::dgrad_engine", PREDICT, {"cudnn"}),
    ("void wgrad_alg0_engine", PREDICT, {"cudnn"}),
    ("void cudnn::winograd_nonfused::winogradWgradData4x4", PREDICT, {"cudnn"}),
    ("_warpgroupsize2x1x1_g1_execute_segment_k_on_kernel__5x_cudnn", PREDICT, {"cudnn"}),
    ("void cutlass__5x_cudnn::Kernel", PREDICT, {"cudnn", "matmul"}),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW", PREDICT,
     {"batch_norm", "cudnn_batch_norm", "cudnn"}),
    ("void cudnn::bn_bw_1C11_singleread", PREDICT, {"batch_norm", "cudnn_batch_norm", "cudnn"}),
    ("void cudnn::engines_precompiled::nchwToNhwcKernel", PREDICT, {"layout", "cudnn"}),
    ("void cudnn::engines_precompiled::nhwcToNchwKernel", PREDICT, {"layout", "cudnn"}),
    # the optimizer, and PyTorch's own kernels that are none of these
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
     "namespace)::TensorListMetadata<2>", DOCTOR, {"optimizer"}),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>",
     DOCTOR, set()),
    ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float, float,",
     DOCTOR, set()),
    ("void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 4,",
     DOCTOR, set()),
    ("void at::native::vectorized_elementwise_kernel<8, at::native::GeluCUDAKernelImpl", DOCTOR,
     set()),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<",
     DOCTOR, set()),
    ("DeviceRadixSortOnesweepKernel<at_cuda_detail::cub::detail::radix::policy_hub<long,", DOCTOR,
     set()),
]

# Names the other tests use, for what the recordings above lack (NCCL: one GPU; PyTorch's
# batch-norm kernels: the recordings ran cuDNN's; inductor).
OTHERS = [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", {"comm"}),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<64>>", {"attention"}),
    ("void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, c10::BFloat16,",
     {"batch_norm"}),
    ("void at::native::batch_norm_backward_reduce_channels_last_kernel<4, float, float>",
     {"batch_norm"}),
    ("triton_red_fused__native_batch_norm_legit_functional_add_relu_18", set()),
    ("triton_poi_fused_add_gelu_0", set()),
    ("sm90_xmma_fprop_implicit_gemm_bf16", {"cudnn", "matmul"}),
    ("ampere_sgemm_128x64_tn", {"matmul"}),
    ("volta_h884gemm_64x64_ldg8_nn", {"matmul"}),
]


def _yes(name: str) -> set[str]:
    return {k for k, says in PREDICATES.items() if says(name)}


@pytest.mark.parametrize(("name", "where", "yes"), RECORDED)
def test_each_predicate_on_recorded_names(name, where, yes):
    assert _yes(name) == yes


@pytest.mark.parametrize(("name", "yes"), OTHERS)
def test_each_predicate_on_the_other_tests_names(name, yes):
    assert _yes(name) == yes


def _recorded_text(where: str) -> str:
    if where == DOCTOR:
        return "".join(gzip.open(p, "rt").read()
                       for p in sorted(FIXTURES.glob("doctor/h200-2026-12-01*/*.json.gz")))
    return "".join(p.read_text() for p in sorted(FIXTURES.glob("predict/h200-1gpu-*-runs.json")))


def test_the_table_holds_recorded_names():
    text = {w: _recorded_text(w) for w in (DOCTOR, PREDICT)}
    missing = [name for name, where, _ in RECORDED if name not in text[where]]
    assert not missing


# Where the callers' lists differed, and what became of it.

@pytest.mark.parametrize("name", [
    "triton_tem_fused_mm_0", "triton_tem_fused_addmm_1", "triton_tem_fused_bmm_2",  # inductor
    "_scaled_mm_kernel",  # torch._scaled_mm's, as kernel_class names it (made up)
    "volta_scudnn_128x64_relu_interior_nn_v1",  # cuDNN's implicit GEMM, arch-prefixed
    "cudnn_generated_fort_native_sdpa_sm90_knob_3_64x64x64_kernel0_0",  # no "flash" (made up)
])
def test_the_doctor_now_reads_these_as_matmuls(name):
    """An accident: the doctor's matmul list (from PyProf and HTA) lacked what kernel_class knew
    (inductor's templates, _scaled_mm, cuBLAS's architecture prefixes, cuDNN's "sdpa"), so these
    were "not a matmul"; they now count as matmuls (tensor cores not known from the name). No
    kernel of the recorded traces changes."""
    assert tensor_core_use(name) is TensorCore.UNKNOWN


@pytest.mark.parametrize("name", ["hmma_kernel", "sm_gmma_f16_kernel"])  # made up
def test_kernel_class_now_reads_mma_instruction_names_as_gemm(name):
    """An accident: the doctor read HMMA/GMMA in a name as a matmul, kernel_class did not (they
    fell to elementwise). No recorded name says hmma or gmma without another matmul word."""
    assert kernel_class(name) == "gemm"
    assert tensor_core_use(name) is TensorCore.YES


def test_cublas_helpers_are_gemm_time_but_not_the_doctors_matmuls():
    """Deliberate: split-K's reduction is a matmul call's time (the op profile's gemm) but runs
    no multiply on tensor cores (the doctor's tensor-core share leaves it out)."""
    name = "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float,"
    assert kernel_class(name) == "gemm"
    assert tensor_core_use(name) is TensorCore.NOT_MATMUL


@pytest.mark.parametrize("name", ["void cudnn::bn_fw_tr_1C11_kernel_NCHW",
                                  "void cudnn::engines_precompiled::nchwToNhwcKernel"])
def test_the_rest_of_cudnn_is_conv_time_but_not_a_matmul(name):
    """Deliberate: the op profile charges what is left of cuDNN to conv; the doctor asks whether
    a kernel multiplies, which its layout transforms (and batch norm) do not."""
    assert kn.is_cudnn(name) and tensor_core_use(name) is TensorCore.NOT_MATMUL


@pytest.mark.parametrize(("name", "cls"), [
    ("void cudnn::fusion::convert_dq_to_16bits<true>", "attention"),  # cuDNN attention's
    ("triton_poi_fused_convert_element_type_0", "elementwise"),  # inductor's dtype cast
    ("void cudnn::ops::nchwToNhwcKernel", "conv"),  # the rest of cuDNN: conv time, as before
    ("void implicit_convolve_sgemm<float, float>", "conv"),
])
def test_convert_is_not_a_convolution(name, cls):
    """"conv" but not "convert": inductor's casts were conv time in the op profile until
    2026-12-01 (a plain substring)."""
    assert kn.is_conv(name) is ("convolve" in name)
    assert kernel_class(name) == cls
