"""Batch norm in the op profile (`workloads.norms`): its kernels recognized by name, their own
time kept in the elementwise class's detail from a canned trace, its layers' shapes from the
dispatch view, and those layers timed alone in both precision families on the CPU (bounded by
a budget), through `bench train --op-profile`."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from gpuaudit.workloads import norms, ops, timing  # noqa: E402

# Kernel names: cuDNN's as the H200 recordings of 2026-12-01 hold them; PyTorch's own as its
# CUDA sources name them (aten/src/ATen/native/cuda/Normalization.cuh, Normalization.cu).
CUDNN_FW = "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>"
CUDNN_BW = "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>"
NATIVE = [
    "void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, c10::BFloat16,"
    " float, float, int>(at::GenericPackedTensorAccessor<c10::BFloat16 const, 3>)",
    "void at::native::batch_norm_transform_input_kernel<c10::BFloat16, float, float, int>",
    "void at::native::batch_norm_backward_kernel<c10::BFloat16, float, float, int>",
    "void at::native::batch_norm_backward_reduce_channels_last_kernel<4, float, float>",
    "void at::native::batch_norm_backward_elemt_kernel<c10::BFloat16, float, float, int>",
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
    "batch_norm_update_stats_and_invert(at::Tensor const&)::{lambda()#1}>(int)",
]


@pytest.mark.parametrize("name", [CUDNN_FW, CUDNN_BW, "void cudnn::bn_bw_1C11_singleread",
                                  *NATIVE])
def test_batch_norm_kernels_are_elementwise_and_batch_norms(name):
    assert norms.is_norm_kernel(name) and ops.kernel_class(name) == "elementwise"


@pytest.mark.parametrize("name", [
    "triton_red_fused__native_batch_norm_legit_functional_add_relu_18",  # fused: not its own
    "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>",
    "sm90_xmma_fprop_implicit_gemm_bf16",
])
def test_other_kernels_are_not_batch_norms(name):
    assert not norms.is_norm_kernel(name)


def test_short_names_keep_what_makes_a_kernel_batch_norms():
    assert norms.norm_kernel_name(CUDNN_FW) == "cudnn::bn_fw_tr_1C11_kernel_NCHW"
    assert norms.norm_kernel_name(NATIVE[0]) == \
        "at::native::batch_norm_collect_statistics_kernel"
    assert norms.norm_kernel_name(NATIVE[-1]) == \
        "vectorized_elementwise_kernel[batch_norm_update_stats_and_invert]"


def _canned_profile() -> ops.OpProfile:
    # Two profiled steps: cuDNN's forward and backward on a 64-channel layer (grid = C), a
    # PyTorch kernel, and kernels that are not batch norm's.
    events = [
        {"ph": "X", "cat": "kernel", "name": CUDNN_FW, "ts": 0, "dur": 300,
         "args": {"grid": [64, 1, 1]}},
        {"ph": "X", "cat": "kernel", "name": CUDNN_BW, "ts": 400, "dur": 500,
         "args": {"grid": [64, 1, 1]}},
        {"ph": "X", "cat": "kernel", "name": CUDNN_FW, "ts": 1000, "dur": 100,
         "args": {"grid": [256, 1, 1]}},
        {"ph": "X", "cat": "kernel", "name": NATIVE[-1], "ts": 1200, "dur": 10,
         "args": {"grid": [1, 1, 1]}},
        {"ph": "X", "cat": "kernel", "name": CUDNN_FW, "ts": 2000, "dur": 300,
         "args": {"grid": [64, 1, 1]}},
        {"ph": "X", "cat": "kernel", "name": "triton_poi_fused__native_batch_norm_relu_3",
         "ts": 2400, "dur": 70},
        {"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel<4, AddFunctor>",
         "ts": 2500, "dur": 40},
    ]
    kernels = ops.parse_trace(events, steps=2)
    tally = ops.OpTally()
    a, b = ((8, 64, 56, 56), "contiguous", "float32", "float32"), \
        ((8, 256, 14, 14), "channels_last", "float32", "float32")
    tally.norms[a] = [2, 2 * 12_845_056]
    tally.norms[b] = [1, 3_211_776]
    timed = [[[8, 64, 56, 56], "contiguous", "fp32", "float32", "float32", 2, 0.5],
             [[8, 64, 56, 56], "contiguous", "bf16", "bfloat16", "float32", 2, 0.7]]
    return ops.OpProfile(precision="fp32", tally=tally, kernels=kernels, phases_ms={},
                         buckets=[], grad_bytes=0, params=0, norm_timed=timed)


def test_the_trace_keeps_batch_norms_own_kernel_time():
    k = _canned_profile().kernels
    assert k.per_step_ms("elementwise") == pytest.approx((300 + 500 + 100 + 10 + 300 + 70
                                                         + 40) / 2 / 1e3)
    assert dict(k.norm_kernels) == {
        ("cudnn::bn_fw_tr_1C11_kernel_NCHW", 64): [2, 600.0],
        ("cudnn::bn_bw_1C11_kernel_new", 64): [1, 500.0],
        ("cudnn::bn_fw_tr_1C11_kernel_NCHW", 256): [1, 100.0],
        ("vectorized_elementwise_kernel[batch_norm_update_stats_and_invert]", 1): [1, 10.0],
    }


def test_the_elementwise_detail_names_batch_norms_kernels_shapes_and_timings():
    prof = _canned_profile()
    detail = json.loads(ops.class_detail(prof, "elementwise"))["batch_norm"]
    # (600 + 500 + 100 + 10) µs over 2 steps; the fused triton kernel is not batch norm's own.
    assert detail["us_per_step"] == 605.0 and detail["source"] == "cuda kernels"
    assert detail["kernels"] == [
        ["cudnn::bn_fw_tr_1C11_kernel_NCHW", 64, 1.0, 300.0],
        ["cudnn::bn_bw_1C11_kernel_new", 64, 0.5, 250.0],
        ["cudnn::bn_fw_tr_1C11_kernel_NCHW", 256, 0.5, 50.0],
        ["vectorized_elementwise_kernel[batch_norm_update_stats_and_invert]", 1, 0.5, 5.0],
    ]
    assert detail["shapes"] == [[[8, 64, 56, 56], "contiguous", "float32", "float32", 2,
                                 25_690_112],
                                [[8, 256, 14, 14], "channels_last", "float32", "float32", 1,
                                 3_211_776]]
    assert detail["forward_bytes"] == 25_690_112 + 3_211_776
    assert detail["timed"] == prof.norm_timed
    assert detail["timed_traffic_share"] == round(25_690_112 / (25_690_112 + 3_211_776), 4)
    assert "not_timed" not in detail
    # A step without batch norm has no entry; other classes never do.
    assert "batch_norm" not in json.loads(ops.class_detail(prof, "gemm"))
    prof.tally.norms.clear()
    prof.kernels.norm_kernels.clear()
    assert "batch_norm" not in json.loads(ops.class_detail(prof, "elementwise"))


def _net(channels_last: bool):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                              torch.nn.ReLU(), torch.nn.Conv2d(8, 16, 3, stride=2, padding=1),
                              torch.nn.BatchNorm2d(16))
    x = torch.randn(4, 3, 8, 8)
    if channels_last:
        net, x = net.to(memory_format=torch.channels_last), \
            x.contiguous(memory_format=torch.channels_last)
    return net, x


@pytest.mark.parametrize("channels_last", [False, True])
def test_the_dispatch_view_tallies_the_layers_shapes_format_and_dtypes(channels_last):
    net, x = _net(channels_last)
    fmt = "channels_last" if channels_last else "contiguous"

    def step(amp=None):
        def run():
            with torch.autocast("cpu", dtype=amp, enabled=amp is not None):
                loss = net(x).float().sum()
            loss.backward()
        return run

    fp32 = ops.count_ops(step())
    bf16 = ops.count_ops(step(torch.bfloat16))
    # Forward bytes: input read, output written (same size); weight, bias, running mean and
    # variance read (4 × C fp32), the saved mean and inverse std written (2 × C fp32). (The
    # running statistics are updated in place, but native_batch_norm's schema does not mark
    # them written, and the tally counts what the schema says.)
    def nbytes(n, c, hw, size):
        return 2 * n * c * hw * size + (4 + 2) * c * 4
    assert dict(fp32.norms) == {
        ((4, 8, 8, 8), fmt, "float32", "float32"): [1, nbytes(4, 8, 64, 4)],
        ((4, 16, 4, 4), fmt, "float32", "float32"): [1, nbytes(4, 16, 16, 4)]}
    # Under bf16 autocast the convolutions' bf16 outputs reach batch norm as they are; its
    # weights stay fp32.
    assert dict(bf16.norms) == {
        ((4, 8, 8, 8), fmt, "bfloat16", "float32"): [1, nbytes(4, 8, 64, 2)],
        ((4, 16, 4, 4), fmt, "bfloat16", "float32"): [1, nbytes(4, 16, 16, 2)]}
    assert sum(v[1] for v in fp32.norms.values()) == sum(
        b for op, b in fp32.op_bytes.items() if norms.is_norm_forward(op))


def test_the_layers_are_timed_alone_in_both_families_within_the_budget():
    net, x = _net(False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        alt = ops.count_ops(lambda: net(x).float().sum().backward())
    own = ops.count_ops(lambda: net(x).sum().backward())
    rows = norms.time_norms(torch, torch.device("cpu"), {"fp32": dict(own.norms),
                                                         "bf16": dict(alt.norms)},
                            shapes=1, budget_ms=5.0)
    # The biggest shape only, each family with the dtypes its own step fed it.
    assert [r[:6] for r in rows] == [[[4, 8, 8, 8], "contiguous", "fp32", "float32", "float32",
                                      1],
                                     [[4, 8, 8, 8], "contiguous", "bf16", "bfloat16", "float32",
                                      1]]
    assert all(r[6] > 0 for r in rows)


@pytest.mark.parametrize(("budget_s", "calls"), [(0.0, 2 + 3), (1e9, 2 + 25)])
def test_the_timing_takes_two_warm_ups_and_3_to_25_calls(budget_s, calls):
    n = []
    timing.median_call_ms(torch, torch.device("cpu"), lambda: n.append(1), budget_s)
    assert len(n) == calls


def test_bench_train_op_profile_records_batch_norm_and_predict_uses_its_timing():
    from gpuaudit.model import load_run
    from gpuaudit.predict import Change, load_profile, machine_rates, predict
    from gpuaudit.specs.catalog import load_catalog

    from .conftest import FIXTURES
    from .test_predict_capture import op_profile_run

    run = op_profile_run("resnet-tiny")
    got = {m.name: m for m in run.measurements}
    detail = json.loads(got["resnet-tiny/fp32/op/elementwise"].params["detail"])["batch_norm"]
    assert detail["source"] == "cpu operators (self time)" and detail["us_per_step"] > 0
    assert any("native_batch_norm" in r[0] for r in detail["kernels"])
    shapes = detail["shapes"]
    assert sum(r[4] for r in shapes) == 17  # resnet-tiny's batch-norm layers
    assert shapes[0][0][0] == 8 and shapes[0][1] == "contiguous"
    timed = {(tuple(r[0]), r[2]): r for r in detail["timed"]}
    top = [tuple(r[0]) for r in shapes[:norms.NORM_SHAPES]]
    assert set(timed) == {(s, p) for s in top for p in ("fp32", "bf16")}
    assert {timed[(s, "bf16")][3] for s in top} == {"bfloat16"}
    covered = sum(r[5] for r in shapes[:norms.NORM_SHAPES])
    assert detail["timed_traffic_share"] == round(covered / detail["forward_bytes"], 4)
    # predict reads it back and moves batch norm's time by the timed ratio.
    specs = load_catalog()
    rates = machine_rates(load_run((FIXTURES / "predict" / "h200-2gpu-bench-quick.json")
                                   .read_text()), specs)
    prof = load_profile(run, "resnet-tiny/fp32")
    norm = prof.classes["elementwise"].norm
    assert norm is not None and norm.ms == pytest.approx(detail["us_per_step"] / 1e3)
    p = predict(prof, rates, Change(precision="bf16"), specs)
    elem = next(c for c in p.classes if c.op_class == "elementwise")
    assert "timed alone in both precisions" in elem.basis
