"""The train and infer suites on the CPU with tiny models: what CI can run. FLOP counts
against FlopCounterMode, OOM and unsupported precisions skipped with the reason and the run
going on, the user's entry point, int8 layers, the live serving loop, data loading, DDP over
gloo, the CLI. Tests marked `gpu` run the quick profile on a real GPU."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from gpuaudit.bench.context import Profile  # noqa: E402
from gpuaudit.bench.runner import run_bench  # noqa: E402
from gpuaudit.model import Machine, RunStatus  # noqa: E402
from gpuaudit.workloads import flops, models  # noqa: E402
from gpuaudit.workloads.entry import load  # noqa: E402
from tests.conftest import fixture_machine  # noqa: E402
from tests.support import cli  # noqa: E402

GPU = pytest.mark.gpu


@pytest.fixture(autouse=True)
def one_thread():
    # A shared CI host: one intra-op thread keeps tiny models from thrashing.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def machine() -> Machine:
    return fixture_machine("h200-1gpu")


def bench(suite: str, profile: Profile = Profile.STANDARD, **options):
    return run_bench([suite], machine=machine(), profile=profile, options=options)


def by_name(run):
    return {m.name: m for m in run.measurements}


USER_MODEL = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(32, 64)
        self.b = nn.Linear(64, 16)
    def forward(self, x):
        if x.shape[0] > {limit}:
            raise torch.OutOfMemoryError(
                "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity")
        return self.b(torch.relu(self.a(x)))

def build():
    def make_batch(n):
        return (torch.randn(n, 32),), torch.randint(0, 16, (n,))
    return Net(), make_batch
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """write(name, source): a user's module of that name, importable as from their
    directory (the current one, on the path)."""
    def write(name: str, source: str) -> None:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        sys.modules.pop(name, None)

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return write


@pytest.fixture
def user_model(user_module):
    """A user's module `mymodels` on the path, whose model runs out of memory above a batch."""
    def write(limit: int = 1000) -> str:
        user_module("mymodels", USER_MODEL.replace("{limit}", str(limit)))
        return "mymodels:build"

    return write


# -- FLOPs: the formulas against FlopCounterMode ----------------------------------------------


@pytest.mark.parametrize("name", ["gpt-124m", "bert-base", "resnet50", "gpt-tiny"])
def test_formulas_equal_what_flop_counter_mode_counts(name):
    # On the meta device: shapes only, so the full-size models cost nothing to count.
    w = models.build(name, "meta", batch_size=2)
    (x,), target = w.make_batch(2)
    train = flops.count_flops(lambda: w.loss(w.model(x), target).backward())
    assert train.model == 2 * w.expected_count_per_sample
    with torch.no_grad():
        forward = flops.count_flops(lambda: w.model(x))
    assert forward.model == 2 * w.forward_flops_per_sample


def test_cpu_flash_attention_is_counted_like_the_gpu_kernels():
    q, k, v = (torch.randn(2, 4, 16, 8, requires_grad=True) for _ in range(3))
    c = flops.count_flops(lambda: torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True).sum().backward())
    fwd = 2 * (2 * 2 * 4 * 16 * 16 * 8)  # QKᵀ and AV, 2 FLOPs a multiply-add, all of T×T
    assert c.attention_forward == fwd and c.attention_backward == fwd * 5 // 2
    assert c.model == 3 * fwd


def test_grouped_query_attention_is_counted_as_its_query_heads(monkeypatch):
    """SDPA with fewer key/value heads (`enable_gqa=True`, Llama 3's attention): the kernels
    broadcast them, so the work is the query heads'. Torch's own formula refused those
    shapes before torch 2.13, and the count failed every mode of such a model on a GPU
    (torch 2.11): the formulas here count them whatever torch's does."""
    from torch.utils import flop_counter as fc

    strict = fc.sdpa_flop_count

    def as_torch_2_11(q, k, v):
        if not (q[0] == k[0] == v[0] and q[1] == k[1] == v[1]):
            raise AssertionError("sdpa_flop_count: query/key/value shapes are incompatible")
        return strict(q, k, v)

    monkeypatch.setattr(fc, "sdpa_flop_count", as_torch_2_11)
    aten = torch.ops.aten
    formulas = flops.missing_formulas(torch)
    q, kv = (2, 8, 16, 32), (2, 2, 16, 32)
    for op in (aten._scaled_dot_product_flash_attention,
               aten._scaled_dot_product_efficient_attention,
               aten._scaled_dot_product_cudnn_attention):
        assert formulas[op](q, kv, kv) == strict(q, q, q) == 2 * (2 * 2 * 8 * 16 * 16 * 32)
    # end to end on this CPU: as many FLOPs as the same attention with its heads repeated
    q = torch.randn(2, 8, 16, 32, requires_grad=True)
    k, v = (torch.randn(2, 2, 16, 32, requires_grad=True) for _ in range(2))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    grouped = flops.count_flops(lambda: sdpa(q, k, v, enable_gqa=True).sum().backward())
    repeated = flops.count_flops(lambda: sdpa(q, k.repeat_interleave(4, 1),
                                              v.repeat_interleave(4, 1)).sum().backward())
    assert grouped.attention_forward == repeated.attention_forward > 0


