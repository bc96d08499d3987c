"""`gpuaudit predict`'s physics beyond the rates, with exact values: attention's causal work,
exponentials and traffic; the recorded kernel times re-read by name (cuDNN batch norm,
layout transforms, attention helpers, convolutions' cuBLAS kernels); a precision change's
layout transforms and batch norm's change of implementation."""

from __future__ import annotations

import pytest

from gpuaudit.predict import Change, predict
from gpuaudit.predict.attention import attention_seconds, causal_share, parts
from gpuaudit.predict.hardware import Roofs
from gpuaudit.predict.kernels import LAYOUT, layout_bytes, reattribute
from gpuaudit.predict.precision import U_DISPATCH, U_LAYOUT, cudnn_batch_norm
from gpuaudit.predict.profile import Gemm, KernelGrid, OpWork, StepProfile
from gpuaudit.predict.rates import MachineRates
from gpuaudit.specs.catalog import load_catalog

SPECS = load_catalog()
EXP_PER_S = 132 * 16 * 1980e6  # the H200's SFUs at its highest clock


def roofs(bf16: float = 700.0, fp32: float = 50.0, memory: float = 4000.0) -> Roofs:
    return Roofs(gpu=SPECS.get("h200-sxm"),
                 matmul_tflops={"bf16": bf16, "fp16": bf16, "fp32": fp32},
                 memory_gbps=memory, sms=132, measured=True,
                 efficiency={"bf16": bf16 / 989.5, "fp32": fp32 / 67.0,
                             "memory": memory / 4800})


# --- attention ---------------------------------------------------------------------------------


def test_causal_kernels_compute_the_tiles_on_and_below_the_diagonal():
    assert causal_share(1024, 1024, True) == pytest.approx(9 / 16)  # 8 tiles: (8+1)/16
    assert causal_share(2048, 2048, True) == pytest.approx(17 / 32)
    assert causal_share(100, 100, True) == 1.0  # one tile: all of it
    assert causal_share(1024, 1024, False) == 1.0


def gpt124m_attention(bytes_: float = 7.29e9) -> OpWork:
    forward = 4.0 * 32 * 12 * 1024 * 1024 * 64 * 12  # FlopCounterMode: full T × S
    return OpWork(cls="attention", ms=8.0, flops=3.5 * forward, bytes=bytes_,
                  attention=(((32, 12, 1024, 1024, 64, True), 12.0, forward),))


def test_attention_is_its_causal_matmuls_its_exponentials_and_its_traffic():
    w = gpt124m_attention()
    flops, exps = parts(w)
    assert flops == pytest.approx(w.flops * 9 / 16)
    # Two exponentials (forward, backward's recomputation) per computed score, 12 layers.
    assert exps == pytest.approx(2 * 12 * 32 * 12 * 1024 * 1024 * 9 / 16)
    want = flops / 700e12 + exps / EXP_PER_S + 7.29e9 / 4000e9
    assert attention_seconds(w, roofs(), 700.0) == pytest.approx(want)
    # Without recorded shapes: the FLOPs in full, no exponentials.
    bare = w.with_(attention=())
    assert attention_seconds(bare, roofs(), 700.0) == pytest.approx(
        w.flops / 700e12 + 7.29e9 / 4000e9)


def test_attention_changes_precision_with_its_recorded_traffic():
    attn = gpt124m_attention().with_(alt_precision="fp32", alt_bytes=14.5e9)
    prof = step(classes={"attention": attn}, precision="bf16", mode="bf16")
    p = predict(prof, MachineRates("r", roofs(), None, 1), Change(precision="fp32"), SPECS)
    got = p.classes[0]
    flops, exps = parts(attn)
    here = flops / 700e12 + exps / EXP_PER_S + 7.29e9 / 4000e9
    there = flops / 50e12 + exps / EXP_PER_S + 14.5e9 / 4000e9
    assert got.predicted_ms == pytest.approx(8.0 * there / here)


# --- the recorded kernels re-read ----------------------------------------------------------------


