"""Two decoders written the way Hugging Face transformers writes them (`examples/predict/
user`), each recorded on an H100 as a user runs it: `gpuaudit bench train --model
user.neox:build --precision fp32 --op-profile`, the same in bf16, and each target's own
`bench train` (recorded from a scratch package named `mine`, renamed here), all in one
loan. The GPT-NeoX was written after the cast and strided-traffic rules and is a test of
them; the Qwen2's first recording (before the op profile marked strided traffic) missed
fp32 → bf16 by +7.1 % and bf16 → fp32 by −6.0 %, outside their bands, and shaped both
rules: this is its second."""

import pytest

from gpuaudit.predict import Change
from tests.conftest import FIXTURES
from tests.support.predict import train_samples_per_s, user_run
from validation.predict.users import predict_run

CHANGES = [  # (recorded, change, measured by)
    ("fp32-run", Change(precision="bf16"), "bf16"),
    ("fp32-run", Change(precision="tf32"), "tf32"),
    ("fp32-run", Change(precision="bf16", batch=16), "bf16-b16"),
    ("bf16-run", Change(precision="fp32"), "fp32"),
    ("bf16-run", Change(precision="tf32"), "tf32"),
    ("bf16-run", Change(batch=16), "bf16-b16"),
]
PREDICTED = {"neox": [233.52, 121.71, 248.54, 47.22, 119.11, 256.12],
             "qwen": [151.46, 85.95, 160.58, 28.73, 83.93, 164.58]}


@pytest.mark.parametrize("model", ["neox", "qwen"])
@pytest.mark.parametrize("case", range(len(CHANGES)),
                         ids=[f"{r[:4]}-{m}" for r, _, m in CHANGES])
def test_a_users_decoder_is_predicted_inside_its_band(model, case):
    """Every case of both within 5 % and inside its band: the GPT-NeoX −0.9 to +3.8 %, the
    Qwen2 −1.3 to +4.6 %."""
    recorded, change, measured_by = CHANGES[case]
    p = predict_run(user_run(f"{model}-{recorded}"), "users-rates", change)
    measured = train_samples_per_s(user_run(f"{model}-{measured_by}"))
    assert p.samples_per_s == pytest.approx(PREDICTED[model][case], rel=1e-3)
    assert abs(p.samples_per_s / measured - 1) < 0.05
    assert p.samples_per_s_low <= measured <= p.samples_per_s_high


def test_without_its_strided_traffic_the_neox_misses_its_band():
    """The same fp32 recording with its strided traffic unmarked (as a recording made before
    the op profile marked it): fp32 → bf16 comes out +6.9 %, outside its band, against +3.8 %
    inside it."""
    run = user_run("neox-fp32-run")
    prof = run.op_profiles[0]
    assert sum(g.strided_bytes or 0.0 for g in prof.groups) > 0
    unmarked = prof.model_copy(update={"groups": tuple(
        g.model_copy(update={"strided_bytes": None}) for g in prof.groups)})
    old = run.model_copy(update={"op_profiles": (unmarked,)})
    measured = train_samples_per_s(user_run("neox-bf16"))
    p = predict_run(old, "users-rates", Change(precision="bf16"))
    assert p.samples_per_s / measured - 1 == pytest.approx(0.069, abs=0.002)
    assert not p.samples_per_s_low <= measured <= p.samples_per_s_high


def test_the_qwens_fp32_step_carries_its_bf16_casts():
    """Its RMSNorm's `.to(torch.float32)` is no kernel in fp32 (its `to` group there is one
    3 µs kernel, a cast of the positions): the recording counts 3.15 GB for it under bf16,
    carried as casts (1.32 ms a step); the bf16 step ran them as its `to` group, 3.15 GB in
    1.32 ms."""
    run, bf16 = user_run("qwen-fp32-run"), user_run("qwen-bf16-run")
    p = predict_run(run, "users-rates", Change(precision="bf16"))
    basis = next(c.basis for c in p.classes if c.op_class == "elementwise")
    to = next(g for g in bf16.op_profiles[0].groups if g.unit == "to")
    assert f"for {to.bytes / 1e9:.3g} GB moved under bf16 past what a width change" in basis
    assert "+1.32 ms a step" in basis
    assert to.kernel_us / 1e3 == pytest.approx(1.32, abs=0.01)


def test_the_qwen2s_size_moves_its_one_cast_as_its_class_where_it_held(monkeypatch):
    """Its third recording, after the casts' rule (`retarget.CASTS`) was written: its source
    profiled, its size at Qwen2-1.5B's widths (12 layers) timed, on one loan. −7.2 %, inside
    its band. Its bf16 step runs one cast, its logits' to fp32 (its RMS norms' casts are of a
    residual stream autocast keeps in fp32: no kernel), 1.32 ms a step at either size, since
    the vocabulary sets it; the rule moved it with its class's traffic, × 1.7, and the step
    came out 0.7 points further off than with it held (−6.5 %)."""
    from gpuaudit.predict import retarget

    monkeypatch.syspath_prepend(str(FIXTURES.parents[1] / "examples" / "predict"))
    change = Change(model="user.qwen:build_large")
    source = user_run("qwen2-bf16-run")
    measured = train_samples_per_s(user_run("qwen2-size"))

    def casts(run):
        return [g.kernel_us for g in run.op_profiles[0].groups if g.unit in retarget.CASTS]

    src, tgt = casts(source), casts(user_run("qwen2-size-run"))
    assert len(src) == len(tgt) == 1
    assert tgt[0] / src[0] == pytest.approx(1.0, abs=0.02)
    p = predict_run(source, "qwen2-rates", change)
    assert p.samples_per_s / measured - 1 == pytest.approx(-0.072, abs=0.002)
    assert p.samples_per_s_low <= measured <= p.samples_per_s_high
    monkeypatch.setattr(retarget, "CASTS", frozenset())
    held = predict_run(source, "qwen2-rates", change)
    assert held.samples_per_s / measured - 1 == pytest.approx(-0.065, abs=0.002)
