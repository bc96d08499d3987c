"""`gpuaudit predict` replayed on the real runs of one H200 (three runs of 2026-12-01,
`python -m validation run predict`; the third's log is validation/results/predict-raw.txt,
the first two are in git): each case predicted from one recorded run and compared with the
run that measured it by the entry's own code (validation/predict/compare.py), the error
asserted as achieved. Within 10 % where met; where
not, the reason is in the prediction itself (its notes, its classes' basis) and the
measurement is inside the band, as docs/predict.md's tables show it. The third run is the
first with batch norm's own record (its kernels' time, its layers timed alone in both
precision families, as the recorder of that day did); its checks are asserted here too. The
fourth (validation/results/predict-resnet50-raw.txt, resnet50 only) is the first with the
convolutions timed alone as their steps run them (the recorder of that day)."""

from __future__ import annotations

import functools
import json

import pytest

from gpuaudit.model import Run
from gpuaudit.predict import family as predict_family
from gpuaudit.predict import load_profile, machine_rates
from gpuaudit.predict.kernels import LAYOUT, reattribute
from gpuaudit.predict.precision import timed_norm_ratio
from gpuaudit.specs.catalog import load_catalog
from tests.conftest import FIXTURES
from validation.predict.compare import compare

RUNS = {run: FIXTURES / "predict" / f"h200-1gpu-2026-12-01{tail}-runs.json"
        for run, tail in (("a", ""), ("b", "b"), ("c", "c"), ("d", "d"))}
# c: the first with batch norm timed alone; d (phases R and P1 only): the first with the
# convolutions timed alone as their steps run them (TF32 per family, calls held back to back)
SPECS = load_catalog()

# run → case → (predicted samples/s, error %) as achieved on these runs.
ACHIEVED = {
    "a": {
        "fp32 → bf16": (371.94, +1.81),
        "bf16 → fp32": (58.199, +8.20),
        "124M → 1.3B": (26.928, +3.26),
        "1.3B → 124M": (350.15, -4.15),
        "resnet50 fp32 → bf16": (2969.1, +20.92),
        "resnet50 bf16 → fp32": (925.59, -12.81),
    },
    "b": {
        "fp32 → bf16": (383.25, +4.27),
        "bf16 → fp32": (57.432, +6.07),
        "124M → 1.3B": (27.070, +3.13),
        "1.3B → 124M": (350.27, -4.70),
        "resnet50 fp32 → bf16": (2833.7, +15.52),
        "resnet50 bf16 → fp32": (918.29, -13.67),
    },
    "c": {
        "fp32 → bf16": (376.31, +1.82),
        "bf16 → fp32": (57.536, +6.69),
        "124M → 1.3B": (27.245, +3.78),
        "1.3B → 124M": (350.05, -5.29),
        "resnet50 fp32 → bf16": (2469.2, +2.23),
        "resnet50 bf16 → fp32": (955.84, -9.76),
    },
    "d": {
        "resnet50 fp32 → bf16": (2480.5, +1.05),
        "resnet50 bf16 → fp32": (1059.7, -0.57),
    },
}
# run → the cases over 10 %: resnet50's batch norm without its own record (runs a, b)
OVER_10 = {"a": {"resnet50 fp32 → bf16", "resnet50 bf16 → fp32"},
           "b": {"resnet50 fp32 → bf16", "resnet50 bf16 → fp32"}, "c": set(), "d": set()}


def recorded(run: str = "a") -> dict:
    doc = json.loads(RUNS[run].read_text())
    if run != "a":  # their rates were not marked contended
        return doc["runs"]
    # Every matmul and memory figure of phase R is marked contended: bench/contention.py's
    # GPM look counted our own kernels for up to ~180 ms after a synchronize (fixed the same
    # day; nothing else ran on the GPU). With the marks the run has no usable rates; they are
    # removed here so that the figures, which are clean, serve as the rates. The contention
    # logic itself is unchanged.
    for m in doc["runs"]["R"]["measurements"]:
        m["contention"] = None
    return doc["runs"]


def _compare(run: str):
    rows, preds = compare(recorded(run), 1)
    return {r["case"]: r for r in rows}, preds


