"""`gpuaudit predict` replayed on the real runs of one H200 (two runs of 2026-12-01,
`bash scripts/device_predict.sh predict`, docs/device-runs/2026-12-01-h200-1gpu-predict.txt
and …-predict-2.txt): each case predicted from one recorded run and compared with the run
that measured it, the error asserted as achieved. Within 10 % where met; where not, the
reason is in the prediction itself (its notes, its classes' basis) and the measurement is
inside the band, as docs/predict.md's table shows it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from gpuaudit.model import Run
from gpuaudit.predict import load_profile, machine_rates
from gpuaudit.predict.kernels import LAYOUT, reattribute
from gpuaudit.specs.catalog import load_catalog

from .conftest import FIXTURES

RUNS = FIXTURES / "predict" / "h200-1gpu-2026-12-01-runs.json"
RUNS_B = FIXTURES / "predict" / "h200-1gpu-2026-12-01b-runs.json"  # the second run
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "device_predict.py"
SPECS = load_catalog()

# run → case → (predicted samples/s, error %) as achieved on these runs.
ACHIEVED = {
    "a": {
        "fp32 → bf16": (371.94, +1.81),
        "bf16 → fp32": (58.199, +8.20),
        "124M → 1.3B": (27.212, +4.34),
        "1.3B → 124M": (343.18, -6.06),
        "resnet50 fp32 → bf16": (2969.1, +20.92),
        "resnet50 bf16 → fp32": (925.59, -12.81),
    },
    "b": {
        "fp32 → bf16": (383.25, +4.27),
        "bf16 → fp32": (57.432, +6.07),
        "124M → 1.3B": (27.356, +4.23),
        "1.3B → 124M": (343.34, -6.59),
        "resnet50 fp32 → bf16": (2833.7, +15.52),
        "resnet50 bf16 → fp32": (918.29, -13.67),
    },
}
OVER_10 = {"resnet50 fp32 → bf16", "resnet50 bf16 → fp32"}


def recorded(run: str = "a") -> dict:
    if run == "b":  # its rates were not marked contended
        return json.loads(RUNS_B.read_text())["runs"]
    doc = json.loads(RUNS.read_text())
    # Every matmul and memory figure of phase R is marked contended: bench/contention.py's
    # GPM look counted our own kernels for up to ~180 ms after a synchronize (fixed the same
    # day; nothing else ran on the GPU). With the marks the run has no usable rates; they are
    # removed here so that the figures, which are clean, serve as the rates. The contention
    # logic itself is unchanged.
    for m in doc["runs"]["R"]["measurements"]:
        m["contention"] = None
    return doc["runs"]


def device_predict():
    spec = importlib.util.spec_from_file_location("device_predict", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compare(run: str):
    rows, preds = device_predict().compare(recorded(run), 1)
    return {r["case"]: r for r in rows}, preds


@pytest.fixture(scope="module")
def compared():
    return _compare("a")


@pytest.fixture(scope="module")
def both():
    return {"a": _compare("a"), "b": _compare("b")}


def test_the_rates_run_is_unusable_with_its_contention_marks():
    doc = json.loads(RUNS.read_text())
    assert machine_rates(Run.model_validate(doc["runs"]["R"]), SPECS) is None
    rates = machine_rates(Run.model_validate(recorded()["R"]), SPECS)
    assert rates is not None and rates.roofs.matmul_tflops["bf16"] == pytest.approx(720.31,
                                                                                     abs=0.01)
    assert rates.allreduce is None  # one GPU: no all-reduce measured


@pytest.mark.parametrize(("run", "case"), [(r, c) for r in sorted(ACHIEVED)
                                           for c in sorted(ACHIEVED[r])])
def test_each_case_predicted_from_one_run_against_the_other(both, run, case):
    rows, _ = both[run]
    row = rows[case]
    predicted, error = ACHIEVED[run][case]
    assert row["predicted"] == pytest.approx(predicted, rel=1e-4)
    assert row["error_pct"] == pytest.approx(error, abs=0.01)
    assert (abs(row["error_pct"]) > 10) == (case in OVER_10)
    assert row["in_band"]  # every measurement inside its prediction's band


@pytest.mark.parametrize("run", ["a", "b"])
def test_the_cases_over_10_percent_say_why(both, run):
    _, preds = both[run]
    for p in preds:
        if p["source"]["model"] != "resnet50":
            # (run b's gpt-1.3b profile outlasted its timed step by 0.02 %: scaled, said)
            assert all(n.startswith("profiled kernels summed") for n in p["notes"])
            continue
        # Batch norm runs cuDNN's kernels in fp32 and PyTorch's own in bf16: the recording
        # times one implementation only. Its time is carried per element (one block per
        # channel: latency-bound), ±50 % on it; said in the notes and the class's basis.
        assert any("batch norm changes implementation" in n for n in p["notes"])
        elem = next(c for c in p["classes"] if c["op_class"] == "elementwise")
        assert "keeps its" in elem["basis"] and "not in it" in elem["basis"]
        assert elem["uncertainty_pct"] > 35


def test_the_fp32_runs_own_transforms_are_not_scaled_into_the_bf16_ones(both):
    # Run b's fp32 kernel list holds 1.15 ms of cuDNN transforms (run a's did not list them:
    # cuDNN's batch norm filled its 48 places); the bf16 step's are modeled afresh either way.
    for run, measured in (("a", 0.0), ("b", 1.1477)):
        _, preds = both[run]
        p = next(p for p in preds if p["source"]["model"] == "resnet50"
                 and p["source"]["mode"] == "fp32")
        layout = next(c for c in p["classes"] if c["op_class"] == LAYOUT)
        assert layout["measured_ms"] == pytest.approx(measured, abs=1e-4)
        assert layout["predicted_ms"] == pytest.approx(13.19, abs=0.01)


def test_one_to_two_gpus_is_predicted_but_not_measured_on_one_gpu(compared):
    rows, _ = compared
    row = rows["1 → 2 GPUs (DDP)"]
    assert row["predicted"] == pytest.approx(724.38, rel=1e-4) and "measured" not in row


def test_layout_transforms_predicted_from_fp32_match_the_bf16_recording(compared):
    _, preds = compared
    p = next(p for p in preds if p["source"]["mode"] == "fp32"
             and p["source"]["model"] == "resnet50")
    predicted = next(c for c in p["classes"] if c["op_class"] == LAYOUT)["predicted_ms"]
    bf16 = load_profile(Run.model_validate(recorded()["P1"]), "resnet50/bf16")
    measured = reattribute(bf16.classes).classes[LAYOUT].ms
    # 2 × 27.8 GB at 4,223 GB/s against the nchwToNhwc/nhwcToNchw kernels' time.
    assert predicted == pytest.approx(13.185, abs=0.001)
    assert measured == pytest.approx(13.492, abs=0.001)


def test_convolutions_achieve_a_share_of_their_roofline_in_both_precisions(compared):
    _, preds = compared
    shares = {p["source"]["mode"]: next(c["achieved_pct"] for c in p["classes"]
                                        if c["op_class"] == "conv")
              for p in preds if p["source"]["model"] == "resnet50"}
    # cuDNN's FFMA convolutions (fp32) and its tensor-core ones (bf16): close, not equal —
    # the conv class of each resnet prediction is off by −12 % / +14 % from it.
    assert shares == {"fp32": 69.27, "bf16": 60.67}


def test_attention_achieves_a_share_that_carries_across_precision_and_size(compared):
    _, preds = compared
    shares = {(p["source"]["model"], p["source"]["mode"]): next(
        c["achieved_pct"] for c in p["classes"] if c["op_class"] == "attention")
        for p in preds if p["source"]["model"].startswith("gpt")}
    assert shares == {("gpt-124m", "fp32"): 74.09, ("gpt-124m", "bf16"): 77.29,
                      ("gpt-1.3b", "bf16"): 82.0}
