"""The units of a step timed alone (`workloads.units`), through the calls the dispatch view
records (`workloads.calls`): each distinct call of a matmul-bound or normalization unit, with
its shapes, strides and the dtypes each precision family's own step fed it, replayed forward +
backward in each precision and at other batch sizes within a budget; batch norm and
convolutions among them (the recordings before timed those two layer kinds alone: their tests
are in test_predict_capture_convs.py and test_predict_batch_norm.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpuaudit import kernelnames as kn  # noqa: E402
from gpuaudit.workloads import timing  # noqa: E402
from gpuaudit.workloads.calls import Call, TensorSpec, match  # noqa: E402
from gpuaudit.workloads.opclass import kernel_class  # noqa: E402
from gpuaudit.workloads.tally import count_ops  # noqa: E402
from gpuaudit.workloads.units import _build, _rnn, distinct, ranks, time_units  # noqa: E402

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
]


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("name", [CUDNN_FW, CUDNN_BW, "void cudnn::bn_bw_1C11_singleread",
                                  *NATIVE])
def test_batch_norm_kernels_say_so_and_are_no_convolution(name):
    # the second witness: a batch-norm kernel under its unit (class norm) contradicts nothing,
    # and where no unit holds it its name classes it memory-bound, not a convolution
    assert kn.is_batch_norm(name) and kernel_class(name) == "elementwise"


def _net(channels_last: bool = False):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, bias=False),
                              torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 16, 3, stride=2, padding=1),
                              torch.nn.BatchNorm2d(16))
    x = torch.randn(4, 3, 8, 8)
    if channels_last:
        net, x = net.to(memory_format=torch.channels_last), \
            x.contiguous(memory_format=torch.channels_last)
    return net, x


def _tally(net, x, amp=None):
    def step():
        with torch.autocast("cpu", dtype=amp, enabled=amp is not None):
            loss = net(x).float().sum()
        loss.backward()
    return count_ops(step, record_calls=True)


@pytest.mark.parametrize("channels_last", [False, True])
def test_the_calls_keep_each_layer_with_its_shapes_layout_and_family_dtypes(channels_last):
    net, x = _net(channels_last)
    fp32, bf16 = _tally(net, x), _tally(net, x, torch.bfloat16)
    names = [(c.name, c.op_class) for c in fp32.calls]
    assert names == [("conv2d", "conv"), ("batch_norm", "norm"), ("conv2d", "conv"),
                     ("batch_norm", "norm")]
    first, norm = fp32.calls[0].tensors(), fp32.calls[1].tensors()
    # the image needs no gradient, the weights do; strides say the memory format
    assert (first[0].shape, first[0].requires_grad, first[1].requires_grad) == \
        ((4, 3, 8, 8), False, True)
    assert (norm[0].stride == (512, 1, 64, 8)) == channels_last
    # under bf16 autocast the convolution's bf16 output reaches batch norm as it is; its
    # weights stay fp32
    assert [t.dtype for t in bf16.calls[1].tensors()][:3] == ["bfloat16", "float32", "float32"]
    # forward + backward FLOPs of each convolution (torch's formula: 2 × output elements ×
    # input channels × kernel area forward; the weight gradient again, and the input's where
    # it needs one)
    fwd = 2 * (4 * 8 * 8 * 8) * 3 * 9
    assert fp32.calls[0].flops == 2 * fwd
    assert fp32.group_calls[("conv", "conv2d")] == 2 and fp32.group_flops[("norm",
                                                                            "batch_norm")] == 0


def test_the_units_are_timed_alone_in_both_families_and_at_other_batches():
    net, x = _net()
    own, alt = _tally(net, x), _tally(net, x, torch.bfloat16)
    half = _tally(net, x[:2])
    notes: list[str] = []
    timed = time_units(torch, torch.device("cpu"), "fp32", own.calls,
                       {"bfloat16": alt.calls}, half.calls, 4, 2, budget_s=5.0, notes=notes)
    assert notes == []  # every setting reached every unit: nothing to say
    assert [(u.op_class, u.unit) for u in timed][:1] == [("conv", "conv2d")]
    for u in timed:
        settings = {(t.precision, t.batch_scale, t.width_scale) for t in u.times}
        # on a CPU: fp32, bf16 (no tf32), and the batch × 0.5 and × 2 in fp32; the
        # convolutions at twice their channels too (the first from the image's 3 to 16)
        wider = {("fp32", 1.0, 2.0)} if u.op_class == "conv" else set()
        assert settings == {("fp32", 1.0, 1.0), ("bf16", 1.0, 1.0), ("fp32", 0.5, 1.0),
                            ("fp32", 2.0, 1.0)} | wider
        assert all(t.ms > 0 for t in u.times) and u.count == 1
        assert "fp32[4," in u.signature


def test_the_budget_is_shared_out_among_the_settings_the_recorded_precision_first(
        monkeypatch):
    """Each ratio's denominator is the recorded precision's own time: it is timed first, and a
    unit it did not reach is timed in nothing else. Each setting has its share of the budget:
    a slow one (a bf16 step's convolutions in fp32, cuDNN autotuning) leaves the others
    theirs."""
    from gpuaudit.workloads import units

    net, x = _net()
    alt, own = _tally(net, x), _tally(net, x, torch.bfloat16)
    now = [0.0]

    def one_second(*_a, **_k):  # every timing takes a second of a clock that only it moves
        now[0] += 1.0
        return 1.0
    monkeypatch.setattr(units.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(units, "_call_ms", one_second)
    monkeypatch.setattr(units, "widened", lambda _c: None)  # the precisions alone
    notes: list[str] = []
    timed = time_units(torch, torch.device("cpu"), "bf16", own.calls,
                       {"float32": alt.calls}, None, 4, None, budget_s=3.0, notes=notes)
    settings = [[t.precision for t in u.times] for u in timed]
    # 3 s for two settings (bf16, fp32 on a CPU): bf16 until 1.5 s, fp32 until 3 s; each
    # timing a second: two units in each, the same two
    assert settings == [["bf16", "fp32"], ["bf16", "fp32"], [], []]
    # and the record says which settings ran out, and what a timing took there
    assert notes == ["units timed alone in 3 s, settings cut short: bf16 2 of 4 (1.00 s a "
                     "timing); fp32 2 of 4 (1.00 s a timing)"]


def test_without_a_given_budget_the_settings_may_run_past_it_up_to_the_wall_cap(monkeypatch):
    """A timing's own cost (cuDNN's autotuning of a new shape) can be many times what its
    samples take: the default budget sets each timing's samples, the wall cap how long the
    settings may take together."""
    from gpuaudit.workloads import units

    net, x = _net()
    alt, own = _tally(net, x), _tally(net, x, torch.bfloat16)
    now = [0.0]

    def one_second(*_a, **_k):
        now[0] += 1.0
        return 1.0
    monkeypatch.setattr(units.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(units, "_call_ms", one_second)
    monkeypatch.setitem(units.BUDGET_S, False, 2.0)
    monkeypatch.setitem(units.CAP_S, False, 6.0)
    monkeypatch.setattr(units, "widened", lambda _c: None)  # the precisions alone
    notes: list[str] = []
    timed = time_units(torch, torch.device("cpu"), "bf16", own.calls,
                       {"float32": alt.calls}, None, 4, None, notes=notes)
    # 2 s would have timed two units in bf16 (until 1 s), one in fp32 (until 2 s); 6 s times
    # all four in bf16 (until 3 s) and three in fp32 (until 6 s)
    assert [len(u.times) for u in timed] == [2, 2, 2, 1]
    assert notes == ["units timed alone in 6 s, settings cut short: fp32 3 of 4 (1.00 s a "
                     "timing)"]


def test_the_convolutions_are_timed_wider_last_and_a_budget_spent_before_says_so(
        monkeypatch):
    """The wider convolutions (`workloads.widen`) are the last setting, in the recorded
    precision, after the precisions and the batches (a size change is asked least often),
    with a share of the budget on top of theirs."""
    from gpuaudit.workloads import units

    net, x = _net()
    own, half = _tally(net, x), _tally(net, x[:2])
    now = [0.0]

    def timing(*_a, **_k):  # a second a timing; the wider ones (past 12 s) take seven
        now[0] += 7.0 if now[0] >= 12 else 1.0
        return 1.0
    monkeypatch.setattr(units.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(units, "_call_ms", timing)
    notes: list[str] = []
    # 15 s for fp32, bf16 (no family: nothing timed), × 0.5, × 2, until 3.75, 7.5, 11.25,
    # 15 s, and the wider ones until 18.75 s: every unit at every batch by 12 s, one
    # convolution of two wider by 19 s
    timed = time_units(torch, torch.device("cpu"), "fp32", own.calls, {}, half.calls, 4, 2,
                       budget_s=15.0, notes=notes)
    assert [[(t.batch_scale, t.width_scale) for t in u.times] for u in timed] == \
        [[(1.0, 1.0), (0.5, 1.0), (2.0, 1.0), (1.0, 2.0)]] + \
        [[(1.0, 1.0), (0.5, 1.0), (2.0, 1.0)]] * 3
    assert timed[0].op_class == "conv" and [u.op_class for u in timed].count("conv") == 2
    assert notes == ["units timed alone in 19 s, settings cut short: fp32 at ×2 the "
                     "channels 1 of 2 (7.00 s a timing)"]


def test_calls_of_two_tallies_line_up_by_name_and_rank():
    net, x = _net()
    own, half = _tally(net, x), _tally(net, x[:2])
    by = ranks(half.calls)
    for key, c in ranks(own.calls).items():
        assert by[key].name == c.name and by[key].tensors()[0].shape[0] == 2
    assert [n for _, n, _ in distinct(own.calls)] == [1, 1, 1, 1]


def test_a_unit_that_cannot_run_is_timed_in_nothing():
    net, x = _net()
    own = _tally(net, x)
    broken = own.calls[0]
    broken.func = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no kernel"))
    timed = time_units(torch, torch.device("cpu"), "fp32", [broken], {}, None, 4, None,
                       budget_s=1.0)
    assert len(timed) == 1 and timed[0].times == ()


@pytest.mark.parametrize(("budget_s", "calls"), [(0.0, 2 + 3), (1e9, 2 + 25)])
def test_the_timing_takes_two_warm_ups_and_3_to_25_calls(budget_s, calls):
    n = []
    timing.median_call_ms(torch, torch.device("cpu"), lambda: n.append(1), budget_s)
    assert len(n) == calls


def test_bench_train_records_the_units_and_predict_moves_them_by_their_timing():
    from gpuaudit.predict import Change, load_profile, predict
    from gpuaudit.specs.catalog import load_catalog
    from tests.support.predict import h200_rates, op_profile_run

    run = op_profile_run("resnet-tiny")
    (record,) = run.op_profiles
    groups = {(g.op_class, g.unit): g for g in record.groups}
    assert groups[("conv", "conv2d")].kernel_us > 0 and groups[("norm", "batch_norm")].calls == 17
    timed = {u.unit for u in record.timed if u.times}
    assert "conv2d" in timed
    specs = load_catalog()
    rates = h200_rates(specs)
    p = predict(load_profile(run, "resnet-tiny/fp32"), rates, Change(precision="bf16"), specs)
    conv = next(c for c in p.classes if c.op_class == "conv")
    assert "conv2d its units timed alone" in conv.basis or "timing alone" in conv.basis


def test_embedding_bags_are_timed_at_other_batches_their_offsets_continued(monkeypatch):
    """An embedding's backward sorts its lookups: its time follows the batch where the
    traffic counted (the tables' gradient) does not, so its calls are timed alone too; at
    another batch its lookups repeat and its bags' offsets go on from where they ended
    (repeated, they would start at 0 again: out of order, an error on a CPU, undefined on a
    GPU)."""
    from gpuaudit.workloads import units

    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(1000, 16, mode="sum")

    def tally(n):
        ids, offsets = torch.randint(0, 1000, (n * 4,)), torch.arange(0, n * 4, 4)
        return count_ops(lambda: bag(ids, offsets).sum().backward(), record_calls=True)

    own, half = tally(8), tally(4)
    (call,) = [c for c in own.calls if c.name == "embedding_bag"]
    assert call.op_class == "embedding"
    built = []
    real = units._offsets_continued

    def keep(t, c, args):
        out = real(t, c, args)
        built.append(out[2].tolist())
        return out
    monkeypatch.setattr(units, "_offsets_continued", keep)
    units.replay(torch, torch.device("cpu"), call, call, half.calls[0], 8, 4, 2.0, None)()
    assert built == [list(range(0, 64, 4))]
    timed = time_units(torch, torch.device("cpu"), "fp32", own.calls, {}, half.calls, 8, 4,
                       budget_s=2.0)
    (unit,) = [u for u in timed if u.unit == "embedding_bag"]
    assert {(t.precision, t.batch_scale) for t in unit.times} == {
        ("fp32", 1.0), ("fp32", 0.5), ("fp32", 2.0)}


def test_a_layers_gradient_is_replayed_in_the_memory_format_the_step_brought(monkeypatch):
    """A convolution whose output the step permutes to channels-last (ConvNeXt's stem, before
    its layer norm) gets its gradient channels-last though its output is not: the recorded
    call keeps the gradient's strides, and timed alone it is fed a gradient of that memory
    format, at other batches too. A gradient expanded from a sum (the layer norm's, the
    step's last) is not one to copy: the output's own format stands."""
    from gpuaudit.workloads.units import _grad_like, replay

    torch.manual_seed(0)
    conv, norm = torch.nn.Conv2d(3, 8, 4, 4), torch.nn.LayerNorm(8)
    x = torch.randn(2, 3, 16, 16)

    def step():
        norm(conv(x).permute(0, 2, 3, 1)).sum().backward()
    calls = count_ops(step, record_calls=True).calls
    c = next(c for c in calls if c.name == "conv2d")
    ln = next(c for c in calls if c.name == "layer_norm")
    assert c.grad_stride == (128, 1, 32, 8)  # [2, 8, 4, 4] channels-last; its output NCHW
    assert 0 in ln.grad_stride
    assert _grad_like(torch, torch.empty(6, 8, 4, 4), c.grad_stride).stride() == \
        (128, 1, 32, 8)
    assert _grad_like(torch, torch.empty(2, 4, 4, 8), ln.grad_stride).is_contiguous()
    assert _grad_like(torch, torch.empty(2, 8, 4, 4), None).is_contiguous()
    # the call replayed alone is fed it, and its weight's and bias's gradients come back
    fed, real = [], torch.autograd.grad
    monkeypatch.setattr(torch.autograd, "grad", lambda y, leaves, g, **k: (
        fed.append(g.stride()), real(y, leaves, g, **k))[1])
    grads = replay(torch, torch.device("cpu"), c, c, None, 2, 2, 1.0, None)()
    assert fed == [(128, 1, 32, 8)]
    assert [g.shape for g in grads if g is not None][-2:] == [(8, 3, 4, 4), (8,)]


def test_a_models_few_units_are_all_timed_and_many_by_their_launches_too():
    """A DLRM-like step: an embedding bag whose traffic outweighs four small linear layers
    (13 → 64, 64 → 32, 32 → 16, 16 → 1). With no more units than `MAX_UNITS` all are timed,
    the costliest first; past it, the costliest until `COVER` of their cost or the cap,
    where a layer costs at least its launches (`UNIT_FLOOR_S`): the smallest layers, a
    fraction of a microsecond of FLOPs each, still hold 10 µs a call."""
    from gpuaudit.workloads import units

    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(200_000, 64, mode="sum")
    mlp = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in
                              ((13, 64), (64, 32), (32, 16), (16, 1)))
    ids, offsets = torch.randint(0, 200_000, (4096 * 8,)), torch.arange(0, 4096 * 8, 8)
    dense = torch.randn(4096, 13)

    def step():
        x = dense
        for layer in mlp:
            x = layer(x)
        (bag(ids, offsets).sum() + x.sum()).backward()

    calls = count_ops(step, record_calls=True).calls
    got = units.choose(calls)
    assert [c.name for c, _ in got] == ["embedding_bag", "linear", "linear", "linear",
                                       "linear"]
    floor = [units._cost(c) for c, _ in got if c.name == "linear"]
    assert all(units.UNIT_FLOOR_S <= f < 1.5 * units.UNIT_FLOOR_S for f in floor), floor
    # past the cap: the costliest, at most the cap (the bag holds two thirds of the cost,
    # short of COVER), the cheapest layer left out
    assert [c.name for c, _ in units.choose(calls, max_units=2)] == ["embedding_bag",
                                                                    "linear"]
    assert units.choose(calls, max_units=4) == got[:4]
    assert min(floor) == units._cost(got[4][0])


def test_an_einsum_is_matched_to_its_unit_by_its_operands_past_the_equation():
    q = TensorSpec((2, 8, 128, 32), "float32", (32768, 4096, 32, 1), True)
    k = TensorSpec((2, 8, 128, 32), "float32", (32768, 4096, 32, 1), True)
    calls = [Call("einsum", None, ("bhid,bhjd->bhij", [q, k]), {}),
             Call("einsum", None, ("bhid,bhjd->bhij", [q, k]), {})]
    units = [("einsum", "attention", ((), (2, 8, 128, 32), (2, 8, 128, 32), ()), 7),
             ("einsum", "gemm", ((), (4, 4, 4), (4, 4, 4), ()), 8),
             ("einsum", "attention", ((), (2, 8, 128, 32), (2, 8, 128, 32), ()), 9)]
    found = match(calls, units)
    assert [(c.op_class, c.unit_key) for c in found.calls] == [("attention", 7),
                                                               ("attention", 9)]
    assert found.unmatched == 0


class _PackedLSTM(torch.nn.Module):
    """pack_padded_sequence into an LSTM with a projection, as speech and tagging code does."""

    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.LSTM(6, 16, 2, proj_size=4)

    def forward(self, x, lengths):
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
        return torch.nn.utils.rnn.pad_packed_sequence(self.rnn(packed)[0])[0]


def _lstm_calls(net, batch):
    torch.manual_seed(batch)
    x, lengths = torch.randn(10, batch, 6), torch.randint(3, 11, (batch,))
    lengths[0] = 10
    return count_ops(lambda: net(x, lengths).sum().backward(), record_calls=True).calls


def test_a_packed_lstm_with_a_projection_is_timed_alone_at_other_batches():
    net = _PackedLSTM()
    own, half = _lstm_calls(net, 8), _lstm_calls(net, 4)
    timed = time_units(torch, torch.device("cpu"), "fp32", own, {"float32": own}, half, 8, 4,
                       budget_s=2.0)
    lstm = next(u for u in timed if u.unit == "lstm")
    assert {(t.precision, t.batch_scale) for t in lstm.times} >= {
        ("fp32", 1.0), ("fp32", 0.5), ("fp32", 2.0)}
    # at ×2 the module has the recorded one's shapes, and each step runs twice the sequences
    call, alt = own[0], half[0]
    built = _build(torch, torch.device("cpu"), call.args, alt.args, call.args, 8, 4, 2.0, [])
    rnn, (data, state) = _rnn(torch, torch.device("cpu"), call, built, 2.0)
    twice = (call.args[1].values * 2).to(torch.int64)
    assert (rnn.rnn.hidden_size, rnn.rnn.proj_size) == (16, 4)
    assert data.shape == (int(twice.sum()), 6)
    assert [tuple(h.shape) for h in state] == [(2, int(twice[0]), 4), (2, int(twice[0]), 16)]
    assert tuple(rnn(data, state)[0].data.shape) == (int(twice.sum()), 4)
