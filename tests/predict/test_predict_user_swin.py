"""A Swin-T written the way its reference implementation writes it (`examples/predict/user/
swin.py`: shifted windows by `torch.roll` behind an attention mask, a relative-position bias
gathered from its table, patch merging by strided slices), written after the present rules
and recorded on an H100 as a user runs it: `gpuaudit bench train --model user.swin:build
--precision bf16 --op-profile`, each target's own `bench train` and `bench matmul memory`
in one call, then the fp32 source with the bf16 and tf32 steps again in a second call on the
same loan. Not tuned on: no rule was shaped on any figure here."""

import statistics

import pytest

from gpuaudit.predict import Change
from tests.support.predict import assert_user_case, train_samples_per_s, user_case, user_run

CASES = [  # (recorded, change, measured by, predicted samples/s)
    ("bf16-run", Change(precision="fp32"), "fp32", 822.44),
    ("bf16-run", Change(precision="tf32"), "tf32", 1350.33),
    ("bf16-run", Change(batch=128), "bf16-b128", 1915.23),
    ("bf16-run", Change(batch=32), "bf16-b32", 767.19),
    ("fp32-run", Change(precision="tf32"), "tf32", 1367.50),
    ("fp32-run", Change(precision="bf16", batch=128), "bf16-b128", 1795.24),
]


@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=[f"{r[:4]}-{m}" for r, _, m, _ in CASES])
def test_a_users_swin_is_predicted_inside_its_band(case):
    """Six of its seven cases within 6 % and inside their bands: −4.6 to +5.3 %."""
    assert_user_case("swin", CASES[case], 0.06)


def test_its_fp32_to_bf16_misses_by_the_host_the_fp32_process_ran_on():
    """fp32 → bf16 comes out +19.0 %, inside its ±20 % band but not within 10 %. Its device
    time is right: the classes predicted for bf16 sum to within 1 % of the bf16 profile's
    own. The bf16 step is one the host binds, and the fp32 process's host ran the fp32 step's
    work with the device held in 28.0 ms (median of 8 rounds) where the bf16 process's ran
    the same work in 44.1; the bf16 step measured beside it ran 8 % slower than its own
    profile, too. The prediction says the host's pace moved ±30 % while it was profiled."""
    p, measured = user_case("swin", "fp32-run", Change(precision="bf16"), "bf16")
    assert p.samples_per_s / measured - 1 == pytest.approx(0.190, abs=0.003)
    assert p.samples_per_s_low <= measured <= p.samples_per_s_high
    assert any("moved ±30 %" in n for n in p.notes)

    bf16 = user_run("swin-bf16-run").op_profiles[0]
    device = sum(c.predicted_ms for c in p.classes)
    assert device == pytest.approx(bf16.busy_ms, rel=0.01)

    fp32 = user_run("swin-fp32-run").op_profiles[0]
    fast = statistics.median(fp32.host_held_ms["fp32"])
    slow = statistics.median(bf16.host_held_ms["fp32"])
    assert (fast, slow) == (pytest.approx(28.0, abs=0.1), pytest.approx(44.1, abs=0.1))
    assert train_samples_per_s(user_run("swin-bf16-run")) / measured == pytest.approx(
        1.081, abs=0.002)


def test_its_units_land_in_their_classes():
    """The shifted window's `roll` is elementwise work, its `linear` layers gemm, the
    attention's batched `matmul` and its gathered bias attention, the patch `conv2d` conv,
    `layer_norm` norm: the recorded bf16 step has no time outside a class."""
    prof = user_run("swin-bf16-run").op_profiles[0]
    where = {(g.op_class, g.unit) for g in prof.groups}
    for pair in [("elementwise", "roll"), ("gemm", "linear"), ("attention", "matmul"),
                 ("attention", "softmax"), ("conv", "conv2d"), ("norm", "layer_norm")]:
        assert pair in where
    assert not prof.unknown
