"""`gpuaudit predict` with batch norm's layers timed alone in both precision families
(the recorder of that day), on a planted copy of the second H200 run of 2026-12-01
(tests/fixtures/predict/h200-1gpu-2026-12-01b-runs.json): the recorded resnet50 steps with a
`batch_norm` entry added to their elementwise class. The timings planted here are made up
(their ratio is near the ×1.37 per element docs/predict.md estimates); the expected
predictions are derived by hand from the recording's figures. The recording itself, without
the entry, replays as before (tests/predict/test_predict_replay.py). No torch needed."""

from __future__ import annotations

import copy
import json
import math

import pytest

from gpuaudit.model import Run
from gpuaudit.predict import Change, load_profile, machine_rates, predict
from gpuaudit.predict.precision import U_DISPATCH, U_NORM_TIMED, timed_norm_ratio
from gpuaudit.specs.catalog import load_catalog
from tests.conftest import FIXTURES

RUNS_B = FIXTURES / "predict" / "h200-1gpu-2026-12-01b-runs.json"
SPECS = load_catalog()
FIELDS = ["shape", "memory_format", "precision", "dtype", "weight_dtype", "count", "ms"]
# resnet50's six biggest batch-norm shapes at batch 256 (layers per step), and made-up times
# of one forward + backward, ms: cuDNN's fp32, PyTorch's own bf16.
PLANTED = [((256, 256, 56, 56), 4, 3.0, 4.2), ((256, 512, 28, 28), 5, 1.5, 2.1),
           ((256, 1024, 14, 14), 7, 0.75, 1.0), ((256, 64, 56, 56), 6, 0.8, 1.1),
           ((256, 64, 112, 112), 1, 3.1, 4.0), ((256, 128, 28, 28), 7, 0.4, 0.6)]
SHARE = 0.84  # their share of batch norm's traffic: 9,332,736 of 11,113,984 elements/sample
# Σ count × time: fp32 4·3.0 + 5·1.5 + 7·0.75 + 6·0.8 + 1·3.1 + 7·0.4 = 35.45 ms;
# bf16 4·4.2 + 5·2.1 + 7·1.0 + 6·1.1 + 1·4.0 + 7·0.6 = 49.1 ms.
FP32_SUM, BF16_SUM = 35.45, 49.1

# The recording's resnet50 elementwise classes (bytes per step) and the run's copy rate.
FP32_BYTES, FP32_ALT = 144_339_752_456, 73_123_477_016
BF16_BYTES, BF16_ALT = 73_123_477_016, 144_339_752_456
FP32_NORM = 34_142_902_528 + 22_762_076_672  # cudnn_batch_norm(_backward)'s traffic
BF16_NORM = 17_071_823_104 + 11_381_357_056  # native_batch_norm(_backward)'s
FP32_MS, BF16_MS = 71.69267966666666, 72.68032066666672
COPY_GBPS = 4220.152570286393


def planted(mode: str, us_per_step: float = 0.0) -> dict:
    docs = copy.deepcopy(json.loads(RUNS_B.read_text())["runs"])
    timed = [[list(s), "contiguous", p, dt, "float32", n, fp32 if p == "fp32" else bf16]
             for p, dt in (("fp32", "float32"), ("bf16", "bfloat16"))
             for s, n, fp32, bf16 in PLANTED]
    for m in docs["P1"]["measurements"]:
        if m["name"] == f"resnet50/{mode}/op/elementwise":
            detail = json.loads(m["params"]["detail"])
            detail["batch_norm"] = {"us_per_step": us_per_step, "timed": timed,
                                    "timed_fields": FIELDS, "timed_traffic_share": SHARE}
            m["params"]["detail"] = json.dumps(detail)
    return docs


def _predict(docs: dict, mode: str, target: str):
    rates = machine_rates(Run.model_validate(docs["R"]), SPECS)
    assert rates is not None and rates.roofs.memory_gbps == pytest.approx(COPY_GBPS)
    profile = load_profile(Run.model_validate(docs["P1"]), f"resnet50/{mode}")
    return profile, predict(profile, rates, Change(precision=target), SPECS)


def _elementwise(p):
    return next(c for c in p.classes if c.op_class == "elementwise")


def test_the_timed_ratio_is_time_weighted_over_the_shapes_timed_in_both():
    profile, _ = _predict(planted("fp32"), "fp32", "bf16")
    w = profile.classes["elementwise"]
    assert timed_norm_ratio(w, "fp32", "bf16") == (pytest.approx(BF16_SUM / FP32_SUM), 6,
                                                   SHARE)
    assert timed_norm_ratio(w, "bf16", "fp32")[0] == pytest.approx(FP32_SUM / BF16_SUM)
    assert timed_norm_ratio(w, "tf32", "bf16")[0] == pytest.approx(BF16_SUM / FP32_SUM)
    assert timed_norm_ratio(w, "fp32", "fp16") is None  # fp16 was not timed


