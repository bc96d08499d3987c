"""Profiler trace analysis: HTA's definitions on a trace whose answers are worked out by hand,
kernel-name classes (Hopper's included), and a real torch.profiler trace made on the CPU."""

from __future__ import annotations

import gzip
import json
import time

import pytest

from gpuaudit.diagnose import diagnose
from gpuaudit.diagnose.evidence import Signals
from gpuaudit.diagnose.kernels import (
    KernelType,
    TensorCore,
    kernel_type,
    memcpy_kind,
    tensor_core_use,
)
from gpuaudit.diagnose.kineto import analyse, read_trace
from gpuaudit.errors import BadInputError
from tests.support.kineto import event, gpu_event, hand_trace, launch_event


def test_hta_temporal_breakdown_by_hand():
    t = analyse(hand_trace())
    (d,) = t.devices
    assert (d.span_us, d.busy_us, d.idle_us) == (1000, 750, 250)
    assert d.compute_us == 550  # nvjet 200 + xmma 100 + elementwise 50 + sgemm 200
    assert d.non_compute_us == 200  # the all-reduce not under compute (100) + the copy (100)


def test_hta_idle_breakdown_by_hand():
    (d,) = analyse(hand_trace()).devices
    # 310: launched before 300 and 10 µs < 30 → kernel wait; 500: launched at 450 after 410
    # → host wait 90; 700: launched at 520 before 550, 150 µs → other; the copy: launched at
    # 950 after 900 → host wait 100.
    assert (d.host_wait_us, d.kernel_wait_us, d.other_wait_us) == (190, 10, 150)


def test_overlap_tensor_cores_copies_syncs_loader_by_hand():
    t = analyse(hand_trace())
    assert t.steps == 2 and t.step_time_us == 1000 and t.window_us == 2000
    assert t.comm_time_us == 200 and t.comm_overlap_share == 0.5  # 700–800 under the sgemm
    assert t.matmul_time_us == {"tensor cores": 200, "no tensor cores (fp32)": 300}
    assert t.tensor_core_share == pytest.approx(0.4)
    assert t.memcpy_time_us == {"HtoD pageable": 100} and t.memcpy_bytes["HtoD pageable"] == 10**6
    assert (t.sync_calls, t.sync_time_us, t.item_calls) == (1, 300, 1)
    assert t.loader_share == pytest.approx(0.1)
    assert t.kernels == 5 and t.kernel_time_us == 750 and t.short_kernels == 0
    assert t.type_time_us == {"computation": 550, "communication": 200}


def test_comm_bound_from_a_trace_with_exposed_allreduce():
    doc = hand_trace()
    doc["traceEvents"].append(gpu_event("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 1100, 600, 9,
                                   stream=20))
    t = analyse(doc)
    (d,) = t.devices
    findings, changes = diagnose(Signals(trace=t))
    codes = [f.code for f in findings]
    assert "comm-bound" in codes
    f = findings[codes.index("comm-bound")]
    comm, overlap = 800 / d.span_us, 100 / 800
    assert f.share == pytest.approx(comm * (1 - overlap), abs=0.001)
    assert any("no_sync" in (c.settings or "") for c in changes)


def test_launch_bound_from_short_kernels():
    ev = [event("ProfilerStep#1", "user_annotation", 0, 2000)]
    ts = 0.0
    for i in range(100):  # 2 µs kernels, each launched 15 µs after the last ended
        _launch_at = ts + 10
        ev += [launch_event(_launch_at, i, dur=6),
               gpu_event("void add_kernel", _launch_at + 8, 2, i)]
        ts = _launch_at + 8
    t = analyse({"traceEvents": ev})
    assert t.short_kernels == t.launched_kernels == 100
    findings, _ = diagnose(Signals(trace=t))
    assert findings[0].code == "launch-bound" and findings[0].confidence == "high"


@pytest.mark.parametrize(("name", "kind"), [
    ("nvjet_tst_128x256_64x6_2x1_v_bz_TNT", TensorCore.YES),  # Hopper cuBLASLt bf16
    ("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT", TensorCore.YES),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", TensorCore.YES),
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize128x128x32", TensorCore.YES),
    ("sm90_xmma_gemm_f32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1", TensorCore.NO),
    ("ampere_sgemm_128x64_nn", TensorCore.NO),
    ("volta_sgemm_128x32_tn", TensorCore.NO),
    ("cutlass_80_tensorop_s1688gemm_bf16_128x256_32x3_nn_align8", TensorCore.YES),
    ("volta_h884gemm_64x64_ldg8_nn", TensorCore.YES),
    ("flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128>>", TensorCore.YES),
    ("implicit_convolve_sgemm<float, float, 1024, 5, 5>", TensorCore.NO),
    ("void at::native::vectorized_elementwise_kernel<4>", TensorCore.NOT_MATMUL),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", TensorCore.NOT_MATMUL),
])
def test_tensor_core_classes(name, kind):
    assert tensor_core_use(name) is kind


def test_hta_kernel_types_in_hta_order():
    assert kernel_type("ncclDevKernel_AllReduce") is KernelType.COMMUNICATION
    assert kernel_type("void ncclKernel_x") is KernelType.COMMUNICATION
    assert kernel_type("Memcpy HtoD (Pinned -> Device)") is KernelType.MEMORY
    assert kernel_type("Memset (Device)") is KernelType.MEMORY
    assert kernel_type("nvjet_tst_64x8") is KernelType.COMPUTATION
    assert kernel_type("cudaStreamSynchronize") is KernelType.OTHER


