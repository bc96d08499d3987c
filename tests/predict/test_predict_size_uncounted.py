"""A size change's groups whose class the fp32 count sees nothing of (`predict.retarget`:
autocast's weight casts, a matmul's copy of a transposed operand) move by their unit's
traffic in its other classes. GPT with hand-written attention (the H100's 17th, kept) at its
smaller size: its copy class's 1.8 ms, kept, put the step at −7.8 %, out of its band; moved,
−4.1 %; with its casts (2.1 ms of `to`, `retarget.CASTS`) moved by their class, −1.4 %."""

import pytest

from gpuaudit.predict import Change, load_profile, predict
from gpuaudit.predict import retarget as rt
from gpuaudit.specs.catalog import load_catalog
from tests.conftest import FIXTURES
from tests.support.predict import kept_h100

SPECS = load_catalog()


def test_uncounted_copies_move_by_their_units_traffic(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES.parents[1] / "examples" / "predict"))
    run, rates = kept_h100("seventeenth", "gpt_manual")
    p = predict(load_profile(run, "gpt-manual/bf16"), rates,
                Change(model="zoo.gpt_manual:build_small"), SPECS)
    copy = next(c for c in p.classes if c.op_class == "copy")
    assert "matmul nothing counted in its class, its unit's traffic ×0.333" in copy.basis
    assert "linear nothing counted in its class, its unit's traffic ×0.475" in copy.basis
    assert copy.predicted_ms / copy.measured_ms == pytest.approx(0.42, abs=0.01)
    assert copy.uncertainty_pct == pytest.approx(100 * rt.U_UNIT, abs=0.5)
    # measured 644.1 samples/s at the small size on the same loan
    assert p.samples_per_s / 644.1 - 1 == pytest.approx(-0.014, abs=0.002)
    assert p.samples_per_s_low <= 644.1 <= p.samples_per_s_high


def test_a_unit_that_moves_nothing_counted_anywhere_is_kept():
    counted = rt.Counted("m", {}, {("gemm", "linear"): 10.0}, {}, 1, 1, [])
    wider = rt.Counted("m", {}, {("gemm", "linear"): 30.0}, {}, 1, 1, [])
    assert rt._unit_traffic_ratio(counted, wider, "linear") == 3.0
    assert rt._unit_traffic_ratio(counted, wider, "to") is None