@pytest.fixture(scope="module")
def replays():
    # family.meta_tally counts a training step of one model shape on the meta device (seconds
    # each on CI's 2 cores) and is a pure function of that frozen Shape; the three GPT runs ask
    # it for the same two shapes (gpt-124m and gpt-1.3b, both ways), so each is counted once.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(predict_family, "meta_tally", functools.cache(predict_family.meta_tally))
        return {run: _compare(run) for run in ACHIEVED}


@pytest.fixture(scope="module")
def compared(replays):
    return replays["a"]  # the same comparison of run a: computed once for the module


def test_the_rates_run_is_unusable_with_its_contention_marks():
    doc = json.loads(RUNS["a"].read_text())
    assert machine_rates(Run.model_validate(doc["runs"]["R"]), SPECS) is None
    rates = machine_rates(Run.model_validate(recorded()["R"]), SPECS)
    assert rates is not None and rates.roofs.matmul_tflops["bf16"] == pytest.approx(720.31,
                                                                                     abs=0.01)
    assert rates.allreduce is None  # one GPU: no all-reduce measured


@pytest.mark.parametrize(("run", "case"), [(r, c) for r in sorted(ACHIEVED)
                                           for c in sorted(ACHIEVED[r])])
def test_each_case_predicted_from_one_run_against_the_other(replays, run, case):
    rows, _ = replays[run]
    row = rows[case]
    predicted, error = ACHIEVED[run][case]
    assert row["predicted"] == pytest.approx(predicted, rel=1e-4)
    assert row["error_pct"] == pytest.approx(error, abs=0.01)
    assert (abs(row["error_pct"]) > 10) == (case in OVER_10[run])
    assert row["in_band"]  # every measurement inside its prediction's band


@pytest.mark.parametrize("run", sorted(r for r in OVER_10 if OVER_10[r]))
def test_the_cases_over_10_percent_say_why(replays, run):
    _, preds = replays[run]
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


# The third run's batch-norm record, per recording (docs/predict.md's checks): the kernels'
# family, their own time per step (ms), Σ count × time of its 6 shapes timed alone in its own
# family and in the other (ms).
BATCH_NORM = {"fp32": ("cudnn::bn_", 43.290, 39.03, 54.31),
              "bf16": ("at::native::batch_norm_", 60.703, 54.32, 39.37)}
OTHER = {"fp32": "bf16", "bf16": "fp32"}


def batch_norm_entry(mode: str) -> dict:
    m = next(m for m in recorded("c")["P1"]["measurements"]
             if m["name"] == f"resnet50/{mode}/op/elementwise")
    return json.loads(m["params"]["detail"])["batch_norm"]


def elementwise(mode: str):
    return load_profile(Run.model_validate(recorded("c")["P1"]),
                        f"resnet50/{mode}").classes["elementwise"]


@pytest.mark.parametrize("mode", sorted(BATCH_NORM))
def test_batch_norm_is_recorded_in_each_precision(mode):
    family, own_ms, timed_own, timed_other = BATCH_NORM[mode]
    entry = batch_norm_entry(mode)
    # cuDNN's bn_* kernels in fp32, PyTorch's own batch_norm_* in bf16, none of the other
    assert entry["source"] == "cuda kernels"
    assert entry["kernels"] and all(k[0].startswith(family) for k in entry["kernels"])
    assert entry["us_per_step"] / 1e3 == pytest.approx(own_ms, abs=0.001)
    sums = {}
    for prec in (mode, OTHER[mode]):
        rows = [r for r in entry["timed"] if r[2] == prec]
        assert len(rows) == 6  # NORM_SHAPES, in both families
        assert {(r[1], r[3], r[4]) for r in rows} == {
            ("contiguous", "float32" if prec == "fp32" else "bfloat16", "float32")}
        sums[prec] = sum(r[5] * r[6] for r in rows)
    assert (sums[mode], sums[OTHER[mode]]) == (pytest.approx(timed_own, abs=0.01),
                                               pytest.approx(timed_other, abs=0.01))
    assert entry["timed_traffic_share"] == 0.8397
    # the 6 shapes (84 % of the traffic) take ≈ 90 % of the kernels' time in the step
    assert timed_own / own_ms == pytest.approx(0.90, abs=0.01)


