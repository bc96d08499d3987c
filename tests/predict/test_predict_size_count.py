"""`predict --model`: another size of the user's model counted on the meta device, or on the
CPU where its shapes follow its data, an autocast region kept in float32, a batch drawn by
value, lazy layers, and the refusals where the target is another model, not a size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuaudit.errors import BadInputError
from gpuaudit.model import load_run
from gpuaudit.predict import Change, load_profile, predict
from gpuaudit.specs.catalog import load_catalog
from tests.support.predict import h200_rates, zoo_plain_run

SPECS = load_catalog()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "predict"


def test_another_size_of_the_users_model_is_counted_on_the_meta_device(monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    run = zoo_plain_run("mlp")
    prof = load_profile(run, "tabular-mlp/bf16")
    p = predict(prof, h200_rates(), Change(model="zoo.mlp:build_large"), SPECS)
    assert p.target.model == "zoo.mlp:build_large" and p.changes == ("model",)
    assert p.step_ms > p.measured_step_ms  # four times the hidden width
    assert any("counted on the meta device" in b for b in p.basis)


ROUTED = """
import torch
from torch import nn


class Routed(nn.Module):  # top-1 routing by value: which rows reach an expert follows the data
    def __init__(self, dim=16, hidden=32, experts=4):
        super().__init__()
        self.router = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList(nn.Linear(dim, hidden, bias=False) for _ in range(experts))
        self.head = nn.Linear(hidden, 1, bias=False)

    def forward(self, x):
        chosen = self.router(x).argmax(-1)
        out = x.new_zeros(x.shape[0], self.experts[0].out_features)
        for e, expert in enumerate(self.experts):
            rows = torch.nonzero(chosen == e).flatten()
            out = out.index_add(0, rows, expert(x[rows]))
        return self.head(out)


def build():
    return {"model": Routed(), "batch_size": 8,
            "make_batch": lambda n: ((torch.randn(n, 16),), torch.randn(n, 1))}
"""


def test_a_model_whose_shapes_follow_its_data_is_counted_on_the_cpu(tmp_path, monkeypatch,
                                                                    caplog):
    """`nonzero` has no meta implementation: such a model is counted with real tensors on the
    CPU, where top-1 routing sends each row through exactly one expert (so the experts' FLOPs
    are the data's rows × the layer's, whatever the routing), or refused when too large. The
    count says it starts."""
    pytest.importorskip("torch")
    from gpuaudit.predict import stepcount

    (tmp_path / "routed.py").write_text(ROUTED)
    monkeypatch.syspath_prepend(str(tmp_path))
    with caplog.at_level("INFO", logger="gpuaudit.predict"):
        c = stepcount.count("routed:build", 8)
    assert c.counted_on == "cpu" and c.params == 16 * 4 + 4 * 16 * 32 + 32
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "counting routed:build on the CPU with real tensors"]
    linear = sum(f for (cls, _unit), f in c.flops.items() if cls == "gemm")
    # the router forward only (argmax passes no gradient), the experts forward and their
    # weights' gradient (8 rows in all; their input needs none), the head all three
    assert linear == 2 * 8 * 16 * 4 + 2 * (2 * 8 * 16 * 32) + 3 * (2 * 8 * 32)
    monkeypatch.setattr(stepcount, "CPU_COUNT_FLOP", 1.0)
    with pytest.raises(BadInputError, match="too much to count on the CPU"):
        stepcount.count("routed:build", 8)


def test_a_count_on_the_cpu_says_how_far_it_is_and_ends_past_its_time(tmp_path, monkeypatch,
                                                                       caplog):
    """The FLOP estimate that lets a count on the CPU start is far short for convolutions and
    sequence models, so the count itself is watched: every `PROGRESS_S` it says how many
    operators it has run, and past `CPU_COUNT_S` it ends in a one-line refusal, whether in
    the forward or in the backward."""
    pytest.importorskip("torch")
    from gpuaudit.predict import stepcount

    (tmp_path / "routed.py").write_text(ROUTED)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(stepcount, "PROGRESS_S", 0.0)
    with caplog.at_level("INFO", logger="gpuaudit.predict"):
        stepcount.count("routed:build", 8)
    said = [int(r.getMessage().split(": ")[1].split()[0]) for r in caplog.records
            if "operators in" in r.getMessage()]
    assert len(said) > 20 and said == list(range(1, len(said) + 1))
    monkeypatch.setattr(stepcount, "CPU_COUNT_S", 0.0)
    with pytest.raises(BadInputError, match=r"^--model routed:build: its step could not be "
                       r"counted on the meta device, and counting it on the CPU took over 0 s "
                       r"\(1 operators so far\): record that size itself \(gpuaudit bench "
                       r"train --model routed:build --op-profile\)$"):
        stepcount.count("routed:build", 8)


def test_what_the_watch_raises_in_the_backward_ends_the_count_as_it_is():
    """`count_ops` calls its `on_op` after every operator, the backward's too, and what that
    raises comes out unchanged: a refusal is not taken for a model the CPU cannot run."""
    torch = pytest.importorskip("torch")
    from gpuaudit.workloads.tally import count_ops

    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    x = torch.randn(4, 8)
    seen: list[int] = []
    count_ops(lambda: net(x).sum().backward(), on_op=lambda: seen.append(1))
    total, seen = len(seen), []

    def stop_at_the_last() -> None:  # the step's last operator is its backward's
        seen.append(1)
        if len(seen) == total:
            raise BadInputError("stopped in the backward")

    with pytest.raises(BadInputError, match="stopped in the backward"):
        count_ops(lambda: net(x).sum().backward(), on_op=stop_at_the_last)


FP32_REGION = """
import torch
from torch import nn