@pytest.mark.parametrize(("layer", "shape"), [
    (lambda: torch.nn.Conv2d(256, 256, 7, padding=3, groups=256), (16, 256, 8, 8)),
    (lambda: torch.nn.Conv2d(64, 128, 3, padding=1, stride=2, groups=4), (8, 64, 16, 16)),
    (lambda: torch.nn.ConvTranspose2d(64, 32, 2, stride=2, groups=8), (8, 64, 16, 16)),
    (lambda: torch.nn.Conv1d(16, 16, 3, groups=16), (4, 16, 100)),
    (lambda: torch.nn.Conv2d(64, 128, 3, padding=1), (8, 64, 16, 16)),
], ids=["depthwise", "grouped-strided", "grouped-transposed", "depthwise-1d", "dense"])
def test_a_convolutions_backward_is_twice_its_forward_whatever_its_groups(layer, shape):
    """The input's and the weights' gradients each cost the forward's work. Torch's formula
    counted a grouped convolution's backward through shapes that lose the groups (a
    depthwise 7×7 over 256 channels: 52.8 GFLOP at batch 128 against a forward of 0.21);
    a dense one it counts right, and the count here agrees with it there."""
    from torch.utils.flop_counter import FlopCounterMode

    conv = layer()
    x = torch.randn(*shape, requires_grad=True)
    forward = flops.count_flops(lambda: conv(x)).total
    both = flops.count_flops(lambda: conv(x).sum().backward()).total
    assert forward > 0 and both == 3 * forward
    with FlopCounterMode(display=False) as torch_count:
        conv(x).sum().backward()
    assert (torch_count.get_total_flops() == both) == (conv.groups == 1)
    weights_only = conv(x.detach()).sum()  # no input gradient asked: the weights' alone
    assert flops.count_flops(lambda: weights_only.backward()).total == forward


def test_our_resnet50_is_torchvisions_architecture():
    from gpuaudit.workloads.nets import ResNet

    # torchvision's resnet50 has 25,557,032 parameters (its model card).
    assert sum(p.numel() for p in ResNet().parameters()) == 25_557_032
    assert flops.resnet_flops().forward == 8_178_368_512  # = 2 × torchvision's 4.09 GMACs
    gpt = models.build("gpt-124m", "meta")
    assert sum(p.numel() for p in gpt.model.parameters()) == 124_475_904  # GPT-2 small


# -- training ---------------------------------------------------------------------------------


def test_train_measures_each_mode_and_skips_unsupported_ones_with_the_reason():
    run = bench("train", models=["gpt-tiny"], modes=["fp32", "bf16", "tf32", "fp16"], steps=3,
                parts=["modes"])
    got = by_name(run)
    for mode in ("fp32", "bf16"):
        thr = got[f"gpt-tiny/{mode}/throughput"]
        assert thr.value > 0 and len(thr.samples) == 3 and thr.unit == "samples/s"
        tok = got[f"gpt-tiny/{mode}/tokens"]
        assert tok.value == pytest.approx(thr.value * 64)  # 64-token sequences
        st = got[f"gpt-tiny/{mode}/step_time"]
        assert st.params["p50_ms"] <= st.params["p90_ms"] <= st.params["p99_ms"]
        assert got[f"gpt-tiny/{mode}/warmup"].value > 0
        assert got[f"gpt-tiny/{mode}/model_flops"].params["model_flops_per_step"] == \
            4 * PER_SAMPLE_GPT_TINY
    assert got["gpt-tiny/bf16/throughput"].params["speedup_vs_fp32"] == pytest.approx(
        got["gpt-tiny/bf16/throughput"].value / got["gpt-tiny/fp32/throughput"].value,
        abs=5e-4)  # recorded to 3 decimals
    assert "CPU" in got["gpt-tiny/tf32/throughput"].skipped_reason
    assert "GPU mode" in got["gpt-tiny/fp16/throughput"].skipped_reason
    check = got["gpt-tiny/flop_count"]
    assert check.pct_of_spec == 100.0 and check.value == pytest.approx(
        PER_SAMPLE_GPT_TINY / 1e9)
    assert run.status is RunStatus.COMPLETE


