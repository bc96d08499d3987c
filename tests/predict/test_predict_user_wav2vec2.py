"""wav2vec 2.0 Base as fairseq and Hugging Face write it (`examples/predict/user/wav2vec2.py`:
a feature encoder of seven Conv1d layers over the raw waveform, a weight-normed grouped
Conv1d as its positional embedding, a post-norm Transformer with softmax written out, CTC
loss), a family no rule saw, written and recorded on an H100 after every rule here as a
user runs it: `gpuaudit bench train --model user.wav2vec2:build --precision bf16
--op-profile` and fp32, each target's own `bench train` and `bench matmul memory`, in one
call. Not tuned on: no rule was shaped on any figure here. Six of its eight cases within
10 % and inside their bands; its two misses are its host's."""

import pytest

from gpuaudit.predict import Change
from gpuaudit.predict import timeline as tlm
from gpuaudit.predict.grouped import source_host_ms
from tests.conftest import FIXTURES
from tests.support.predict import assert_user_case, train_samples_per_s, user_case, user_run

EXAMPLES = FIXTURES.parents[1] / "examples" / "predict"

CASES = [  # (recorded, change, measured by, predicted samples/s)
    ("bf16-run", Change(precision="fp32"), "fp32", 185.59),
    ("bf16-run", Change(precision="tf32"), "tf32", 528.83),
    ("fp32-run", Change(precision="bf16"), "bf16", 510.3),
    ("fp32-run", Change(precision="tf32"), "tf32", 494.0),
    ("bf16-run", Change(batch=64), "bf16-b64", 672.25),
    ("fp32-run", Change(precision="bf16", batch=64), "bf16-b64", 619.79),
]


@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=[f"{r[:4]}-{m}" for r, _, m, _ in CASES])
def test_a_users_wav2vec2_is_predicted_within_10_percent_inside_its_band(case):
    assert_user_case("wav2vec2", CASES[case], 0.10)


def test_its_units_land_in_their_classes():
    """The feature encoder's and the positional embedding's Conv1d are conv, the projections
    gemm, the scores' matmul and softmax attention, GroupNorm and LayerNorm norm, the weight
    norm elementwise; CTC loss, which no rule covers, is the one unknown operator."""
    for name in ("wav2vec2-bf16-run", "wav2vec2-fp32-run"):
        prof = user_run(name).op_profiles[0]
        where = {(g.op_class, g.unit) for g in prof.groups}
        for pair in [("conv", "conv1d"), ("gemm", "linear"), ("attention", "matmul"),
                     ("attention", "softmax"), ("norm", "group_norm"), ("norm", "layer_norm"),
                     ("elementwise", "_weight_norm")]:
            assert pair in where
        assert {u for c, u in where if c == "unknown"} == {"ctc_loss"}


def test_its_batch_16_misses_by_a_host_the_recording_read_faster_than_it_ran():
    """bf16 at batch 16 comes out +49.0 %, outside its band. At its host's pace at batch 1
    (49.3 ms a step) the source's kernels replay in 59.4 ms against the 54.5 timed, so the
    host is taken faster (× 0.41 of its profiled time, where batch 1 says 0.50) and batch 16,
    host-bound, at 40.5 ms. It ran at 60.4 in a process of its own, as the source's step did
    there (61.3 ms): the step is the host's at either batch, and that host ran 11 % slower
    than the profiling process's."""
    p, measured = user_case("wav2vec2", "bf16-run", Change(batch=16), "bf16-b16")
    assert p.samples_per_s / measured - 1 == pytest.approx(0.490, abs=0.003)
    assert not p.samples_per_s_low <= measured <= p.samples_per_s_high
    rec = user_run("wav2vec2-bf16-run").op_profiles[0]
    tl = rec.timeline
    lat = tlm.latency_us(tl)
    at_batch_1 = source_host_ms(rec) * 1e3 / tlm.host_us(tl, lat)
    assert at_batch_1 == pytest.approx(0.504, abs=0.001)
    assert tlm.period(tl, tl.dur_us, at_batch_1, lat)[0] / 1e3 == pytest.approx(59.4, abs=0.1)
    assert rec.step_ms == pytest.approx(54.5, abs=0.1)
    assert any("× 0.41, assumed" in b for b in p.basis)
    own = 32e3 / train_samples_per_s(user_run("wav2vec2-bf16"))
    assert (16e3 / measured, own) == (pytest.approx(60.4, abs=0.1), pytest.approx(61.3, abs=0.1))


def test_its_smaller_size_misses_by_the_host_its_replay_exposes(monkeypatch):
    """Base → small (d 768 → 512, 12 → 8 layers) comes out −16.7 %, outside its band: the
    classes predicted for the small model sum to 35.0 ms and it ran in 34.6, its host hidden,
    where the replay exposes 6.5 ms of host time behind its 12 synchronizations a step (the
    source's step exposed 4.2 ms of its 54.5)."""
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    p, measured = user_case("wav2vec2", "bf16-run", Change(model="user.wav2vec2:build_small"),
                            "size")
    assert p.samples_per_s / measured - 1 == pytest.approx(-0.167, abs=0.003)
    assert not p.samples_per_s_low <= measured <= p.samples_per_s_high
    device = sum(c.predicted_ms for c in p.classes)
    assert (device, 32e3 / measured) == (pytest.approx(35.0, abs=0.1),
                                         pytest.approx(34.6, abs=0.1))
    assert p.step_ms - device == pytest.approx(6.5, abs=0.1)
    rec = user_run("wav2vec2-bf16-run").op_profiles[0]
    assert len(rec.timeline.syncs) / rec.timeline.steps == pytest.approx(12.3, abs=0.1)
    assert rec.step_ms - rec.busy_ms == pytest.approx(4.2, abs=0.1)