@pytest.mark.parametrize(("src", "ratio"), [("fp32", 1.392), ("bf16", 1 / 1.380)])
def test_batch_norms_timed_ratio_matches_the_one_in_the_steps(src, ratio):
    timed = timed_norm_ratio(elementwise(src), src, OTHER[src])
    assert timed is not None
    assert timed[:2] == (pytest.approx(ratio, abs=0.001), 6)
    # bf16 ÷ fp32 of the kernels' own time in the two steps: 60.70 / 43.29 = 1.402; the
    # ratio timed alone is within 2 % of it (the band allows ±12 % for this).
    in_step = BATCH_NORM[OTHER[src]][1] / BATCH_NORM[src][1]
    assert in_step == pytest.approx(1.402 if src == "fp32" else 1 / 1.402, abs=0.001)
    assert abs(timed[0] / in_step - 1) < 0.02


# resnet50 in the third run, predicted vs measured ms of a class: (predicted, measured, ±%)
CLASSES_C = {
    "fp32": {"elementwise": (75.09, 74.12, 11.62), "conv": (14.53, 17.04, 10.0),
             "layout": (13.25, 13.59, 25.0)},
    "bf16": {"elementwise": (70.26, 72.35, 9.23), "conv": (196.33, 167.38, 10.0),
             "layout": (0.0, 1.16, 0.0)},
}


@pytest.mark.parametrize("src", sorted(CLASSES_C))
def test_resnet50_with_batch_norm_timed_alone(replays, src):
    _, preds = replays["c"]
    p = next(p for p in preds if p["source"]["model"] == "resnet50"
             and p["source"]["mode"] == src)
    assert any("both were timed alone" in n for n in p["notes"])
    # and the recorded fp32 step's layout class, whose transposes this old recording counted
    # in part, at 2291 % of its counted work's time (said whatever the change)
    assert all("both were timed alone" in n or n.startswith("layout ran at 2291 %")
               for n in p["notes"])
    assert any(n.startswith("layout ran at") for n in p["notes"]) == (src == "fp32")
    target = reattribute(load_profile(Run.model_validate(recorded("c")["P1"]),
                                      f"resnet50/{OTHER[src]}").classes).classes
    got = {c["op_class"]: c for c in p["classes"]}
    for cls, (predicted, measured, unc) in CLASSES_C[src].items():
        assert got[cls]["predicted_ms"] == pytest.approx(predicted, abs=0.01)
        assert target[cls].ms == pytest.approx(measured, abs=0.01)
        assert got[cls]["uncertainty_pct"] == pytest.approx(unc, abs=0.01)
    assert "timed alone in both precisions" in got["elementwise"]["basis"]
    # elementwise within ±15 % of its measurement (+1.3 %, −2.9 %): batch norm moved by the
    # timed ratio, 43.3 → 60.2 ms (60.7 in the bf16 step), 60.7 → 44.0 (43.3 in fp32's)
    assert abs(got["elementwise"]["predicted_ms"] / target["elementwise"].ms - 1) < 0.03


def test_bf16_to_fp32_lies_in_its_band_by_offsetting_errors(replays):
    # Measured 1,059.21 against the band's top 1,059.37 (0.015 % inside). The band sums its
    # classes' terms; the convolutions' ±10 % is overshot (+17.3 %: cuDNN's FFMA kernels
    # achieve 70 % of their roofline, its tensor-core ones 60 %; +14 %, +17 % in runs a, b),
    # and the step lands inside only because elementwise (−2.1 ms) and the fp32 run's own
    # transforms (1.16 ms, not predicted) go the other way. docs/predict.md says so.
    rows, preds = replays["c"]
    row = rows["resnet50 bf16 → fp32"]
    assert row["high"] - row["measured"] == pytest.approx(0.153, abs=0.001)
    p = next(p for p in preds if p["source"]["model"] == "resnet50"
             and p["source"]["mode"] == "bf16")
    conv = next(c for c in p["classes"] if c["op_class"] == "conv")
    assert conv["predicted_ms"] / CLASSES_C["bf16"]["conv"][1] - 1 > conv["uncertainty_pct"] / 100