def grid(name: str, us: float) -> KernelGrid:
    return KernelGrid(name, 256, 1.94, 1.0, us)


def test_kernels_move_to_the_class_whose_work_they_do():
    conv = OpWork(cls="conv", ms=10.0, flops=1e12, bytes=2e9, kernels=(
        grid("void cudnn::bn_bw_1C11_kernel_new", 2000.0),
        grid("void cudnn::engines_precompiled::nchwToNhwcKernel", 1500.0),
        grid("void cudnn::engines_precompiled::nhwcToNchwKernel", 500.0),
        grid("sm90_xmma_fprop_implicit_gemm", 5000.0)))
    gemm = OpWork(cls="gemm", ms=1.0, flops=1e9, bytes=1e6,
                  shapes=(Gemm(256, 1000, 2048, 1, 2, 1, 1e9),),
                  kernels=(grid("sh_bprop_wgmma_f16_knob_26_64x64x64", 400.0),
                           grid("nvjet_sm90_tst_256x128", 600.0)))
    elem = OpWork(cls="elementwise", ms=3.0, flops=0, bytes=9e9)
    out = reattribute({"conv": conv, "gemm": gemm, "elementwise": elem})
    c = out.classes
    # batch norm's 2 ms to elementwise; the transforms' 2 ms to layout, whose traffic is
    # every conv tensor read and written once more.
    assert c["elementwise"].ms == pytest.approx(5.0)
    assert c[LAYOUT].ms == pytest.approx(2.0) and c[LAYOUT].bytes == layout_bytes(2e9) == 4e9
    # conv keeps 6 ms; the gemm joins it (1 ms: the fused-attention kernel listed under it by
    # its short name was timed as attention already: it leaves the list, not the time).
    assert set(c) == {"conv", "elementwise", LAYOUT}
    assert c["conv"].ms == pytest.approx(7.0) and c["conv"].flops == pytest.approx(1e12 + 1e9)
    assert [k.name for k in c["conv"].kernels] == ["sm90_xmma_fprop_implicit_gemm",
                                                   "nvjet_sm90_tst_256x128"]
    assert any("cuDNN batch norm" in b for b in out.basis)
    assert any("calibrated with conv" in b for b in out.basis)


def test_cudnn_attention_helpers_leave_an_otherwise_empty_conv_class():
    # gpt-124m bf16 on an H200: "conv" was cuDNN attention's backward helpers only.
    conv = OpWork(cls="conv", ms=1.2046, flops=0, bytes=0, kernels=(
        grid("sh_fprop_wgmma_f16_knob_7_64x128x64_4x1x1", 1876.57),
        grid("void cudnn::fusion::compute_dot_do_o_specialized", 657.226),
        grid("void cudnn::fusion::convert_dq_to_16bits", 547.38)))
    attn = OpWork(cls="attention", ms=7.084, flops=4.3e12, bytes=7.3e9)
    c = reattribute({"conv": conv, "attention": attn}).classes
    assert set(c) == {"attention"}
    assert c["attention"].ms == pytest.approx(7.084 + 1.2046)


# --- a precision change's program changes -----------------------------------------------------


def step(**over) -> StepProfile:
    base = dict(run_id="r1", workload="m/fp32", model="m", mode="fp32", precision="fp32",
                compiled=False, batch=256, tokens_per_sample=None, step_ms=100.0,
                busy_ms=100.0, idle_ms=0.0, phases_ms={}, grad_bytes=0, param_count=0,
                ops_per_step=0, buckets=(), classes={}, model_params={}, device="cuda",
                kernel_source="cuda kernels")
    base.update(over)
    return StepProfile(**base)  # type: ignore[arg-type]


def cnn(precision: str, channels_last: bool = False) -> StepProfile:
    conv = OpWork(cls="conv", ms=60.0, flops=6e12, bytes=50e9, alt_precision="bf16",
                  alt_bytes=25e9)
    elem = OpWork(cls="elementwise", ms=40.0, flops=0, bytes=100e9, alt_precision="bf16",
                  alt_bytes=50e9, op_bytes={"aten.cudnn_batch_norm": 30e9,
                                            "aten.relu_": 20e9})
    return step(classes={"conv": conv, "elementwise": elem}, precision=precision,
                model_params={"channels_last": channels_last})


