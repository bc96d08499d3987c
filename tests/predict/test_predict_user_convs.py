"""Another width of convolutional models written after the size change's convolution rule was
set (`examples/predict/user`), each recorded once on an H100 as a user runs it (`gpuaudit
bench train --model user.NAME:build --precision bf16 --op-profile`, recorded from a scratch
package named `mine`, renamed here), its wider variant measured in a process of its own
beside its convolutions' time in both models' own steps (`class_times.py`). Not tuned on:
docs/predict.md shows them as they came out."""

import json

import pytest

from gpuaudit.predict import Change, load_profile, machine_rates, predict
from gpuaudit.specs.catalog import load_catalog
from tests.conftest import FIXTURES
from tests.support.predict import train_samples_per_s, user_run

USER = FIXTURES / "predict" / "user"
EXAMPLES = FIXTURES.parents[1] / "examples" / "predict"
SPECS = load_catalog()


# (model, its step's bf16 throughput predicted at the wider width, the conv class's ratio)
CASES = [("vgg", 17429, 1.590), ("c3d", 1110, 1.939)]


@pytest.mark.parametrize(("name", "predicted", "conv_ratio"), CASES)
def test_a_users_wider_convolutional_model_is_predicted_within_its_band(
        monkeypatch, name, predicted, conv_ratio):
    """VGG-11 with batch norm at 1.5× its width: its step 17,429 samples/s predicted,
    16,765 measured (+4.0 %); a C3D-style video classifier at twice its width: 1,110
    predicted, 1,193 measured (−7.0 %); both inside their bands. Their convolutions came out
    −14 % (VGG: × 1.59 against × 1.85) and +13 % (C3D: × 1.94 against × 1.71) of their
    steps' own ratios, inside the group's ±15 %: the fitted FLOP rate of VGG's convolutions
    was above the matmul rate and C3D's fit found no FLOP term, so neither took the middle."""
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    rates = machine_rates(user_run("rates"), SPECS)
    run = user_run(f"{name}-run")
    target = f"user.{name}:build_wide"
    p = predict(load_profile(run, run.op_profiles[0].workload), rates, Change(model=target),
                SPECS)
    assert p.samples_per_s == pytest.approx(predicted, rel=1e-3)
    measured = train_samples_per_s(user_run(f"{name}-wide"))
    assert p.samples_per_s_low <= measured <= p.samples_per_s_high
    assert abs(p.samples_per_s / measured - 1) < 0.10
    conv = {c.op_class: c for c in p.classes}["conv"]
    assert "matmul rate" not in conv.basis
    got = conv.predicted_ms / conv.measured_ms
    assert got == pytest.approx(conv_ratio, abs=0.002)
    times = json.loads((USER / "class-times-h100.json").read_text())["models"]
    want = (times[target]["class_ms"]["conv"] / times[f"user.{name}:build"]["class_ms"]["conv"])
    assert abs(got / want - 1) < conv.uncertainty_pct / 100
    # the source's pace held: the same model timed again in a fresh process
    again, profiled = train_samples_per_s(user_run(f"{name}-again")), train_samples_per_s(run)
    assert again == pytest.approx(profiled, rel=0.02)