def test_memcpy_kinds():
    assert memcpy_kind("Memcpy HtoD (Pageable -> Device)") == ("HtoD", True)
    assert memcpy_kind("Memcpy DtoH (Device -> Pinned)") == ("DtoH", False)
    assert memcpy_kind("Memcpy DtoD (Device -> Device)") == ("DtoD", False)
    assert memcpy_kind("nvjet_x") is None


def test_read_trace_gz_and_bad_files(tmp_path):
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(json.dumps(hand_trace()).encode()))
    assert analyse(read_trace(p)).steps == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(BadInputError, match=r"profiler trace .* is not valid JSON"):
        read_trace(bad)
    other = tmp_path / "other.json"
    other.write_text('{"frames": []}')
    with pytest.raises(BadInputError, match="not a PyTorch profiler trace"):
        read_trace(other)


def test_real_cpu_profiler_trace(tmp_path):
    """A real torch.profiler capture on the CPU: a DataLoader whose samples take 5 ms, a small
    model, `.item()` every step. Steps, item calls and the loader's share come out of it."""
    torch = pytest.importorskip("torch")

    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 1000

        def __getitem__(self, i):
            time.sleep(0.005)
            return torch.randn(32)

    loader = iter(torch.utils.data.DataLoader(Slow(), batch_size=4, num_workers=0))
    model = torch.nn.Linear(32, 32)
    sched = torch.profiler.schedule(wait=0, warmup=1, active=4, repeat=1)
    path = tmp_path / "trace.json"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=sched,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as p:
        for _ in range(6):
            x = next(loader)
            model(x).sum().item()
            p.step()
    t = analyse(read_trace(path))
    assert t.steps == 4 and not t.cuda and t.devices == ()
    assert t.item_calls == 4
    assert t.loader_share > 0.5  # 4 × 5 ms of sleeping per step, a tiny model
    assert t.matmul_ops == 4 and t.median_matmul_op_us is not None
    codes = [f.code for f in diagnose(Signals(trace=t))[0]]
    assert codes[0] == "input-bound" and "host-syncs" in codes


def test_the_optimizers_own_item_is_not_a_host_sync():
    doc = {"traceEvents": [
        event("ProfilerStep#1", "user_annotation", 0, 100),
        event("Optimizer.step#AdamW.step", "user_annotation", 50, 40),
        event("aten::item", "cpu_op", 60, 2),  # Adam reading its CPU step counter
    ]}
    assert analyse(doc).item_calls == 0
    doc["traceEvents"].append(event("aten::item", "cpu_op", 20, 2))  # the user's loss.item()
    assert analyse(doc).item_calls == 1


def _profiled_steps(tmp_path, model, x, name):
    """Three steps of a plain training loop under torch.profiler with input shapes recorded,
    as the doctor's bootstrap profiles them."""
    torch = pytest.importorskip("torch")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    path = tmp_path / f"{name}.json"
    sched = torch.profiler.schedule(wait=0, warmup=1, active=3, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=sched, record_shapes=True,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(5):
            opt.zero_grad()
            model(x).float().pow(2).mean().backward()
            opt.step()
            prof.step()
    return analyse(read_trace(path))


def test_first_layer_rows_from_recorded_shapes(tmp_path):
    """The batch is what the step's first layer received: a convolution's samples, a linear
    layer's rows, an embedding's looked-up positions (samples × tokens)."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    conv = _profiled_steps(tmp_path, nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(),
                                                   nn.Conv2d(8, 4, 3)),
                           torch.randn(2, 3, 16, 16), "conv")
    assert (conv.steps, conv.batch, conv.batch_op) == (3, 2, "aten::conv2d")
    mlp = _profiled_steps(tmp_path, nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 4)),
                          torch.randn(32, 16), "mlp")
    assert (mlp.batch, mlp.batch_op) == (32, "aten::linear")
    seq = _profiled_steps(tmp_path, nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 4)),
                          torch.randn(3, 7, 16), "seq")
    assert seq.batch == 21  # 3 sequences × 7 positions
    emb = _profiled_steps(tmp_path, nn.Sequential(nn.Embedding(50, 8), nn.Linear(8, 2)),
                          torch.randint(0, 50, (4, 5)), "emb")
    assert (emb.batch, emb.batch_op) == (20, "aten::embedding")


def test_no_batch_without_recorded_shapes():
    """A trace made without record_shapes (or shapes that are not lists of sizes) claims no
    batch rather than guessing one."""
    step = event("ProfilerStep#1", "user_annotation", 0, 100)
    bare = analyse({"traceEvents": [step, event("aten::conv2d", "cpu_op", 10, 5)]})
    assert bare.batch is None and bare.batch_op is None
    odd = analyse({"traceEvents": [step, event("aten::linear", "cpu_op", 10, 5,
                                               **{"Input Dims": [[], [4, 4]]})]})
    assert odd.batch is None
    ok = analyse({"traceEvents": [step, event("aten::addmm", "cpu_op", 10, 5,
                                              **{"Input Dims": [[4], [6, 8], [8, 4]]})]})
    assert (ok.batch, ok.batch_op) == (6, "aten::addmm")  # addmm's rows are its 2nd input's