class Router(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp, self.score = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        h = self.inp(x)
        with torch.autocast(device_type=x.device.type, enabled=False):  # kept in float32
            w = torch.softmax(self.score(h.float()), dim=-1)
        return (h * w.mean(-1, keepdim=True)).sum(-1, keepdim=True)


def build():
    return {"model": Router(), "batch_size": 8,
            "make_batch": lambda n: ((torch.randn(n, 16),), torch.randn(n, 1))}
"""


def test_a_region_kept_in_float32_under_autocast_is_counted_on_the_meta_device(
        tmp_path, monkeypatch):
    """`torch.autocast(x.device.type, enabled=False)` names the meta device there, which
    autocast refuses: such a model was counted on the CPU, and refused when large. It is
    counted on meta, exactly as on the CPU, and autocast is left as it was."""
    torch = pytest.importorskip("torch")
    from gpuaudit.predict import stepcount

    (tmp_path / "fp32_region.py").write_text(FP32_REGION)
    monkeypatch.syspath_prepend(str(tmp_path))
    init = torch.autocast.__init__
    c = stepcount.count("fp32_region:build", 8)
    assert c.counted_on == "meta"
    assert torch.autocast.__init__ is init
    on_cpu = stepcount._count_on("fp32_region:build", 8, "cpu")
    assert c.flops == on_cpu.flops and c.flops[("gemm", "linear")] > 0
    with pytest.raises(RuntimeError, match="unsupported scalarType"):
        torch.autocast("meta", enabled=False)


TOKEN_STREAM = """
import torch
from torch import nn

tokens = torch.randint(0, 100, (4096,))  # nanoGPT's train.bin


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 16)
        self.head = nn.Linear(16, 100)

    def forward(self, idx, targets):
        logits = self.head(self.emb(idx))
        return logits, nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def get_batch(n):
    ix = torch.randint(len(tokens) - 32, (n,))
    x = torch.stack([tokens[i:i + 32] for i in ix])
    y = torch.stack([tokens[i + 1:i + 33] for i in ix])
    return (x, y), None


def build():
    return {"model": LM(), "make_batch": get_batch, "batch_size": 4}
