"""The op profile's capture on the CPU with tiny models: operator classes and traffic, FLOPs
against FlopCounterMode, matmul shapes, the kernel trace parser, DDP buckets, the record
`bench train --op-profile` stores, and the family resize on the meta device."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from gpuaudit.workloads import buckets, kernelview, opclass, optrace, tally, timing  # noqa: E402
from tests.support.predict import op_profile_run  # noqa: E402

MB = 2**20


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(("name", "cls"), [
    ("aten.mm", "gemm"), ("aten.addmm", "gemm"), ("aten.bmm", "gemm"),
    ("aten._scaled_dot_product_flash_attention", "attention"),
    ("aten._scaled_dot_product_efficient_attention_backward", "attention"),
    ("aten.convolution_backward", "conv"), ("aten._fused_adamw_", "optimizer"),
    ("aten._foreach_mul_", "optimizer"), ("aten.native_layer_norm", "norm"),
    ("aten.add", "elementwise"), ("c10d.allreduce_", "comm"), ("aten::lstm", "rnn"),
    ("aten.embedding_bag", "embedding"), ("aten._fft_r2c", "unknown"),
    ("torchvision::roi_align", "unknown"),
    # F.normalize, torch.norm and clip_grad_norm_ reduce; a determinant does not, nor an SVD
    ("aten::linalg_vector_norm", "elementwise"), ("aten::linalg_norm", "elementwise"),
    ("aten::linalg_matrix_norm", "unknown"), ("aten::linalg_svd", "unknown"),
    ("aten::det", "unknown"), ("aten::linalg_det", "unknown"), ("aten::detach", "elementwise"),
])
def test_aten_operators_fall_in_their_class(name, cls):
    assert opclass.op_class(name) == cls


@pytest.mark.parametrize(("name", "cls"), [
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNT", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "gemm"),
    ("ampere_sgemm_128x64_tn", "gemm"), ("void splitKreduce_kernel<32, 16>", "gemm"),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<64>>", "attention"),
    ("fmha_cutlassB_f32_aligned_64x64_k64_sm80", "attention"),
    ("sm90_xmma_fprop_implicit_gemm_bf16", "conv"),
    ("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>", "optimizer"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "comm"),
    ("triton_poi_fused_add_gelu_0", "elementwise"),
    ("void at::native::vectorized_elementwise_kernel<4>", "elementwise"),
    # seen in the H200 recordings of 2026-12-01, once read as convolutions by "cudnn"
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>",
     "elementwise"),
    ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>", "elementwise"),
    ("void cudnn::fusion::compute_dot_do_o<true, 64, 8, __nv_bfloat16>", "attention"),
    ("void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, float>", "conv"),
])
def test_kernels_fall_in_their_class(name, cls):
    assert opclass.kernel_class(name) == cls


def test_traffic_counts_reads_and_writes_and_views_nothing():
    a = torch.randn(64, 32)
    b = torch.randn(64, 32)
    w = torch.randn(32, 16)
    t = tally.count_ops(lambda: (a + b, a.t(), a.view(32, 64), a.mul_(2.0), a @ w))
    nbytes = 64 * 32 * 4
    # add: read a, b, write the sum; mul_: read a, write a; mm: read a and w, write 64×16.
    assert t.op_bytes["aten.add"] == 3 * nbytes
    assert t.op_bytes["aten.mul_"] == 2 * nbytes
    assert t.op_bytes["aten.mm"] == nbytes + 32 * 16 * 4 + 64 * 16 * 4
    assert "aten.t" not in t.op_bytes and "aten.view" not in t.op_bytes
    assert t.flops["gemm"] == 2 * 64 * 32 * 16
    assert dict(t.shapes) == {("gemm", 64, 16, 32, 1, 4): [1, 2 * 64 * 32 * 16]}
    # each operator is its own unit here (called at the top level): its group is its name
    assert t.group_bytes[("elementwise", "add")] == 3 * nbytes
    assert t.group_flops[("gemm", "matmul")] == 2 * 64 * 32 * 16


def test_counted_flops_equal_flop_counter_mode_on_a_tiny_gpt():
    from torch.utils.flop_counter import FlopCounterMode

    from gpuaudit.workloads import nets
    from gpuaudit.workloads.flops import missing_formulas

    torch.manual_seed(0)
    net = nets.WithLoss(nets.Gpt(128, 32, 2, 2, 32), nets.lm_loss)
    idx = torch.randint(128, (2, 32))

    def step():
        net(idx, idx).backward()

    t = tally.count_ops(step)
    with FlopCounterMode(display=False, custom_mapping=missing_formulas(torch)) as m:
        step()
    assert sum(t.flops.values()) == m.get_total_flops()
    assert t.flops["attention"] > 0 and t.bytes["elementwise"] > 0
    # Two causal attention calls of (B 2, H 2, T 32, S 32, Q 16), one per layer.
    assert dict(t.attention) == {(2, 2, 32, 32, 16, True): [2, 2 * 4 * 2 * 2 * 32 * 32 * 16]}
    # every linear layer's work is gemm's, whatever called it, its backward included
    assert t.group_flops[("gemm", "linear")] == t.flops["gemm"]


def test_an_unmasked_multihead_attention_is_recorded_not_causal():
    # nn.MultiheadAttention without a mask (a ViT's, CLIP's image tower's) reaches SDPA
    # unmasked: its shape is recorded bidirectional, whatever kernel runs it
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    x = torch.randn(2, 10, 32)
    t = tally.count_ops(lambda: mha(x, x, x, need_weights=False)[0].sum().backward())
    assert [shape[5] for shape in t.attention] == [False]


def test_cudnn_attention_is_read_causal_from_its_is_causal_not_its_log_sumexp():
    # _scaled_dot_product_cudnn_attention(q, k, v, attn_bias, compute_log_sumexp,
    # dropout_p, is_causal, …): compute_log_sumexp, true in training, sits where the flash
    # kernel keeps is_causal, and marked CLIP's unmasked image attention causal on an H100
    q = torch.zeros(2, 4, 50, 16)
    args = (q, q, q, None, True, 0.0, False, False)
    assert tally.attention_shape("_scaled_dot_product_cudnn_attention", args, {}) == \
        (2, 4, 50, 50, 16, False)
    causal = (*args[:6], True, False)
    assert tally.attention_shape("_scaled_dot_product_cudnn_attention", causal, {})[5]
    names = [a.name for a in torch.ops.aten._scaled_dot_product_cudnn_attention.default
             ._schema.arguments]
    assert tally.attention_shape("any", args, {}, names)[5] is False
    assert tally.attention_shape("any", causal, {}, names)[5] is True
    flash = (q, q, q, 0.0, True)
    assert tally.attention_shape("_scaled_dot_product_flash_attention", flash, {})[5]


def test_a_mixture_of_experts_grouped_gemm_is_counted_and_classed_as_gemm():
    # Hugging Face's MoE layers run their experts through torch._grouped_mm, which torch's
    # FlopCounterMode has no formula for (it counted 0 and the unit fell to elementwise).
    from gpuaudit.workloads.flops import count_flops

    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no _grouped_mm")
    tokens, k, n, experts = 64, 32, 48, 4
    a = torch.randn(tokens, k, requires_grad=True)
    w = torch.randn(experts, k, n, requires_grad=True)
    offs = torch.tensor([10, 30, 50, 64], dtype=torch.int32)

    def step():
        out = torch._grouped_mm(a, w, offs=offs)
        (out * out).mean().backward()

    # forward, the input's gradient and the experts' weight gradient: 3 × 2·T·K·N
    assert count_flops(step).total == 3 * 2 * tokens * k * n
    t = tally.count_ops(step)
    assert t.flops["gemm"] == 3 * 2 * tokens * k * n
    assert t.op_class["aten._grouped_mm"] == "gemm"
    # the forward as 4 GEMMs of a mean shape (64 rows over 4 experts)
    assert ("gemm", 16, n, k, experts, 4) in t.shapes


def test_the_trace_parser_charges_each_kernel_to_the_unit_that_launched_it():
    # A chrome trace as torch.profiler exports it (made up: two profiled steps): each kernel
    # reaches its launch by its correlation id, the launch the operators open on its thread.
    def launch(corr, ts, tid=1):
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts,
                "dur": 5, "tid": tid, "args": {"correlation": corr}}

    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": 0, "dur": 40, "tid": 1,
         "args": {"Sequence number": 7}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": 5, "dur": 30, "tid": 1,
         "args": {"Sequence number": 7}},
        launch(1, 10),
        {"ph": "X", "cat": "cpu_op", "name": "aten::scaled_dot_product_attention", "ts": 50,
         "dur": 20, "tid": 1, "args": {}},
        launch(2, 55),
        {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: "
         "AddmmBackward0", "ts": 200, "dur": 30, "tid": 2, "args": {"Sequence number": 7}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 205, "dur": 20, "tid": 2,
         "args": {}},
        launch(3, 210, tid=2),
        launch(4, 290),  # launched by no operator
        {"ph": "X", "cat": "kernel", "name": "nvjet_tst_128x128", "ts": 20, "dur": 100,
         "args": {"correlation": 1, "grid": [8, 4, 1], "blocks per SM": 0.24}},
        {"ph": "X", "cat": "kernel", "name": "flash_fwd_kernel", "ts": 120, "dur": 100,
         "args": {"correlation": 2, "grid": [2, 2, 1]}},
        {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "ts": 230, "dur": 60,
         "args": {"correlation": 3, "grid": [4, 1, 1]}},
        {"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "ts": 300,
         "dur": 40, "args": {"correlation": 4}},
        {"ph": "i", "cat": "kernel", "name": "nvjet", "ts": 0},
    ]
    t = kernelview.parse_trace(events, steps=2)
    # the linear layer's forward and its backward (the node of sequence number 7) are gemm
    assert dict(t.group_us) == {("gemm", "linear"): 160.0,
                                ("attention", "scaled_dot_product_attention"): 100.0,
                                ("unattributed", "unattributed"): 40.0}
    assert t.per_step_ms("gemm") == pytest.approx(0.08)
    assert dict(t.unknown) == {("vectorized_elementwise_kernel", "no operator launched it"): 40.0}
    assert t.busy_us == pytest.approx(300) and t.span_us == pytest.approx(320)
    assert dict(t.grids) == {("nvjet_tst_128x128", 32, 0.24): [1, 100.0],
                             ("flash_fwd_kernel", 4, 0.0): [1, 100.0],
                             ("ampere_sgemm_128x64_nn", 4, 0.0): [1, 60.0]}
    # the timeline, in launch order, from the first launch
    assert t.timeline.launch_us == [0.0, 45.0, 200.0, 280.0]
    assert t.timeline.start_us == [10.0, 110.0, 220.0, 290.0]


def test_a_hand_written_backward_charges_each_kernel_to_its_operators_class():
    # a Python autograd.Function's backward (its node made by no forward operator): the
    # GEMM kernels of its mm are gemm, its elementwise ones elementwise, both under its name
    def launch(corr, ts):
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts,
                "dur": 1, "tid": 2, "args": {"correlation": corr}}

    def op(name, ts, dur, args=None):
        return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "tid": 2,
                "args": args or {}}

    events = [
        op("autograd::engine::evaluate_function: MyLinearFnBackward", 0, 100,
           {"Sequence number": 41}),
        op("MyLinearFnBackward", 1, 98),
        op("aten::mm", 5, 20), launch(1, 10),
        op("aten::mul", 40, 10), launch(2, 42),
        {"ph": "X", "cat": "kernel", "name": "nvjet_tst_128x128", "ts": 20, "dur": 60,
         "args": {"correlation": 1, "grid": [8, 4, 1]}},
        {"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "ts": 90,
         "dur": 10, "args": {"correlation": 2, "grid": [8, 1, 1]}},
    ]
    t = kernelview.parse_trace(events, steps=1)
    assert dict(t.group_us) == {("gemm", "my_linear_fn_backward"): 60.0,
                                ("elementwise", "my_linear_fn_backward"): 10.0}
    assert not t.unknown


def test_kernels_of_one_unit_run_side_by_side_share_their_time():
    # cuDNN's grouped convolution as one kernel per group on three streams (made up, the
    # shape of ConvNeXt's fp32 depthwise backward on the H200): the unit is charged the
    # time its kernels held the device, not their sum; an all-reduce beside it keeps its own.
    def launch(corr, ts):
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts,
                "dur": 1, "tid": 1, "args": {"correlation": corr}}

    def kernel(corr, name, ts, dur):
        return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur,
                "args": {"correlation": corr, "grid": [64, 1, 1]}}

    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::convolution_backward", "ts": 0,
         "dur": 10, "tid": 1, "args": {}},
        *(launch(c, c) for c in (1, 2, 3)),
        {"ph": "X", "cat": "cpu_op", "name": "nccl:all_reduce", "ts": 20, "dur": 5, "tid": 1,
         "args": {}},
        launch(4, 21),
        kernel(1, "sm90_xmma_wgrad_nhwc_group", 100, 30),  # alone for 10, three for 20
        kernel(2, "sm90_xmma_wgrad_nhwc_group", 110, 20),
        kernel(3, "sm90_xmma_wgrad_nhwc_group", 110, 40),  # alone for its last 20
        kernel(4, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 100, 50),
    ]
    t = kernelview.parse_trace(events, steps=1)
    conv = [key for key in t.group_us if key[0] == "conv"]
    assert len(conv) == 1 and t.group_us[conv[0]] == pytest.approx(50.0)  # 10 + 20 + 20 …
    assert t.us["conv"] == pytest.approx(50.0)  # … the span its kernels held, not 90
    assert t.group_count[conv[0]] == 3
    assert sum(t.us.values()) == pytest.approx(50.0 + 50.0)
    grid = t.grids[("sm90_xmma_wgrad_nhwc_group", 64, 0.0)]
    assert grid == [3, pytest.approx(50.0)]
    # the timeline keeps each kernel as it ran
    assert sorted(t.timeline.dur_us) == [20.0, 30.0, 40.0, 50.0]


def test_ddp_buckets_follow_registration_order_reversed_and_the_caps():
    params = [torch.nn.Parameter(torch.empty(n // 4)) for n in (30 * MB, 2 * MB, MB // 2, 8)]
    shared = params[0]
    got = buckets.ddp_buckets([*params, shared])  # a tied weight counts once
    total = 30 * MB + 2 * MB + MB // 2 + 8
    # Reverse order: 8 B + 0.5 MiB + 2 MiB closes the 1 MiB first bucket; 30 MiB alone.
    assert got == [(8 + MB // 2 + 2 * MB, (8 + MB // 2 + 2 * MB) / total), (30 * MB, 1.0)]


def test_bench_train_records_the_op_profile():
    run = op_profile_run("gpt-tiny")
    got = {m.name: m for m in run.measurements}
    (p,) = run.op_profiles
    assert p.workload == "gpt-tiny/fp32" and p.grad_bytes == p.param_count * 4
    assert p.step_ms == pytest.approx(got["gpt-tiny/fp32/step_time"].value, rel=1e-3)
    assert p.forward_ms > 0 and p.backward_ms > 0 and p.buckets[-1].ready_fraction == 1.0
    gemm = next(c for c in p.classes if c.op_class == "gemm")
    assert gemm.shapes and gemm.alt_bytes and p.alt_precision == "bf16"
    counted = got["gpt-tiny/flop_count"].params["counted_total_per_sample"] * 4
    assert sum(c.flops for c in p.classes) == counted
    # the measurements stay for people: scalars only, the record is predict's
    step = got["gpt-tiny/fp32/op/step"]
    assert step.params["step_ms"] == p.step_ms
    assert "detail" not in got["gpt-tiny/fp32/op/gemm"].params
    # its units, the batch counted twice, the host's own time at batch 1
    assert {(g.op_class, g.unit) for g in p.groups} >= {("gemm", "linear"),
                                                         ("attention",
                                                          "scaled_dot_product_attention")}
    assert p.alt_batch == 2 and all(g.alt_batch_bytes is not None for g in p.groups)
    assert p.host_step_ms is not None and p.host_step_ms > 0
    # timed in rounds, each beside the same step with autocast switched on
    assert len(p.host_rounds_ms) == len(p.alt_host_rounds_ms) == 8
    assert min(p.host_rounds_ms) <= p.host_step_ms <= max(p.host_rounds_ms)
    assert all(ms > 0 for ms in p.alt_host_rounds_ms)
    # Without the option nothing of it is recorded.
    plain = op_profile_run("gpt-tiny", op_profile=False)
    assert not plain.op_profiles and not [m for m in plain.measurements if "/op/" in m.name]


def test_family_resize_builds_the_target_on_the_meta_device():
    from gpuaudit.model import load_run
    from gpuaudit.predict import load_profile
    from gpuaudit.predict.family import resize
    from gpuaudit.workloads.models import PRESETS
    from tests.support.predict import CPU_PROFILE

    prof = load_profile(load_run(CPU_PROFILE.read_text()), "gpt-tiny/bf16")
    r = resize(prof, 350e6)
    preset = PRESETS["gpt-350m"]
    assert r.target.name == "gpt-350m" and r.target.batch == preset.batch_size
    tokens = preset.batch_size * preset.seq_len
    # PaLM's 6N per token for the matmuls (the formula FlopCounterMode meets exactly).
    assert r.classes["gemm"].flops == 6 * preset.matmul_params * tokens
    assert r.ratios["attention"] == pytest.approx(
        (16 * 24 * 1024 * 1024**2) / (4 * 2 * 64 * 64**2))
    # The target's attention shape replaces the source's (its causal share and exponentials
    # follow it): batch 16, 16 heads of 64, 1024 tokens, 24 layers.
    causal = prof.classes["attention"].attention[0][0][5]
    assert r.classes["attention"].attention == (
        ((16, 16, 1024, 1024, 64, causal), 24.0, 4.0 * 16 * 16 * 1024**2 * 64 * 24),)
    # The optimizer scales with the parameters: all of them, not only the matmul weights.
    assert r.param_ratio > preset.matmul_params / PRESETS["gpt-tiny"].matmul_params * 0.9
    # fp32 gradients of every target parameter, in DDP's buckets.
    assert sum(b for b, _ in r.buckets) == pytest.approx(4 * prof.param_count * r.param_ratio)
    assert r.buckets[-1][1] == 1.0
    own = resize(prof, 1.3e9, batch=2, seq_len=512)
    assert own.target.name == "gpt-1.3b" and own.target.batch == 2 and own.target.seq_len == 512
    odd = resize(prof, 3e9)
    assert odd.target.name == "gpt-3b" and odd.target.kind == "gpt"
    assert abs(odd.target.matmul_params - 3e9) / 3e9 < 0.2


def test_a_profile_asks_kineto_to_detach_cupti_when_it_stops(monkeypatch):
    """Left attached, CUPTI slows every later launch of the process: the profiler's runs
    set TEARDOWN_CUPTI=1 unless the process chose already (torch's "0" for CUDA graphs)."""
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    view = kernelview.profile_kernels(torch, torch.device("cpu"),
                                      lambda: torch.ones(8).sum(), 1)
    assert view.busy_us >= 0
    assert os.environ["TEARDOWN_CUPTI"] == "1"
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")
    kernelview.profile_kernels(torch, torch.device("cpu"), lambda: torch.ones(8).sum(), 1)
    assert os.environ["TEARDOWN_CUPTI"] == "0"


def test_a_profile_keeps_torchs_no_cycles_warning_out_of_the_output_and_others_in(monkeypatch):
    """torch up to 2.12 warns on every profiler session that it "clears events at the end of
    each cycle", though ours have none: the op profile's sessions drop that warning (a
    profiler standing in for such a torch gives it) and let any other through."""
    import warnings

    import torch.profiler

    class NoisyProfile:
        def __init__(self, activities, **options):
            self.events = []

        def __enter__(self):
            warnings.warn("Warning: Profiler clears events at the end of each cycle.Only "
                          "events from the current cycle will be reported.", UserWarning,
                          stacklevel=2)
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(torch.profiler, "profile", NoisyProfile)
    monkeypatch.setattr(optrace, "exported", lambda prof: prof.events)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        kernelview.profile_kernels(torch, torch.device("cpu"), lambda: torch.ones(8).sum(), 1)
        assert not [w for w in seen if "clears events" in str(w.message)]
        with timing.profiled([]):
            warnings.warn("the model's own warning", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["the model's own warning"]


def test_a_gpu_profile_that_caught_no_kernels_is_taken_once_more(monkeypatch):
    """On torch 2.11 a GPU profile started during an earlier profile's CUPTI teardown came
    back with CPU operators only: the recorded step (an H200 trace of the zoo's MLP) is
    profiled again when its first profile holds no device activity."""
    import gzip
    import json

    from gpuaudit.workloads import timing
    from tests.conftest import FIXTURES

    with gzip.open(FIXTURES / "predict" / "zoo" / "mlp-bf16-step.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    gpu = kernelview.DEVICE_CATS + kernelview.RUNTIME_CATS
    cpu_only = [e for e in events if e.get("cat") not in gpu]
    takes = [cpu_only, events]
    monkeypatch.setattr(timing, "is_cuda", lambda device: True)
    monkeypatch.setattr(kernelview, "_profiled_events", lambda *a: takes.pop(0))
    view = kernelview.profile_kernels(torch, torch.device("cpu"), lambda: None, 1)
    assert not takes and view.busy_us > 0
    assert view.busy_us == kernelview.parse_trace(events, 1).busy_us


def test_every_mode_is_timed_before_any_op_profile_is_taken():
    """A process that ran the profiler launches slower afterwards: `bench train
    --op-profile` times all its modes first, and each profile keeps its mode's timed step."""
    from gpuaudit.bench.context import Profile
    from gpuaudit.bench.runner import run_bench
    from gpuaudit.model import Machine
    from tests.conftest import load_fixture

    steps: list[str] = []
    run = run_bench(["train"], machine=Machine.model_validate(
        load_fixture("h200-1gpu")["machine"]), profile=Profile.STANDARD,
        options={"models": ["gpt-tiny"], "modes": ["fp32", "bf16"], "steps": 2,
                 "parts": ["modes"], "op_profile": True}, step=steps.append)
    order = [s.split()[0] + " " + s.split()[1] if s.startswith("op profile") else
             s.split()[0] for s in steps if s.startswith(("train gpt", "op profile"))]
    assert order == ["train", "train", "op profile", "op profile"], steps
    got = {m.name: m for m in run.measurements}
    assert [p.workload for p in run.op_profiles] == ["gpt-tiny/fp32", "gpt-tiny/bf16"]
    for p in run.op_profiles:
        assert p.step_ms == pytest.approx(got[f"{p.workload}/step_time"].value, rel=1e-3)


def test_what_an_op_profile_times_is_timed_before_any_kernel_profile(monkeypatch):
    """The host's time per step (batch 1), the phases and the units alone are timed before
    the kernel profile, the host's in the timing pass with the modes' steps: after a CUDA
    profile a batch-1 step took longer than a whole batch's before it (on an H200)."""
    from gpuaudit.bench.context import Profile
    from gpuaudit.bench.runner import run_bench
    from gpuaudit.model import Machine
    from gpuaudit.workloads import opcapture, train
    from tests.conftest import load_fixture

    calls: list[str] = []

    def logged(name, fn):
        def run(*a, **k):
            calls.append(name)
            return fn(*a, **k)
        return run

    monkeypatch.setattr(train, "host_time", logged("host", opcapture.host_time))
    monkeypatch.setattr(opcapture, "host_time", logged("host again", opcapture.host_time))
    for name in ("phase_times_ms", "time_units", "profile_kernels"):
        monkeypatch.setattr(opcapture, name, logged(name, getattr(opcapture, name)))
    run = run_bench(["train"], machine=Machine.model_validate(
        load_fixture("h200-1gpu")["machine"]), profile=Profile.STANDARD,
        options={"models": ["gpt-tiny"], "modes": ["fp32", "bf16"], "steps": 2,
                 "parts": ["modes"], "op_profile": True})
    assert calls == ["host", "host"] + ["phase_times_ms", "time_units", "profile_kernels"] * 2
    assert all(p.host_step_ms and p.host_step_ms > 0 for p in run.op_profiles)


def test_time_in_units_without_a_rule_is_named_with_why():
    # an aten family without a rule (an FFT) and a custom op's own kernel (no aten under it)
    def op(name, ts, dur=20):
        return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "tid": 1,
                "args": {}}

    def launch(corr, ts):
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts,
                "dur": 2, "tid": 1, "args": {"correlation": corr}}

    def kernel(corr, name, ts, dur):
        return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur,
                "args": {"correlation": corr}}

    events = [op("aten::fft_rfft", 0), launch(1, 5), op("mylib::fused_gelu", 30), launch(2, 35),
              kernel(1, "regular_fft_factor", 10, 30), kernel(2, "fused_gelu_kernel", 50, 12)]
    t = kernelview.parse_trace(events, steps=1)
    assert dict(t.group_us) == {("unknown", "fft_rfft"): 30.0,
                                ("unknown", "mylib::fused_gelu"): 12.0}
    assert dict(t.unknown) == {("fft_rfft", "an aten operator without a rule"): 30.0,
                               ("mylib::fused_gelu", "an operator outside aten"): 12.0}
    # on a CPU, the operators' own time the same way
    cpu = kernelview.cpu_view([op("aten::fft_rfft", 0, 30), op("aten::add", 40, 5)], steps=1)
    assert dict(cpu.unknown) == {("fft_rfft", "an aten operator without a rule"): 30.0}
    # a compiled graph's C++ kernels run nameless in its own frame, between its extern calls
    # (an mm): that time is unknown, where it was left out of every class
    graph = [{**op("## Call CompiledFxGraph fabc ##", 0, 50), "cat": "user_annotation"},
             op("aten::mm", 10, 20), op("aten::add", 60, 5)]
    cpu = kernelview.cpu_view(graph, steps=1)
    assert dict(cpu.group_us) == {("unknown", "compiled"): 30.0, ("gemm", "mm"): 20.0,
                                  ("elementwise", "add"): 5.0}
    assert list(cpu.unknown) == [("compiled", "a compiled region's own code (inductor's "
                                              "kernels have no names on the CPU)")]