PER_SAMPLE_GPT_TINY = models.PRESETS["gpt-tiny"].train_flops_per_token(64) * 64


def test_compiled_mode_runs_and_reports_its_warm_up_apart():
    run = bench("train", models=["bert-tiny"], modes=["fp32+compile"], steps=2,
                compile_backend="eager", parts=["modes"])
    got = by_name(run)
    assert got["bert-tiny/fp32+compile/throughput"].value > 0
    assert got["bert-tiny/fp32+compile/warmup"].statistic == "once"
    assert "bert-tiny/flop_count" not in got  # never counted through a compiled graph


def test_out_of_memory_is_skipped_with_what_it_needed_and_the_run_goes_on(user_model):
    spec = user_model(limit=4)
    run = bench("train", models=[spec, "gpt-tiny"], modes=["fp32"], batch_size=8, steps=2,
                parts=["modes"])
    got = by_name(run)
    reason = got[f"{spec}/fp32/throughput"].skipped_reason
    assert reason.startswith("out of memory: needs more than 21.5 GB")
    assert got["gpt-tiny/fp32/throughput"].value > 0


def test_a_users_model_trains_with_counted_flops_and_serves(user_model):
    spec = user_model()
    run = bench("train", models=[spec], modes=["fp32", "bf16"], batch_size=4, steps=2,
                parts=["modes"])
    got = by_name(run)
    # two Linear layers, forward + backward; the first computes no gradient for its input
    per_sample = 3 * 2 * (32 * 64 + 64 * 16) - 2 * 32 * 64
    assert got[f"{spec}/flop_count"].value == pytest.approx(per_sample / 1e9)
    for mode in ("fp32", "bf16"):  # counted once, used for every mode
        mf = got[f"{spec}/{mode}/model_flops"]
        assert mf.params["model_flops_per_step"] == 4 * per_sample
        assert mf.params["flops_source"] == "FlopCounterMode"
    inf = by_name(bench("infer", models=[spec], precisions=["fp32", "int8"], batches=[2],
                        parts=["latency"]))
    assert inf[f"{spec}/fp32/eager/b2/latency"].value > 0
    # the batch-1 fallback: int8 keeps working with a tiny number of rows
    assert inf[f"{spec}/int8/eager/b2/throughput"].value > 0


def test_entry_point_loads_tuples_and_dicts(user_model, user_module, tmp_path):
    w = load(user_model())
    assert w.name == "mymodels:build" and w.loss is None and w.batch_size == 32
    (tmp_path / "dictmod.py").write_text(textwrap.dedent("""
        import torch
        def build():
            return {"model": torch.nn.Linear(4, 4), "make_batch": lambda n: torch.ones(n, 4),
                    "batch_size": 3, "tokens_per_sample": 7}
        def bad():
            return {"model": torch.nn.Linear(4, 4)}
        def boom():
            raise ValueError("missing weights file")
    """))
    w = load("dictmod:build")
    assert (w.batch_size, w.tokens_per_sample) == (3, 7)
    # a model build() compiled runs eager: the modes say what is compiled
    user_module("compiledmod", """
        import torch
        def wrapped():
            return torch.compile(torch.nn.Linear(4, 4)), lambda n: torch.ones(n, 4)
        def in_place():
            m = torch.nn.Linear(4, 4)
            m.compile()
            return m, lambda n: torch.ones(n, 4)
        def blocks():  # per-block compilation: in place, and a block replaced by its wrapper
            m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.compile(torch.nn.Linear(4, 4)))
            m[0].compile()
            m[1].compile()
            return m, lambda n: torch.ones(n, 4)
        @torch.compile  # at import, beside the thread that imports torch._dynamo
        def act(x):
            return x * 2
        def plain():
            return torch.nn.Linear(4, 4), lambda n: torch.ones(n, 4)
    """)
    for fn in ("wrapped", "in_place", "blocks"):
        w = load(f"compiledmod:{fn}")
        assert all(type(m) in (torch.nn.Linear, torch.nn.Sequential)
                   and m._compiled_call_impl is None for m in w.model.modules())
        assert w.params == {"compiled_in_build": "run eager; the +compile modes compile it"}
    assert load("compiledmod:plain").params is None
    from gpuaudit.errors import BadInputError

    with pytest.raises(BadInputError, match="without model and make_batch"):
        load("dictmod:bad")
    with pytest.raises(BadInputError, match="build\\(\\) failed: ValueError: missing weights"):
        load("dictmod:boom")


