"""A class above its roofline is a fact of the recorded step: the note and each class's
achieved share are the recording's, whatever the change. A size change recalibrates its
classes against the work they had before (for the changes that follow), which a smaller
model's time put above any roofline: GPT with hand-written attention predicted at its
smaller size (the H100's 17th recording, kept) was said to have run its matmuls at 207 %,
its attention at 232 % and its optimizer at 271 %, where its recorded step ran them at
under 100 %."""

from gpuaudit.predict import Change, load_profile, predict
from gpuaudit.specs.catalog import load_catalog
from tests.conftest import FIXTURES
from tests.support.predict import kept_h100

SPECS = load_catalog()


def _roofs(p):
    return [n for n in p.notes if "of the time its counted work allows" in n]


def test_a_smaller_model_is_not_said_to_have_run_above_its_roofline(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES.parents[1] / "examples" / "predict"))
    run, rates = kept_h100("seventeenth", "gpt_manual")
    profile = load_profile(run, "gpt-manual/bf16")
    source = predict(profile, rates, Change(batch=profile.batch * 2), SPECS)
    small = predict(profile, rates, Change(model="zoo.gpt_manual:build_small"), SPECS)
    assert not _roofs(small)
    recorded = {c.op_class: c.achieved_pct for c in source.classes}
    assert {c.op_class: c.achieved_pct for c in small.classes} == recorded
    assert all(a is None or a < 120 for a in recorded.values())


def test_a_class_that_ran_above_its_roofline_is_said_to_whatever_the_change():
    """MobileNetV2's fp32 step (the 15th) ran its matmuls at 164 % of their ideal: said for
    another precision as for a batch, where the precision change's recalibration hid it."""
    run, rates = kept_h100("fifteenth", "mobilenet")
    profile = load_profile(run, "mobilenet-v2/fp32")
    for change in (Change(precision="bf16"), Change(batch=profile.batch * 2)):
        p = predict(profile, rates, change, SPECS)
        assert any(n.startswith("gemm ran at 164 %") for n in _roofs(p))
        assert next(c for c in p.classes if c.op_class == "gemm").achieved_pct > 120