def test_a_custom_op_is_one_unit_with_its_aten_operators_and_its_backward():
    # torchvision's roi_align as torch.profiler records it (made up, the nesting of a real
    # CPU trace): the op zeroes its output through aten, runs its own kernel, and its
    # backward (its own op, under the autograd node of the forward's sequence number)
    # zeroes the input's gradient through aten and scatters into it with its own kernel
    def op(name, ts, dur, tid=1, **args):
        return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "tid": tid,
                "args": args}

    def launch(corr, ts, tid=1):
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts,
                "dur": 2, "tid": tid, "args": {"correlation": corr}}

    def kernel(corr, name, ts, dur):
        return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur,
                "args": {"correlation": corr}}

    events = [
        op("torchvision::roi_align", 0, 100, **{"Sequence number": 9}),
        op("GeneratedBackwardFor_torchvision_roi_align_default", 2, 96),
        op("aten::new_zeros", 4, 20, **{"Sequence number": 9}), launch(1, 10),
        launch(2, 40),
        op("autograd::engine::evaluate_function: GeneratedBackwardFor_torchvision_roi_align"
           "_defaultBackward", 200, 100, tid=2, **{"Sequence number": 9}),
        op("torchvision::_roi_align_backward", 202, 96, tid=2),
        op("aten::zeros", 204, 20, tid=2), launch(3, 210, tid=2), launch(4, 240, tid=2),
        kernel(1, "vectorized_elementwise_kernel", 300, 5),
        kernel(2, "RoIAlignForward", 310, 30),
        kernel(3, "vectorized_elementwise_kernel", 350, 15),
        kernel(4, "RoIAlignBackward", 370, 50),
    ]
    t = kernelview.parse_trace(events, steps=1)
    assert dict(t.group_us) == {("unknown", "torchvision::roi_align"): 100.0}
    assert dict(t.unknown) == {("torchvision::roi_align", "an operator outside aten"): 100.0}
    # on a CPU: the loops run in the ops' own frames (the autograd wrapper's in the forward)
    cpu = kernelview.cpu_view([e for e in events if e["cat"] == "cpu_op"], steps=1)
    assert dict(cpu.group_us) == {("unknown", "torchvision::roi_align"): pytest.approx(196.0)}


def test_the_vits_cudnn_attention_read_causal_by_mistake_moves_none_of_its_cases(monkeypatch):
    """ViT-B/16's bf16 step on the H100 (the 18th recording) marked its 197-token attention
    causal: the only kept source past 128 tokens with the flag wrong. Read unmasked, its
    precision and batch cases come out the same: a change moves attention by ratios the causal
    share cancels from."""
    from gpuaudit.predict import Change, attention, load_profile, predict
    from gpuaudit.specs.catalog import load_catalog
    from tests.support.predict import kept_h100

    run, rates = kept_h100("eighteenth", "vit")
    prof = load_profile(run, "vit-b16/bf16")
    assert {a.causal for c in prof.record.classes for a in c.attention} == {True}
    changes = [Change(precision="fp32"), Change(precision="tf32"), Change(batch=64),
               Change(batch=256)]
    specs = load_catalog()
    wrong = [predict(prof, rates, c, specs).step_ms for c in changes]
    share = attention.causal_share
    monkeypatch.setattr(attention, "causal_share", lambda t, s, causal: share(t, s, False))
    assert attention.causal_share(197, 197, True) == 1.0
    assert [predict(prof, rates, c, specs).step_ms for c in changes] == \
        pytest.approx(wrong, rel=1e-6)