def test_a_batch_of_numpy_arrays_trains_as_a_data_loader_would_collate_it(user_module):
    from gpuaudit.workloads.precision import TrainMode
    from gpuaudit.workloads.trainer import Trainer

    user_module("npmod", """
        import numpy as np
        import torch
        def build():
            return torch.nn.Linear(8, 3), lambda n: {"input": np.ones((n, 8), "float32")}, \\
                lambda out, _: out.sum()
    """)
    t = Trainer("npmod:build", TrainMode("fp32"), torch.device("cpu"), batch_size=4)
    t.step()
    assert isinstance(t.inputs[0]["input"], torch.Tensor) and torch.isfinite(t.last_loss)


def test_a_module_that_compiles_at_import_loads_beside_the_early_torch_import(tmp_path):
    """The CLI imports torch._dynamo in a thread while the user's module loads: a module
    whose import calls torch.compile raced it for the module locks (`_DeadlockError`, or a
    partially initialized torch._inductor) three times in four before the load waited."""
    import subprocess

    (tmp_path / "deco.py").write_text(textwrap.dedent("""
        import torch
        @torch.compile
        def act(x):
            return x * 2
        def build():
            return torch.nn.Linear(4, 4), lambda n: torch.ones(n, 4)
    """))
    script = ("from gpuaudit.torchload import preload_torch; preload_torch(('train',)); "
              "from gpuaudit.workloads.entry import load; print(type(load('deco:build').model))")
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, text=True,
                              capture_output=True, timeout=300)
        assert done.returncode == 0 and "Linear" in done.stdout, done.stderr[-500:]


KEYWORD_MODELS = """
import torch
from torch import nn
import torch.nn.functional as F

class HfStyle(nn.Module):
    # keyword arguments, a loss when given labels, a dict out: as a Hugging Face model
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.head = nn.Linear(16, 50)
    def forward(self, input_ids, attention_mask=None, labels=None):
        h = self.emb(input_ids) * attention_mask.unsqueeze(-1)
        logits = self.head(h)
        if labels is None:
            return {"logits": logits}
        return {"loss": F.cross_entropy(logits.flatten(0, 1), labels.flatten()), "logits": logits}

class WholeBatch(nn.Module):
    # the batch taken whole, as one dict argument
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 3)
    def forward(self, batch):
        return self.lin(batch["x"])

def hf():
    def make_batch(n):
        ids = torch.randint(0, 50, (n, 6))
        return {"input_ids": ids, "attention_mask": torch.ones(n, 6), "labels": ids}
    return HfStyle(), make_batch

def whole():
    def make_batch(n):
        return {"x": torch.randn(n, 8)}, torch.randint(0, 3, (n,))
    return WholeBatch(), make_batch
"""