def conv_layers_ms(recording: str) -> dict[str, float]:
    """Σ count × time alone of run d's 23 convolution layers, per precision family, as the
    `recording` (fp32 or bf16) timed them."""
    m = next(m for m in recorded("d")["P1"]["measurements"]
             if m["name"] == f"resnet50/{recording}/op/conv")
    sums: dict[str, float] = {}
    for row in json.loads(m["params"]["detail"])["timed_convs"]["timed"]:
        sums[row[9]] = sums.get(row[9], 0.0) + row[12] * row[13]
    return sums


def test_the_convolutions_timed_alone_agree_with_their_steps():
    # Run d, docs/predict.md (e). Each family timed in both recordings agrees within 0.2 %
    # (the first run, before the fixes: bf16's "fp32" family 56.2 ms with TF32 on, against
    # 180.0 in the fp32 recording); each family timed alone is within 4 % of its step's
    # convolutions + cuDNN's transforms (first run: 1.07× and 1.22×).
    fp32, bf16 = conv_layers_ms("fp32"), conv_layers_ms("bf16")
    assert fp32 == {"fp32": pytest.approx(173.77, abs=0.01), "bf16": pytest.approx(30.83, abs=0.01)}
    assert bf16 == {"fp32": pytest.approx(173.81, abs=0.01), "bf16": pytest.approx(30.87, abs=0.01)}
    for family in ("fp32", "bf16"):
        step = reattribute(load_profile(Run.model_validate(recorded("d")["P1"]),
                                        f"resnet50/{family}").classes).classes
        in_step = step["conv"].ms + step[LAYOUT].ms
        assert in_step == pytest.approx({"fp32": 168.26, "bf16": 30.50}[family], abs=0.01)
        assert 1.0 < fp32[family] / in_step < 1.04


@pytest.mark.parametrize(("src", "predicted", "measured"),
                         [("fp32", 29.85, 30.50), ("bf16", 171.71, 168.26)])
def test_resnet50_convolutions_move_by_their_timed_ratio(replays, src, predicted, measured):
    # The conv class carries the transforms (layout is "in the convolutions' timed ratio"):
    # predicted within 2.2 % of the other precision's conv + layout time, inside its ±12 %.
    _, preds = replays["d"]
    p = next(p for p in preds if p["source"]["model"] == "resnet50"
             and p["source"]["mode"] == src)
    got = {c["op_class"]: c for c in p["classes"]}
    assert "timed alone in both precisions" in got["conv"]["basis"]
    assert got[LAYOUT]["predicted_ms"] == 0.0
    assert got["conv"]["predicted_ms"] == pytest.approx(predicted, abs=0.01)
    target = reattribute(load_profile(Run.model_validate(recorded("d")["P1"]),
                                      f"resnet50/{OTHER[src]}").classes).classes
    assert target["conv"].ms + target[LAYOUT].ms == pytest.approx(measured, abs=0.01)
    assert abs(predicted / measured - 1) < got["conv"]["uncertainty_pct"] / 100 / 5


def test_the_fp32_runs_own_transforms_are_not_scaled_into_the_bf16_ones(replays):
    # Run b's fp32 kernel list holds 1.15 ms of cuDNN transforms (run a's did not list them:
    # cuDNN's batch norm filled its 48 places); the bf16 step's are modeled afresh either way.
    for run, measured in (("a", 0.0), ("b", 1.1477)):
        _, preds = replays[run]
        p = next(p for p in preds if p["source"]["model"] == "resnet50"
                 and p["source"]["mode"] == "fp32")
        layout = next(c for c in p["classes"] if c["op_class"] == LAYOUT)
        assert layout["measured_ms"] == pytest.approx(measured, abs=1e-4)
        assert layout["predicted_ms"] == pytest.approx(13.19, abs=0.01)


@pytest.mark.parametrize(("run", "predicted"), [("a", 724.38), ("b", 728.76), ("c", 732.78)])
def test_one_to_two_gpus_is_predicted_but_not_measured_on_one_gpu(replays, run, predicted):
    rows, _ = replays[run]
    row = rows["1 → 2 GPUs (DDP)"]
    assert row["predicted"] == pytest.approx(predicted, rel=1e-4) and "measured" not in row


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