def _by_hand(ms: float, nbytes: float, alt: float, norm: float, ratio: float, width: float,
             norm_ms: float | None = None) -> tuple[float, float]:
    """The elementwise class after the change, and its relative uncertainty, by hand."""
    others = (nbytes - norm) / (COPY_GBPS * 1e9) * 1e3  # its other operators at the copy rate
    low = norm / nbytes * ms  # batch norm's share of the traffic × the class's time
    if norm_ms is None:
        norm_ms = ms - others  # an upper bound: the recording lists no batch-norm kernels
        u_source = (norm_ms - low) / norm_ms
    else:
        u_source = 0.0
    rest = (ms - norm_ms) * (alt - norm * width) / (nbytes - norm)
    new = norm_ms * ratio + rest
    u_norm = math.sqrt(U_NORM_TIMED**2 + ((1 - SHARE) * U_DISPATCH) ** 2 + u_source**2)
    return new, math.hypot(0.05 * rest / new, u_norm * norm_ms * ratio / new)


@pytest.mark.parametrize(("mode", "target", "us", "expected"), [
    # fp32 → bf16, batch norm's source time the bound: 71.693 ms − 87.43 GB at 4,220 GB/s
    # (20.718 ms) = 50.974 ms; × 49.1 / 35.45 = 70.602 ms; the other operators 20.718 ms ×
    # 0.51091 (their bf16 traffic ÷ fp32's) = 10.585 ms.
    ("fp32", "bf16", 0.0, 81.187),
    # bf16 → fp32: 72.680 − 44.67 GB at the copy rate (10.585 ms) = 62.095 ms × 35.45 / 49.1
    # = 44.833 ms; the others 10.585 ms × 1.9573 = 20.718 ms.
    ("bf16", "fp32", 0.0, 65.551),
    # fp32 → bf16 with the kernels' own time listed (42.3 ms, what run a's cuDNN kernels
    # took): 42.3 × 1.38505 = 58.588 ms; the others (71.693 − 42.3) × 0.51091 = 15.017 ms.
    ("fp32", "bf16", 42_300.0, 73.604),
])
def test_batch_norm_moves_by_its_timed_ratio(mode, target, us, expected):
    fp32 = mode == "fp32"
    _, before = _predict(json.loads(RUNS_B.read_text())["runs"], mode, target)
    _, after = _predict(planted(mode, us), mode, target)
    old, new = _elementwise(before), _elementwise(after)
    ratio = BF16_SUM / FP32_SUM if fp32 else FP32_SUM / BF16_SUM
    ms, unc = _by_hand(*((FP32_MS, FP32_BYTES, FP32_ALT, FP32_NORM) if fp32 else
                         (BF16_MS, BF16_BYTES, BF16_ALT, BF16_NORM)), ratio,
                       0.5 if fp32 else 2.0, us / 1e3 if us else None)
    assert new.predicted_ms == pytest.approx(ms, rel=1e-6)
    assert new.predicted_ms == pytest.approx(expected, abs=1e-3)
    assert new.uncertainty_pct == pytest.approx(100 * unc, abs=0.01)
    # Every other class as before: the step moves by the elementwise class alone, and so do
    # the band's ends.
    assert [(c.op_class, c.predicted_ms, c.uncertainty_pct) for c in after.classes
            if c.op_class != "elementwise"] == \
        [(c.op_class, c.predicted_ms, c.uncertainty_pct) for c in before.classes
         if c.op_class != "elementwise"]
    delta = new.predicted_ms - old.predicted_ms
    assert after.step_ms == pytest.approx(before.step_ms + delta, abs=1e-5)
    # (the classes' uncertainties are printed to 0.01 %: 0.01 ms here)
    u_old, u_new = old.uncertainty_pct / 100, new.uncertainty_pct / 100
    assert after.step_ms_low == pytest.approx(
        before.step_ms_low - old.predicted_ms * (1 - u_old) + new.predicted_ms * (1 - u_new),
        abs=0.01)
    assert after.step_ms_high == pytest.approx(
        before.step_ms_high - old.predicted_ms * (1 + u_old) + new.predicted_ms * (1 + u_new),
        abs=0.01)
    assert after.samples_per_s == pytest.approx(256e3 / after.step_ms)
    # Said in the class's basis and the notes; the ±50 % of the untimed rule is gone.
    assert "timed alone in both precisions" in new.basis and "not in it" not in new.basis
    assert ("upper bound" in new.basis) == (us == 0)
    assert any("both were timed alone" in n for n in after.notes)
    assert not any("does not time the new ones" in n for n in after.notes)


def test_with_its_kernels_listed_the_band_narrows_to_the_timings():
    _, before = _predict(json.loads(RUNS_B.read_text())["runs"], "fp32", "bf16")
    _, after = _predict(planted("fp32", 42_300.0), "fp32", "bf16")
    # ±50 % on batch norm (83 % of the class) before; ±12 % ⊕ 16 % untimed × 50 % = ±14.4 %
    # on batch norm (80 % of the class) after.
    assert _elementwise(before).uncertainty_pct == pytest.approx(41.41, abs=0.01)
    assert _elementwise(after).uncertainty_pct == pytest.approx(11.52, abs=0.01)
    assert after.uncertainty_pct < before.uncertainty_pct / 2


def test_without_timing_in_the_target_family_the_old_rule_holds():
    # fp32 → fp16: cuDNN in both, and no fp16 timing: batch norm keeps its time, exactly as
    # without the entry.
    _, before = _predict(json.loads(RUNS_B.read_text())["runs"], "fp32", "fp16")
    _, after = _predict(planted("fp32"), "fp32", "fp16")
    assert after.step_ms == before.step_ms and after.classes == before.classes
    assert "keeps its" in _elementwise(after).basis