def test_a_batch_of_keyword_arguments_reaches_the_model_as_keywords(user_module):
    from gpuaudit.workloads.entry import split_batch, takes_keywords

    user_module("kwmodels", KEYWORD_MODELS)
    hf, whole = load("kwmodels:hf"), load("kwmodels:whole")
    inputs, target = split_batch(hf.make_batch(2))
    assert target is None and takes_keywords(hf.model, inputs)
    inputs, target = split_batch(whole.make_batch(2))
    assert target.shape == (2,) and not takes_keywords(whole.model, inputs)
    run = bench("train", models=["kwmodels:hf", "kwmodels:whole"], modes=["fp32"],
                batch_size=4, steps=2, parts=["modes"])
    got = by_name(run)
    for spec in ("kwmodels:hf", "kwmodels:whole"):
        assert got[f"{spec}/fp32/throughput"].value > 0, got[f"{spec}/fp32/throughput"]
    # the model's own loss was trained: both layers' FLOPs counted (embedding: none)
    assert got["kwmodels:hf/flop_count"].value == pytest.approx(3 * 2 * 6 * 16 * 50 / 1e9)
    inf = by_name(bench("infer", models=["kwmodels:hf"], precisions=["fp32", "bf16"],
                        batches=[2], parts=["latency"], infer_seconds=0.05))
    assert inf["kwmodels:hf/bf16/eager/b2/latency"].value > 0


def test_a_batch_returned_as_x_and_y_trains_on_its_target(user_module):
    """`return x, y` (no tuple around x), as most training code writes a batch: the
    Sequential gets x alone and trains against y with cross-entropy, where it failed with
    "forward() takes 2 positional arguments but 3 were given"; infer drops y."""
    user_module("pairmod", """
        import torch
        def build():
            m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
            return m, lambda n: (torch.randn(n, 8), torch.randint(0, 3, (n,)))
    """)
    got = by_name(bench("train", models=["pairmod:build"], modes=["fp32"], batch_size=4,
                        steps=2, parts=["modes"]))
    assert got["pairmod:build/fp32/throughput"].value > 0
    # per sample, both Linear layers' forward and weight gradients, the input gradient of
    # the second only (x needs none)
    per_sample = 2 * 2 * (8 * 16 + 16 * 3) + 2 * 16 * 3
    assert got["pairmod:build/flop_count"].value == pytest.approx(per_sample / 1e9)
    inf = by_name(bench("infer", models=["pairmod:build"], precisions=["fp32"], batches=[2],
                        parts=["latency"], infer_seconds=0.05))
    assert inf["pairmod:build/fp32/eager/b2/latency"].value > 0


def test_a_model_built_in_bf16_trains_in_bf16_only_and_says_so(user_module):
    """`model.to(torch.bfloat16)` in build(): pure bf16 training. Its fp32 mode would run in
    bf16 under fp32's name (it did); it is skipped saying why, and the bf16 mode records the
    weights' precision for `predict`."""
    user_module("halfmod", """
        import torch
        def build():
            m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
            m = m.to(torch.bfloat16)
            return m, lambda n: (torch.randn(n, 8, dtype=torch.bfloat16), torch.randint(0, 3, (n,)))
    """)
    got = by_name(bench("train", models=["halfmod:build"], modes=["fp32", "bf16"],
                        batch_size=4, steps=2, parts=["modes"]))
    why = got["halfmod:build/fp32/throughput"].skipped_reason
    assert "weights are bf16" in why and "--precision bf16" in why
    bf16 = got["halfmod:build/bf16/throughput"]
    assert bf16.value > 0 and bf16.params["weights"] == "bf16"


def test_a_loss_that_is_not_finite_is_timed_recorded_and_flagged(user_module):
    """A model whose loss is NaN (a scan's exp overflowing, as a user's Mamba-like block did)
    is still timed; the record says so and a finding warns. Its loss in the params had
    failed the record's validation and taken the whole train suite with it."""
    user_module("nanmod", """
        import torch
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a = torch.nn.Linear(8, 3)
            def forward(self, x):
                return self.a(x) * float("nan")
        def build():
            return Net(), lambda n: (torch.randn(n, 8), torch.randint(0, 3, (n,)))
    """)
    run = bench("train", models=["nanmod:build"], modes=["fp32"], batch_size=4, steps=2,
                parts=["modes"])
    thr = by_name(run)["nanmod:build/fp32/throughput"]
    assert thr.value > 0 and thr.params["final_loss"] is None
    assert thr.params["loss_finite"] is False and "loss is nan" in thr.notes[0]
    found = [f for f in run.findings if f.code == "workloads.loss-not-finite"]
    assert len(found) == 1 and "fp32" in found[0].message


COMPLEX_MODEL = """
    import torch
    class Spectral(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(16 // 2 + 1, dtype=torch.cfloat))
            self.head = torch.nn.Linear(16, 3)
        def forward(self, x):
            return self.head(torch.fft.irfft(torch.fft.rfft(x) * self.w, n=16))
    def build():
        return Spectral(), lambda n: (torch.randn(n, 16), torch.randint(0, 3, (n,)))
"""


