"""T5 v1.1 as Hugging Face transformers writes it (`examples/predict/user/t5.py`), written for
a recording as the users' models are recorded: before it, what the CPU can say. Its attention
is hand-written (torch.matmul scores plus a bucketed relative-position bias, softmax in
fp32), its layer norms are RMS norms written out, its decoder attends to the encoder."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.conftest import FIXTURES  # noqa: E402

EXAMPLES = FIXTURES.parents[1] / "examples" / "predict"


@pytest.fixture(autouse=True)
def on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))


def test_its_sizes_are_t5_v1_1_small_and_base():
    from user import t5

    counts = [sum(p.numel() for p in b()["model"].parameters()) for b in (t5.build, t5.build_base)]
    assert counts == [76_961_152, 247_577_856]  # the published checkpoints' sizes


def test_its_units_land_in_their_classes(tmp_path):
    """The scores' and context's torch.matmul and the softmax are attention, the bias's
    bucket arithmetic with them; the projections gemm, the shared table embedding; the RMS
    norm written out (pow, mean, rsqrt) elementwise, as any hand-written norm."""
    from tests.predict.test_predict_styles import unit_classes

    torch.set_num_threads(1)
    got = unit_classes("user.t5:build", tmp_path)
    assert got["matmul"] == {"attention"} and got["softmax"] == {"attention"}
    assert got["linear"] == {"gemm"} and got["embedding"] == {"embedding"}
    assert {"log", "where", "abs"} <= {u for u, c in got.items() if c == {"attention"}}
    assert got["rsqrt"] == {"elementwise"} and got["pow"] == {"elementwise"}


def test_its_larger_size_counts_on_the_meta_device_without_fused_attention():
    """A size change counts both on the meta device; no fused attention call is recorded (the
    scores are products), so its attention moves by its counted work: ×3.0 (12 heads against
    6, 12 layers against 8), its projections ×4.14."""
    from gpuaudit.predict import stepcount

    small, base = stepcount.count("user.t5:build", 2), stepcount.count("user.t5:build_base", 2)
    assert small.attention == {} and base.attention == {}
    assert base.params / small.params == pytest.approx(247_577_856 / 76_961_152, rel=1e-3)
    # the scores grow with the heads and layers (×2 × ×1.5), the projections with d² too
    attention, gemm = ("attention", "matmul"), ("gemm", "linear")
    assert base.flops[attention] / small.flops[attention] == pytest.approx(3.0)
    assert base.flops[gemm] / small.flops[gemm] == pytest.approx(4.14, abs=0.01)