def test_16bit_nchw_convolutions_add_their_layout_transforms():
    rates = MachineRates("r", roofs(), None, 1)
    p = predict(cnn("fp32"), rates, Change(precision="bf16"), SPECS)
    layout = next(c for c in p.classes if c.op_class == LAYOUT)
    # 2 × the 25 GB the bf16 convolutions read and write, at 4000 GB/s: 12.5 ms.
    assert layout.measured_ms == 0.0 and layout.predicted_ms == pytest.approx(12.5)
    assert layout.uncertainty_pct == pytest.approx(100 * U_LAYOUT)
    assert "NHWC" in layout.basis
    # channels_last: none.
    p = predict(cnn("fp32", channels_last=True), rates, Change(precision="bf16"), SPECS)
    assert LAYOUT not in {c.op_class for c in p.classes}


def test_batch_norm_changing_implementation_is_flagged_with_its_share():
    assert cudnn_batch_norm("fp32") and cudnn_batch_norm("fp16")
    assert not cudnn_batch_norm("bf16")
    rates = MachineRates("r", roofs(), None, 1)
    p = predict(cnn("fp32"), rates, Change(precision="bf16"), SPECS)
    elem = next(c for c in p.classes if c.op_class == "elementwise")
    # No kernel list: the 70 GB of other operators at 4000 GB/s are 17.5 ms, batch norm the
    # rest of the class's 40 ms, 22.5 ms, kept (per element); the others ×0.5 (35 of 70 GB
    # in bf16): 8.75 ms. 31.25 ms, batch norm 72 % of it at ±50 %, the others' 5 %.
    assert elem.predicted_ms == pytest.approx(31.25)
    assert elem.uncertainty_pct == pytest.approx(
        100 * ((0.05 * 8.75 / 31.25)**2 + (22.5 / 31.25 * U_DISPATCH)**2)**0.5, abs=0.005)
    assert U_DISPATCH == 0.5 and elem.uncertainty_pct == pytest.approx(36.03, abs=0.005)
    assert "keeps its 22.5 ms (the class's time less its other operators" in elem.basis
    assert "batch norm (72% of the class's time) runs PyTorch's own kernels" in elem.basis
    assert any("batch norm changes implementation" in n for n in p.notes)
    # fp32 → fp16 keeps cuDNN's batch norm: its time kept, no flag.
    p = predict(cnn("fp32"), rates, Change(precision="fp16"), SPECS)
    assert not any("batch norm" in n for n in p.notes)
    elem = next(c for c in p.classes if c.op_class == "elementwise")
    assert elem.predicted_ms == pytest.approx(31.25)
    assert elem.uncertainty_pct == pytest.approx(100 * 0.05 * 8.75 / 31.25, abs=0.005)
    # channels_last: batch norm's kernels are channels-last ones: the class moves with its
    # traffic, ×0.5.
    p = predict(cnn("fp32", channels_last=True), rates, Change(precision="fp16"), SPECS)
    elem = next(c for c in p.classes if c.op_class == "elementwise")
    assert elem.predicted_ms == pytest.approx(20.0)


def test_batch_norm_time_from_its_kernels_where_the_recording_lists_them():
    # cuDNN's batch norm listed under conv (recordings before 2026-12-01): its 12 ms are
    # re-read into elementwise (40 → 52 ms) and kept; the other 40 ms move ×0.5.
    prof = cnn("fp32")
    conv = prof.classes["conv"].with_(ms=72.0, kernels=(
        grid("void cudnn::bn_bw_1C11_kernel_new", 8000.0),
        grid("void cudnn::bn_fw_tr_1C11_kernel_NCHW", 4000.0)))
    prof = step(classes={**prof.classes, "conv": conv}, step_ms=112.0, busy_ms=112.0)
    p = predict(prof, MachineRates("r", roofs(), None, 1), Change(precision="fp16"), SPECS)
    elem = next(c for c in p.classes if c.op_class == "elementwise")
    assert elem.measured_ms == pytest.approx(52.0)
    assert elem.predicted_ms == pytest.approx(12.0 + 40.0 * 0.5)
    assert "keeps its 12 ms (its kernels' time in the recording)" in elem.basis