def test_complex_weights_are_stepped_beside_the_fused_optimizer(user_module):
    """A Fourier layer's complex weights: the fused AdamW, built without complaint, refused
    them at its first step and every mode failed; they take the foreach version beside it."""
    from gpuaudit.workloads.optim import make_optimizer

    user_module("cplxmod", COMPLEX_MODEL)
    from gpuaudit.workloads.precision import check_scaler

    net = load("cplxmod:build").model
    with pytest.raises(ValueError, match="1 complex weight"):  # torch: no kernel to unscale
        check_scaler(torch, "fp16", net)
    check_scaler(torch, "bf16", net)
    opt, note = make_optimizer(torch, net, sgd=False, fused=True)
    assert [o.defaults.get("fused") for o in opt.parts] == [True, None]
    assert note is not None and "1 complex parameter" in note
    before = net.w.detach().clone()
    net(torch.randn(4, 16)).sum().backward()
    opt.step()
    assert not torch.equal(before, net.w)
    got = by_name(bench("train", models=["cplxmod:build"], modes=["fp32"], batch_size=4,
                        steps=2, parts=["modes"]))
    thr = got["cplxmod:build/fp32/throughput"]
    assert thr.skipped_reason is None and thr.value > 0


def test_inference_keeps_complex_weights_complex(user_module):
    """`model.to(torch.float32)` casts a complex weight to real (dropping its imaginary part)
    and the model then failed in every mode; the floating weights alone take the dtype."""
    from gpuaudit.workloads.infer import prepare

    user_module("cplxinf", COMPLEX_MODEL)
    for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        net = prepare("cplxinf:build", precision, torch.device("cpu")).model
        assert (net.w.dtype, net.head.weight.dtype) == (torch.complex64, dtype)
    run = bench("infer", models=["cplxinf:build"], precisions=["fp32"], batches=[2],
                parts=["latency"], infer_seconds=0.05)
    assert by_name(run)["cplxinf:build/fp32/eager/b2/latency"].value > 0


def test_a_model_with_nothing_to_train_is_refused_in_one_line(user_module):
    from gpuaudit.workloads.entry import failed_entry_points

    user_module("frozenmod", """
        import torch
        def build():
            m = torch.nn.Linear(8, 3).requires_grad_(False)
            return m, lambda n: ((torch.randn(n, 8),), torch.randint(0, 3, (n,)))
    """)
    run = bench("train", models=["frozenmod:build"], modes=["fp32"], batch_size=4, steps=2,
                parts=["modes"])
    line = failed_entry_points(["frozenmod:build"], run.measurements)
    assert line is not None and "no trainable parameters" in line and "bench infer" in line


def test_a_loaders_dict_batches_count_their_samples():
    from gpuaudit.tune.runner import _batch_len

    assert _batch_len({"input_ids": torch.zeros(5, 9), "labels": torch.zeros(5, 9)}) == 5
    assert _batch_len(([torch.zeros(3, 2)], torch.zeros(3))) == 3
    assert _batch_len(torch.zeros(4, 2)) == 4


# -- inference --------------------------------------------------------------------------------


def test_infer_sweeps_batches_and_skips_what_cannot_run_here():
    run = bench("infer", models=["bert-tiny"], precisions=["fp32", "int8", "fp8"],
                batches=[1, 4], parts=["latency"], infer_seconds=0.05)
    got = by_name(run)
    for b in (1, 4):
        lat = got[f"bert-tiny/fp32/eager/b{b}/latency"]
        assert lat.params["p50_ms"] <= lat.params["p90_ms"] <= lat.params["p99_ms"]
        thr = got[f"bert-tiny/int8/eager/b{b}/throughput"]
        assert thr.value > 0 and thr.params["model_tflops"] > 0
    assert "not on the CPU" in got["bert-tiny/fp8/latency"].skipped_reason
    assert "GPUs only" in got["bert-tiny/fp32/cudagraph/latency"].skipped_reason


