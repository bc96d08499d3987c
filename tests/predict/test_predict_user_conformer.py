"""A Conformer-S speech recognizer written the way torchaudio writes its Conformer
(`examples/predict/user/conformer.py`: half-step feed-forwards, nn.MultiheadAttention with a
key padding mask from the utterances' lengths, a 31-tap depthwise Conv1d with GLU and
BatchNorm1d, a Conv2d subsampling front end, CTC loss over the padded batch), written after
the present rules and recorded on an H100 as a user runs it: `gpuaudit bench train --model
user.conformer:build --precision bf16 --op-profile`, each target's own `bench train`, `bench
matmul memory`, then the fp32 source and the bf16 step again, in one call. Not tuned on:
no rule was shaped on any figure here. Its bf16 step is one the host binds (3,260
kernels a step, 12 synchronizations), and this loan's host ran it at another pace in each
process."""

import statistics

import pytest

from gpuaudit.predict import Change
from tests.conftest import FIXTURES
from tests.support.predict import assert_user_case, train_samples_per_s, user_case, user_run

EXAMPLES = FIXTURES.parents[1] / "examples" / "predict"

CASES = [  # (recorded, change, measured by, predicted samples/s)
    ("bf16-run", Change(precision="fp32"), "fp32", 680.32),
    ("bf16-run", Change(precision="tf32"), "tf32", 995.32),
    ("bf16-run", Change(batch=128), "bf16-b128", 1205.64),
    ("bf16-run", Change(batch=32), "bf16-b32", 355.29),
    ("fp32-run", Change(precision="tf32"), "tf32", 941.53),
    ("fp32-run", Change(precision="bf16", batch=128), "bf16-b128", 1130.12),
]


@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=[f"{r[:4]}-{m}" for r, _, m, _ in CASES])
def test_a_users_conformer_is_predicted_inside_its_band(case):
    """Six of its seven precision and batch cases within 6.5 % and inside their bands."""
    assert_user_case("conformer", CASES[case], 0.065)


def test_its_fp32_to_bf16_misses_by_the_host_the_fp32_process_ran_on():
    """fp32 → bf16 comes out −38.2 %, outside its band: the bf16 step, host-bound, is
    predicted at the host work the fp32 process timed for it, its bf16 step at batch 1 in 83
    ms (the median of 8 rounds, 74–115), where a process of its own ran the whole bf16 step
    at batch 64 in 59.0 ms: that process's host was at least 1.4× faster. The classes
    predicted for bf16 sum to within 4 % of the bf16 profile's own device time."""
    p, measured = user_case("conformer", "fp32-run", Change(precision="bf16"), "bf16")
    assert p.samples_per_s / measured - 1 == pytest.approx(-0.382, abs=0.003)
    assert not p.samples_per_s_low <= measured <= p.samples_per_s_high
    fp32 = user_run("conformer-fp32-run").op_profiles[0]
    bf16_at_1 = statistics.median(fp32.alt_host_rounds_ms)
    own_step = 1e3 * 64 / measured
    assert (bf16_at_1, own_step) == (pytest.approx(82.8, abs=0.1), pytest.approx(59.0, abs=0.1))
    device = sum(c.predicted_ms for c in p.classes)
    bf16 = user_run("conformer-bf16-run").op_profiles[0]
    assert device == pytest.approx(bf16.busy_ms, rel=0.04)


def test_its_size_step_misses_by_its_sources_pace(monkeypatch):
    """S → M (d 144 → 256) comes out −34.0 %, outside its band. Its bf16 source ran its step
    in 90.2 ms in its recording's process and in 59.0 ms in a process of its own, as fast as
    M's 62.8 there: the prediction keeps the recording's host. Against the source's step in
    the recording, M's is predicted × 1.056 (× 1.018 before its host-bound replay kept the
    device's gap between queued kernels); against its own process's, it measured × 1.064."""
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    p, measured = user_case("conformer", "bf16-run", Change(model="user.conformer:build_medium"),
                            "size")
    assert p.samples_per_s / measured - 1 == pytest.approx(-0.340, abs=0.003)
    assert not p.samples_per_s_low <= measured <= p.samples_per_s_high
    profiled = train_samples_per_s(user_run("conformer-bf16-run"))
    own = train_samples_per_s(user_run("conformer-bf16"))
    assert own / profiled == pytest.approx(1.525, abs=0.005)
    assert profiled / p.samples_per_s == pytest.approx(1.056, abs=0.002)
    assert own / measured == pytest.approx(1.064, abs=0.002)


def test_its_bf16_step_moves_with_the_host_from_process_to_process():
    """The same `bench train` in four processes of their own, one after another on a later
    H100 loan (batch 64, 1, 64, 64): at batch 64 72.2, 64.5 and 86.5 ms a step, the slowest
    1.34× the fastest; at batch 1 92.6 ms, slower than any at batch 64: the step is the
    host's, and its pace moved between processes."""
    from gpuaudit.model.schema import read_run

    steps = {}
    for path in sorted((FIXTURES / "predict" / "user" / "pace").glob("conformer-*-h100.json.gz")):
        run = read_run(path)
        m = next(m for m in run.measurements if m.name.endswith("/step_time"))
        steps[path.name.split("-")[1]] = (m.params["batch"], m.value)
    assert [b for b, _ in steps.values()] == [64, 1, 64, 64]
    at_64 = [ms for b, ms in steps.values() if b == 64]
    assert [round(ms, 1) for ms in at_64] == [72.2, 64.5, 86.5]
    assert max(at_64) / min(at_64) == pytest.approx(1.34, abs=0.005)
    assert steps["process2"][1] > max(at_64)


def test_its_units_land_in_their_classes_and_its_ctc_loss_is_carried_unknown():
    """Its linear layers gemm, its attention's scaled_dot_product_attention attention, its
    Conv1d and Conv2d conv, its batch and layer norms norm, its GLU elementwise. CTC loss,
    which no rule covers, is 0.68 ms of 53.6 ms of device time: named, carried ±50 %."""
    prof = user_run("conformer-bf16-run").op_profiles[0]
    where = {(g.op_class, g.unit) for g in prof.groups}
    for pair in [("gemm", "linear"), ("attention", "scaled_dot_product_attention"),
                 ("conv", "conv1d"), ("conv", "conv2d"), ("norm", "batch_norm"),
                 ("norm", "layer_norm"), ("elementwise", "glu"), ("unknown", "ctc_loss")]:
        assert pair in where
    assert [(u.op, round(u.ms_per_step, 2)) for u in prof.unknown] == [("ctc_loss", 0.68)]
    assert prof.busy_ms == pytest.approx(53.57, abs=0.01)
    p, _ = user_case("conformer", "bf16-run", Change(precision="fp32"), "fp32")
    unknown = {c.op_class: c for c in p.classes}["unknown"]
    assert "ctc_loss not understood" in unknown.basis and unknown.uncertainty_pct == 50
