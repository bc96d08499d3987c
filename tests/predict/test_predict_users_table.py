"""The users' models' evidence (`python -m validation run predict-users`, published in
validation/results/predict-users.md and docs/predict.md) is what the method gives on their
recorded runs now, each model's cases counted apart from those that shaped a rule."""

import dataclasses

import pytest

from validation.harness import RESULTS
from validation.predict.users import MODELS, PACE_MOVED, line, paces, row, table

PUBLISHED = (RESULTS / "predict-users.md").read_text()
CASES = [(m, c) for m in MODELS for c in m.cases if c.change.model is None]


@pytest.mark.parametrize(("model", "case"), CASES,
                         ids=[f"{m.tag}-{c.label}" for m, c in CASES])
def test_each_published_case_is_as_predicted_now(model, case):
    """Its precision and batch cases predicted again from the kept runs (the size changes
    count their models, and are pinned in the models' own tests)."""
    off_pace = abs(paces(model).get(case.recorded, 1.0) - 1) > PACE_MOVED
    assert line(case, row(model, case), off_pace) in PUBLISHED


def test_a_source_whose_step_moved_in_a_process_of_its_own_marks_its_cases():
    """The Conformer's bf16 source ran its step 52 % faster in a process of its own than in
    its recording's: its cases say so; its fp32 source held its pace."""
    conformer = next(m for m in MODELS if m.tag == "conformer")
    moved = paces(conformer)
    assert moved["bf16-run"] == pytest.approx(1.525, abs=0.005)
    assert moved["fp32-run"] == pytest.approx(1.011, abs=0.005)
    assert "| bf16 at batch 32 | 355.3 (302.9–429.6) | 355.5 | −0.1 %; its source off its pace |" \
        in PUBLISHED
    assert "its sources' steps timed again in a process of their own: bf16 +52.5 %, fp32 +1.1 %" \
        in PUBLISHED


def test_a_case_that_shaped_a_rule_is_counted_apart_and_a_miss_is_marked():
    swin = next(m for m in MODELS if m.tag == "swin")
    rows = [{"model": "swin", "case": c.label, "predicted": 100.0, "low": 90.0, "high": 110.0,
             "measured": m, "error": 100.0 / m - 1, "in_band": 90.0 <= m <= 110.0,
             "shaped": ""} for c, m in zip(swin.cases[:3], (100.0, 80.0, 95.0), strict=True)]
    rows[2]["shaped"] = "a rule"
    cases = (*swin.cases[:2], dataclasses.replace(swin.cases[2], shaped="a rule"))
    text = table([(dataclasses.replace(swin, cases=cases), rows)])
    assert "**1 of 2 within 10 %, 1 inside their band**" in text
    assert "apart, the 1 that shaped a rule: 1 within 10 %, 1 inside their band" in text
    assert "| **+25.0 %** (out of band) |" in text
    assert "(shaped a rule: a rule)" in text
    assert "recorded 2026-12-06" in text and "NVIDIA H100 80GB HBM3" in text