def test_int8_on_a_model_that_reads_its_linear_weights_itself_says_why_it_cannot(
        user_module):
    # torchvision's Swin passes its Linear layers' weights to F.linear: the int8 layers that
    # replace them hold int8 weights the functional call cannot take
    user_module("weightsmod", """
        import torch
        import torch.nn.functional as F
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.qkv = torch.nn.Linear(64, 64)
            def forward(self, x):
                return F.linear(x, self.qkv.weight, self.qkv.bias)
        def build():
            return Net(), lambda n: ((torch.randn(n, 64),), None)
    """)
    got = by_name(bench("infer", models=["weightsmod:build"], precisions=["fp32", "int8"],
                        batches=[2], parts=["latency"], infer_seconds=0.05))
    assert got["weightsmod:build/fp32/eager/b2/latency"].value > 0
    reason = got["weightsmod:build/int8/eager/b2/latency"].skipped_reason
    assert reason.startswith("int8: the model reads a Linear layer's weight outside the layer")


def test_int8_linear_layers_stay_close_to_the_float_result():
    from gpuaudit.workloads.quant import quantize

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                              torch.nn.Linear(128, 48), torch.nn.Linear(48, 5)).bfloat16()
    x = torch.randn(3, 7, 64).bfloat16()
    ref = net(x).float()
    assert quantize(net, "int8") == (2, 3)  # 48 → 5 does not tile: it stays bf16
    out = net(x).float()
    assert out.shape == ref.shape
    assert ((out - ref).norm() / ref.norm()).item() < 0.05