"""


def test_a_batch_drawn_by_value_is_made_on_the_cpu_and_counted_on_meta(tmp_path, monkeypatch):
    """nanoGPT's `get_batch` slices a token stream at random offsets, which a meta tensor has
    no value for: the model was counted on the CPU, and refused above a few TFLOP (GPT-2's
    step is 6). The batch is made on the CPU and only its shapes go to meta; the count is the
    CPU's, and the model's own loss (`logits, loss = model(x, y)`) is the one trained."""
    pytest.importorskip("torch")
    from gpuaudit.predict import stepcount

    (tmp_path / "stream.py").write_text(TOKEN_STREAM)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(stepcount, "CPU_COUNT_FLOP", 1.0)  # no way round meta
    c = stepcount.count("stream:build", 4)
    assert c.counted_on == "meta"
    assert c.flops[("gemm", "linear")] == 3 * (2 * 4 * 32 * 16 * 100)  # forward, both grads
    on_cpu = stepcount._count_on("stream:build", 4, "cpu")
    assert c.flops == on_cpu.flops and c.bytes == on_cpu.bytes


READS_IN_BUILD = """
import torch
from torch import nn


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 8)
        # a value read while building (as parametrizations and init checks do)
        self.gain = float(self.fc.weight.abs().max().item())

    def forward(self, x):
        return self.fc(x) * self.gain


def build():
    return {"model": Scaled(), "batch_size": 4,
            "make_batch": lambda n: ((torch.randn(n, 16),), torch.randn(n, 8))}


def broken():
    raise ValueError("no such config")
