"""CLIP as open_clip writes it (`examples/predict/user/clip.py`: nn.MultiheadAttention blocks,
a causal mask kept as a buffer in its text tower, features taken at each caption's end
token, the symmetric contrastive loss), written after the present rules and recorded on an
H100 as a user runs it: `gpuaudit bench train --model user.clip:build --precision bf16
--op-profile` and fp32, each target's own `bench train` and `bench matmul memory` in one call.
The two misses' targets were profiled in a second call (`clip-size-run`, `clip-bf16-b128-run`)
to say where their time went. Not tuned on: no rule was shaped on any figure here."""

import pytest

from gpuaudit.predict import Change
from tests.conftest import FIXTURES
from tests.support.predict import assert_user_case, user_case, user_run

CASES = [  # (recorded, change, measured by, predicted samples/s)
    ("bf16-run", Change(precision="fp32"), "fp32", 835.58),
    ("bf16-run", Change(precision="tf32"), "tf32", 2290.82),
    ("fp32-run", Change(precision="bf16"), "bf16", 3408.25),
    ("fp32-run", Change(precision="tf32"), "tf32", 2159.57),
    ("bf16-run", Change(batch=512), "bf16-b512", 4043.52),
    ("fp32-run", Change(precision="bf16", batch=512), "bf16-b512", 3589.59),
]


@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=[f"{r[:4]}-{m}" for r, _, m, _ in CASES])
def test_a_users_clip_is_predicted_within_10_percent_inside_its_band(case):
    """Six of its eight cases within 10 % and inside their bands: −9.7 to +5.9 %."""
    assert_user_case("clip", CASES[case], 0.10)


def test_its_half_batch_misses_by_the_host_its_device_time_right():
    """bf16 at batch 128 comes out +6.4 % (+10.8 % before a replayed step was held to its
    host's own issue, `timeline.period`), inside its band. Its kernels' classes are right:
    each within 0.6 ms of the batch-128 step's own profile (copies aside: 1.3 against 0.7), but
    that step is one the host binds (60.0 ms measured, 68.1 in the process that profiled it),
    and the host's step at batch 1 took 48.3 ms in the source's process and 58.1 in that one.
    The prediction says the host's pace moved ±36 % while the source was profiled."""
    p, measured = user_case("clip", "bf16-run", Change(batch=128), "bf16-b128")
    assert p.samples_per_s / measured - 1 == pytest.approx(0.064, abs=0.002)
    assert p.samples_per_s_low <= measured <= p.samples_per_s_high
    assert any("moved ±36 %" in n for n in p.notes)
    target = user_run("clip-bf16-b128-run").op_profiles[0]
    got = {c.op_class: c.ms_per_step for c in target.classes}
    for c in p.classes:
        if c.op_class != "copy":
            assert c.predicted_ms == pytest.approx(got[c.op_class], abs=0.6)
    assert (target.step_ms, target.busy_ms) == (pytest.approx(68.1, abs=0.05),
                                               pytest.approx(36.6, abs=0.05))
    source = user_run("clip-bf16-run").op_profiles[0]
    assert (source.host_step_ms, target.host_step_ms) == (pytest.approx(48.3, abs=0.05),
                                                         pytest.approx(58.1, abs=0.05))


def test_its_smaller_patches_move_its_attention_by_its_fused_ideal_time(monkeypatch):
    """Patches 32 → 16 (50 → 197 image tokens). Moved by its FLOPs (×6.6), the fused
    attention went 6.5 → 35.5 ms, where the target's own profile ran it in 13.6 (×2.1), and
    the case came out −11.4 %, outside its band: at 50 and 77 tokens the kernels' time is
    mostly their traffic, which grows with the tokens, not their square. That miss set the
    rule (so this case is no test of it): a fused attention whose tokens change moves by its
    ideal time (FLOPs ×6.63, traffic ×2.45: ×3.19), 20.7 ms, and the case comes out −2.7 %,
    inside its band. The other large classes came within 10 % of that profile: gemm 55.8
    against 61.8 ms, norm 25.6 against 24.3, elementwise 36.4 against 37.3."""
    from gpuaudit.predict import retarget

    monkeypatch.syspath_prepend(str(FIXTURES.parents[1] / "examples" / "predict"))
    change = Change(model="user.clip:build_b16")
    p, measured = user_case("clip", "bf16-run", change, "size")
    assert p.samples_per_s / measured - 1 == pytest.approx(-0.027, abs=0.002)
    assert p.samples_per_s_low <= measured <= p.samples_per_s_high
    target = {c.op_class: c.ms_per_step for c in user_run("clip-size-run").op_profiles[0].classes}
    source = {c.op_class: c.ms_per_step for c in user_run("clip-bf16-run").op_profiles[0].classes}
    predicted = {c.op_class: c.predicted_ms for c in p.classes}
    assert predicted["attention"] / source["attention"] == pytest.approx(3.19, abs=0.01)
    assert target["attention"] / source["attention"] == pytest.approx(2.10, abs=0.01)
    for cls in ("gemm", "norm", "elementwise"):
        assert predicted[cls] == pytest.approx(target[cls], rel=0.10)

    monkeypatch.setattr(retarget, "_fused_attention", lambda *a: None)  # by its FLOPs
    p, _ = user_case("clip", "bf16-run", change, "size")
    assert p.samples_per_s / measured - 1 == pytest.approx(-0.114, abs=0.002)
    assert not p.samples_per_s_low <= measured <= p.samples_per_s_high
    moved = {c.op_class: c.predicted_ms for c in p.classes}["attention"]
    assert moved / source["attention"] == pytest.approx(5.46, abs=0.01)


def test_its_units_land_in_their_classes():
    """nn.MultiheadAttention's projections are gemm (`linear`), its fused kernel attention,
    the patch `conv2d` conv, `layer_norm` norm, the token table embedding: no time outside a
    class."""
    prof = user_run("clip-size-run").op_profiles[0]
    where = {(g.op_class, g.unit) for g in prof.groups}
    for pair in [("gemm", "linear"), ("attention", "scaled_dot_product_attention"),
                 ("conv", "conv2d"), ("norm", "layer_norm"), ("embedding", "embedding")]:
        assert pair in where
    # every profile of it is complete, though kineto printed an "ERROR" while taking each
    for run in ("clip-bf16-run", "clip-fp32-run", "clip-size-run", "clip-bf16-b128-run"):
        prof = user_run(run).op_profiles[0]
        assert not prof.unknown and not prof.notes and len(prof.classes) == 8