def test_live_serving_finds_a_max_qps_and_the_gpus_for_a_target():
    run = bench("infer", parts=["serving"], slo_ms=400.0, target_qps=1e6, serving_seconds=0.2,
                serving_min_requests=30, max_batch=4)
    got = by_name(run)
    q = got["resnet-tiny/fp32/serving/max_qps"]
    assert q.value > 0 and q.params["p99_ms"] <= 400.0
    need = got["resnet-tiny/fp32/serving/gpus_needed"]
    assert need.value == -(-1e6 // q.value) and need.params["target_qps"] == 1e6


# -- data loading and DDP -----------------------------------------------------------------------


def test_data_loading_against_a_training_rate_it_cannot_meet():
    run = bench("train", parts=["data"], workers=["0", "1"], data_seconds=0.1,
                train_rate=1e9)
    got = by_name(run)
    assert got["data/jpeg/w0"].value > 0 and got["data/jpeg/w1"].value > 0
    best = got["data/jpeg/best"]
    assert best.params["keeps_up"] is False and best.params["train_rate"] == 1e9
    assert [f.code for f in run.findings] == ["workloads.input-bound"]
    assert "CUDA" in got["data/jpeg/pinned"].skipped_reason


def test_the_jpeg_pipeline_makes_normalized_crops():
    from gpuaudit.workloads.data import JpegDataset, synthetic_jpegs

    blobs = synthetic_jpegs(2, 64, 48)
    assert all(b[:2] == b"\xff\xd8" for b in blobs)  # JPEG start of image
    x, label = JpegDataset(blobs, 10, crop=32)[3]
    assert x.shape == (3, 32, 32) and str(x.dtype) == "float32" and label == 3
    assert -3 < float(x.mean()) < 3 and float(x.std()) > 0.1


def test_ddp_over_gloo_scales_from_one_rank_to_two():
    run = bench("train", Profile.FULL, parts=["scaling"], steps=2, accum=2)
    got = by_name(run)
    one, two = got["gpt-tiny/ddp/n1/throughput"], got["gpt-tiny/ddp/n2/throughput"]
    assert one.value > 0 and two.value > 0 and two.params["backend"] == "gloo"
    eff = got["gpt-tiny/ddp/n2/scaling"]
    assert eff.params["one_gpu_rate"] == pytest.approx(one.value, rel=1e-3)
    assert eff.value == pytest.approx(100 * two.value / (2 * one.value), rel=0.05)
    assert got["gpt-tiny/ddp/n2/accum2/throughput"].params["accum"] == 2
    assert run.findings == ()  # CPU ranks share cores: no scaling verdict


# -- the command line -------------------------------------------------------------------------


def gpuaudit(*args, cwd=None):
    """Training on this CPU: one thread (the machine is shared), up to ten minutes."""
    return cli.gpuaudit(*args, env={"OMP_NUM_THREADS": "1"}, cwd=cwd, timeout=600, columns=None)


def test_cli_bad_models_and_precisions_are_one_line_and_exit_2(tmp_path):
    for args, text in ((["--model", "nosuch_pkg.mod:build"], "cannot import nosuch_pkg.mod"),
                       (["--model", "gpt-9000"], "unknown model 'gpt-9000'"),
                       (["--precision", "fp4"], "unknown precision fp4")):
        proc = gpuaudit("bench", "train", *args, "--no-save", cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and text in lines[0] and "Traceback" not in proc.stderr


def test_cli_bench_train_json_and_the_80_column_view(tmp_path):
    proc = gpuaudit("bench", "train", "--model", "gpt-tiny", "--precision", "fp32", "--json",
                    "--db", str(tmp_path / "s.db"))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    names = {m["name"] for m in doc["measurements"]}
    assert {"gpt-tiny/fp32/throughput", "gpt-tiny/flop_count"} <= names
    assert "saved as run" in proc.stderr
    from rich.console import Console

    from gpuaudit.model import load_run
    from gpuaudit.report.terminal import bench_view

    console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(bench_view(load_run(proc.stdout)))
    text = console.export_text()
    assert "gpt-tiny  fp32" in text.replace("gpt-tiny fp32", "gpt-tiny  fp32")
    assert max(len(line) for line in text.splitlines()) <= 80


# -- on a GPU -----------------------------------------------------------------------------------


@GPU
def test_quick_profile_on_a_gpu_measures_a_training_and_an_inference_figure():
    from gpuaudit.hw import take_snapshot

    run = run_bench(["train", "infer"], machine=take_snapshot(), gpus=[0])
    got = by_name(run)
    tok = got["gpt-124m/bf16/tokens"]
    assert tok.value > 10_000 and tok.gpu_index == 0
    assert got["gpt-124m/bf16/model_flops"].pct_of_spec > 1  # an MFU against the datasheet
    assert got["gpt-124m/flop_count"].pct_of_spec == 100.0
    assert got["resnet50/bf16/cudagraph/b32/throughput"].value > 1000


SPARSE_DLRM = """
import torch
from torch import nn

class Net(nn.Module):  # DLRM's reference code makes its tables sparse
    def __init__(self):
        super().__init__()
        self.tables = nn.ModuleList([nn.EmbeddingBag(1000, 16, mode="sum", sparse=True)
                                     for _ in range(3)])
        self.top = nn.Linear(48, 2)

    def forward(self, idx, offsets):
        return self.top(torch.cat([t(idx[i], offsets) for i, t in enumerate(self.tables)], 1))

def build():
    def batch(n):
        return (torch.randint(0, 1000, (3, n * 4)), torch.arange(0, n * 4, 4)), \\
            torch.randint(0, 2, (n,))
    return Net(), batch
"""


def test_sparse_embeddings_train_with_sparse_adam_beside_the_dense_optimizer(tmp_path,
                                                                            monkeypatch):
    from gpuaudit.workloads.optim import make_optimizer

    (tmp_path / "sparse_dlrm.py").write_text(SPARSE_DLRM)
    monkeypatch.syspath_prepend(str(tmp_path))
    net = load("sparse_dlrm:build").model
    net.tables[2].weight.requires_grad_(False)  # a frozen table is stepped by neither
    opt, note = make_optimizer(torch, net, sgd=False, fused=True)
    kinds = [type(o).__name__ for o in opt.parts]
    assert kinds == ["AdamW", "SparseAdam"] and note is not None and "2 sparse" in note
    assert [len(g["params"]) for g in opt.parts[1].param_groups] == [2]
    before = [t.weight.detach().clone() for t in net.tables] + [net.top.weight.detach().clone()]
    idx, offsets = torch.randint(0, 1000, (3, 32)), torch.arange(0, 32, 4)
    net(idx, offsets).sum().backward()
    opt.step()
    opt.zero_grad()
    after = [t.weight for t in net.tables] + [net.top.weight]
    assert [not torch.equal(b, a) for b, a in zip(before, after, strict=True)] == \
        [True, True, False, True]
    assert len(opt.state) == 4  # the moments of both tables, the linear weight and bias
    # bench train runs it (AdamW alone refuses sparse gradients: every mode failed)
    run = bench("train", models=["sparse_dlrm:build"], modes=["fp32"], steps=2, parts=["modes"])
    thr = by_name(run)["sparse_dlrm:build/fp32/throughput"]
    assert thr.skipped_reason is None and thr.value > 0