"""


def test_a_model_that_cannot_be_built_on_the_meta_device_is_counted_on_the_cpu(
        tmp_path, monkeypatch, caplog):
    """A build that reads a value (`.item()`, as torch's orthogonal parametrization does) fails
    on meta: it was refused outright. It is counted on the CPU, its step weighed once built
    (its size is unknown before); a build that fails everywhere is the user's error."""
    pytest.importorskip("torch")
    from gpuaudit.predict import stepcount

    (tmp_path / "reads.py").write_text(READS_IN_BUILD)
    monkeypatch.syspath_prepend(str(tmp_path))
    with caplog.at_level("INFO", logger="gpuaudit.predict"):
        c = stepcount.count("reads:build", 4)
    assert c.counted_on == "cpu" and c.params == 16 * 8 + 8
    assert c.flops[("gemm", "linear")] == 2 * (2 * 4 * 16 * 8)  # forward, weight gradient
    assert "it could not be built on the meta device: RuntimeError" in caplog.text
    monkeypatch.setattr(stepcount, "CPU_COUNT_FLOP", 1.0)
    with pytest.raises(BadInputError, match="could not be built on the meta device, and a "
                                            "step of about 0 TFLOP is too much"):
        stepcount.count("reads:build", 4)
    with pytest.raises(BadInputError, match=r"could not be built on the cpu device "
                                            r"\(ValueError: no such config\)"):
        stepcount.count("reads:broken", 4)


def test_the_size_count_survives_an_optimizer_that_makes_tensors_with_no_device(monkeypatch):
    """torch 2.11's Adam made its step counter with `torch.tensor(0.0)` (no device) and read it
    with `.item()`: under the meta device that counter is a meta tensor and `.item()` fails,
    which refused every size change on the H200. The optimizer steps outside the meta device."""
    torch = pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    real = torch.optim.AdamW

    class OldAdamW(real):  # as 2.11 did: a device-less tensor read back on the host
        def step(self, closure=None):
            torch.tensor(0.0).item()
            return super().step(closure)

    monkeypatch.setattr(torch.optim, "AdamW", OldAdamW)
    prof = load_profile(zoo_plain_run("mlp"), "tabular-mlp/bf16")
    p = predict(prof, h200_rates(), Change(model="zoo.mlp:build_large"), SPECS)
    assert p.step_ms > p.measured_step_ms


OTHER_MLPS = """
import torch
from torch import nn
from zoo.mlp import _batch


def gelu_mlp():  # the recorded MLP's layers with GELU for ReLU: another model, not a size
    layers, width = [], 512
    for _ in range(6):
        layers += [nn.Linear(width, 2048), nn.LayerNorm(2048), nn.GELU(), nn.Dropout(0.1)]
        width = 2048
    return {"model": nn.Sequential(*layers, nn.Linear(width, 10)), "make_batch": _batch}


def lazy():
    return nn.Sequential(nn.LazyLinear(64), nn.ReLU(), nn.LazyLinear(10)), _batch


def eager():
    return nn.Sequential(nn.Linear(512, 64), nn.ReLU(), nn.Linear(64, 10)), _batch


def numpy_batch():  # a batch as NumPy makes it, on no device
    import numpy as np

    def make(n):
        return (np.random.randn(n, 512).astype("float32"), np.random.randint(0, 10, n))
    return nn.Sequential(nn.Linear(512, 64), nn.ReLU(), nn.Linear(64, 10)), make
"""


def test_a_target_with_layers_the_recording_never_ran_is_refused(tmp_path, monkeypatch):
    """A GELU where the recording ran a ReLU has no recorded time to scale: it was left out
    of the step (and the ReLU moved × 0), a figure for another model than either. A size
    of the same model runs the same units, a new memory-bound one included."""
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    (tmp_path / "other_mlps.py").write_text(OTHER_MLPS)
    monkeypatch.syspath_prepend(str(tmp_path))
    prof = load_profile(zoo_plain_run("mlp"), "tabular-mlp/bf16")
    with pytest.raises(BadInputError, match=r"its elementwise/gelu never ran in the recorded "
                                            r"zoo.mlp:build"):
        predict(prof, h200_rates(), Change(model="other_mlps:gelu_mlp"), SPECS)


def test_lazy_layers_are_counted_once_initialized(tmp_path, monkeypatch):
    """LazyLinear takes its shapes, and initializes its weights, at its first call: counted
    from there, the initialization was a unit of the step (`uniform_`) the recording never
    ran, and the step was the eager model's plus it."""
    pytest.importorskip("torch")
    from gpuaudit.predict.stepcount import count

    monkeypatch.syspath_prepend(str(EXAMPLES))
    (tmp_path / "other_mlps.py").write_text(OTHER_MLPS)
    monkeypatch.syspath_prepend(str(tmp_path))
    lazy, eager = count("other_mlps:lazy", 8), count("other_mlps:eager", 8)
    assert (lazy.flops, lazy.bytes, lazy.params) == (eager.flops, eager.bytes, eager.params)
    # NumPy arrays are made tensors on the counting device, as training makes them
    arrays = count("other_mlps:numpy_batch", 8)
    assert (arrays.flops, arrays.params) == (eager.flops, eager.params)


def test_another_size_needs_a_recording_that_names_its_entry_point():
    run = zoo_plain_run("mlp")
    doc = json.loads(run.model_dump_json())
    for p in doc["op_profiles"]:
        p["model_params"].pop("entry", None)
    with pytest.raises(BadInputError, match="does not say which entry point"):
        predict(load_profile(load_run(json.dumps(doc)), "tabular-mlp/bf16"), h200_rates(),
                Change(model="zoo.mlp:build_large"), SPECS)


def test_the_count_keeps_each_attention_call_as_the_model_made_it(monkeypatch):
    """The meta device runs attention's math (its T×S scores), which a fused kernel never
    writes: the count keeps each `scaled_dot_product_attention` call's shapes as the model
    made it, nn.MultiheadAttention's included (B·H, T, S, Q, causal) → calls; a size change
    whose tokens differ moves a fused group by them, one whose tokens hold by its FLOPs."""
    pytest.importorskip("torch")
    from gpuaudit.model.opprofile import UnitGroup
    from gpuaudit.predict import retarget, stepcount
    from gpuaudit.predict.hardware import Roofs

    h200 = Roofs(gpu=load_catalog().get("h200-sxm"), matmul_tflops={"bf16": 700.0},
                 memory_gbps=4000.0, sms=132, measured=True)

    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "examples" / "predict"))
    small = stepcount.count("user.clip:build", 2)
    large = stepcount.count("user.clip:build_b16", 2)
    assert small.attention == {(24, 50, 50, 64, False): 12, (16, 77, 77, 64, False): 12}
    assert large.attention == {(24, 197, 197, 64, False): 12, (16, 77, 77, 64, False): 12}
    # timm's way: q, k, v split from one linear by reshape, permute and unbind
    assert stepcount.count("user.deit:build_384", 2).attention == {(12, 577, 577, 64, False): 12}
    key = ("attention", "scaled_dot_product_attention")
    g = UnitGroup(op_class="attention", unit="scaled_dot_product_attention", flops=1e11,
                  bytes=5e9, kernel_us=6500.0, kernels=108)
    moved = retarget._fused_attention(g, small, large, key, h200, "bf16")
    assert moved is not None and "its fused traffic ×2.45" in moved[1]
    assert retarget._fused_attention(g, small, small, key, h200, "bf16") is None