def test_an_fp32_recordings_own_few_transforms_do_not_stand_for_the_16bit_ones():
    # cuDNN's fp32 algorithms transform a few tensors (resnet50, H200: 1.2 ms); the bf16
    # program transforms all of them: 2 × the 25 GB of bf16 convolutions at 4000 GB/s.
    prof = cnn("fp32")
    conv = prof.classes["conv"].with_(ms=61.0, kernels=(
        grid("void cudnn::engines_precompiled::nchwToNhwcKernel", 1000.0),))
    prof = step(classes={**prof.classes, "conv": conv}, step_ms=101.0, busy_ms=101.0)
    p = predict(prof, MachineRates("r", roofs(), None, 1), Change(precision="bf16"), SPECS)
    layout = next(c for c in p.classes if c.op_class == LAYOUT)
    assert layout.measured_ms == pytest.approx(1.0)
    assert layout.predicted_ms == pytest.approx(12.5)
    assert "its 1 ms of fp32 transforms are a few algorithms'" in layout.basis


def test_a_convolution_class_is_bound_by_its_compute_or_its_traffic():
    from gpuaudit.predict.ideal import tensor_seconds

    # 1 TFLOP (no shapes kept: at 700 TFLOP/s) against 2 GB or 20 GB at 4000 GB/s.
    few = OpWork(cls="conv", ms=5.0, flops=1e12, bytes=2e9)
    assert tensor_seconds("conv", few, roofs(), "bf16") == pytest.approx(1e12 / 700e12)
    assert tensor_seconds("conv", few.with_(bytes=20e9), roofs(), "bf16") == \
        pytest.approx(20e9 / 4000e9)


def test_a_fused_attentions_ideal_is_its_flops_its_exponentials_and_its_traffic():
    """Two calls of (B·H 8, T = S 64, Q 32), not causal: 1e9 FLOPs at 100 TFLOP/s, two
    exponentials per score (2 × 2 × 8 × 64 × 64) at the SFUs' rate, 2e6 bytes at 4,000
    GB/s; its fused traffic (T + S) · Q per head and call: 2 × 8 × 128 × 32."""
    from gpuaudit.predict.attention import fused_seconds, fused_traffic

    calls = {(8, 64, 64, 32, False): 2}
    assert fused_seconds(calls, 1e9, 2e6, roofs(), 100.0) == pytest.approx(
        1e9 / 100e12 + 2 * 2 * 8 * 64 * 64 / EXP_PER_S + 2e6 / 4000e9)
    assert fused_traffic(calls) == 2 * 8 * 128 * 32
    # causal at 256 tokens: 2 tiles of 128, 3 of their 4 computed
    causal = {(8, 256, 256, 32, True): 1}
    assert fused_seconds(causal, 1e9, 0.0, roofs(), 100.0) == pytest.approx(
        0.75 * 1e9 / 100e12 + 0.75 * 2 * 8 * 256 * 256 / EXP_PER_S)
    # the FLOPs shared out by each call's T·S·Q: one of 64 tokens, one of 128, causal at 256
    mixed = {(8, 64, 64, 32, False): 1, (8, 256, 256, 32, True): 1}
    share = 64 * 64 / (64 * 64 + 256 * 256)
    assert fused_seconds(mixed, 1e9, 0.0, roofs(), 100.0) == pytest.approx(
        (share + 0.75 * (1 - share)) * 1e9 / 100e12
        + 2 * 8 * (64 * 64 + 0.75 * 256 * 256) / EXP_PER_S)
