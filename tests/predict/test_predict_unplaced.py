"""A step its measured host cannot fill: the replay of the profiled timeline lasts the timed
step only with a host slower than its step at batch 1 says, so part of the step is placed
nowhere. The MoE's bf16 step (the H100's 20th recording, kept) is one: predicted to gain
nothing at twice the batch, where in a plain loop on an H100 (`batch_steps.py`) its step
gained more than its kernels did. A prediction to a larger batch or model says so."""

import json

import pytest

from gpuaudit.predict import Change, load_profile, predict
from gpuaudit.predict.replaynotes import HOST_SHORT_NOTE
from gpuaudit.specs.catalog import load_catalog
from tests.conftest import FIXTURES
from tests.support.predict import kept_h100
from validation.predict.batch_steps import follows, settled_ms

SPECS = load_catalog()
STEPS = FIXTURES / "predict" / "zoo" / "moe-batch-steps-h100.json"
UNPLACED = "part of the step is placed nowhere"


@pytest.fixture(scope="module")
def moe():
    return kept_h100("twentieth", "moe")


def _unplaced(p):
    return [n for n in p.notes if UNPLACED in n]


def test_the_moe_step_follows_its_kernels_where_its_replay_does_not(moe):
    """In the loop its bf16 step gained 1.42 ms per ms of kernels from batch 16 to 32 (34.2
    → 42.4 ms; 1.90 on another loan), its fp32 step 1.02; the replay from the recording keeps
    its step at batch 32 within 1 % of the one at 16."""
    bf16, fp32, again, lstm, _ = json.loads(STEPS.read_text())["runs"]
    gained = {(a, b): s for a, b, s in follows(bf16)}
    assert gained[(16, 32)] == pytest.approx(1.42, abs=0.01)
    assert {(a, b): s for a, b, s in follows(fp32)}[(16, 32)] == pytest.approx(1.02, abs=0.01)
    # on a later loan's slower host, more; the LSTM, host-bound with no synchronization in
    # its step, gained nothing from batch 1 to 256
    assert {(a, b): s for a, b, s in follows(again)}[(16, 32)] == pytest.approx(1.90, abs=0.01)
    assert abs({(a, b): s for a, b, s in follows(lstm)}[(1, 256)]) < 0.05
    at = {r["batch"]: settled_ms(r) for r in bf16["batches"]}
    assert at[32] / at[16] == pytest.approx(1.24, abs=0.01)
    run, rates = moe
    p = predict(load_profile(run, "moe-8x/bf16"), rates, Change(batch=32), SPECS)
    assert p.step_ms / p.measured_step_ms < 1.01


def test_a_larger_batch_of_it_is_said_to_may_add_more(moe):
    run, rates = moe
    [note] = _unplaced(predict(load_profile(run, "moe-8x/bf16"), rates, Change(batch=32), SPECS))
    assert "a host 28 % slower than its measured pace" in note
    assert "at its 32 synchronizations a step" in note


def test_a_smaller_batch_or_another_precision_is_not(moe):
    run, rates = moe
    for change in (Change(batch=8), Change(precision="fp32")):
        assert not _unplaced(predict(load_profile(run, "moe-8x/bf16"), rates, change, SPECS))


def test_its_fp32_step_the_measured_host_fills_is_not(moe):
    run, rates = moe
    assert not _unplaced(predict(load_profile(run, "moe-8x/fp32"), rates, Change(batch=32),
                                 SPECS))


def test_a_host_measured_as_slow_as_the_replay_needs_takes_the_note_away(moe):
    """A copy of the recording whose step at batch 1 reads 1.3 × slower (the host the replay
    needed, and more): the measured host fills the step."""
    run, rates = moe
    bf16 = next(p for p in run.op_profiles if p.precision == "bf16")
    slow = bf16.model_copy(update={"host_step_ms": bf16.host_step_ms * (1.3 + HOST_SHORT_NOTE)})
    planted = run.model_copy(update={"op_profiles": tuple(
        slow if p is bf16 else p for p in run.op_profiles)})
    assert not _unplaced(predict(load_profile(planted, "moe-8x/bf16"), rates, Change(batch=32),
                                 SPECS))


def test_a_device_bound_step_is_not():
    run, rates = kept_h100("eighteenth", "vit")
    assert not _unplaced(predict(load_profile(run, "vit-b16/bf16"), rates, Change(batch=256),
                                 SPECS))


def test_the_batch_steps_probe_reads_its_record_back_and_refuses_bad_arguments(capsys):
    from validation.predict.batch_steps import main

    assert main(["summarize", str(STEPS)]) == 0
    out = capsys.readouterr().out
    assert "| 32 | 42.4 | 17.7 |" in out
    assert "batch 16 → 32: the step gained 1.42 ms per ms of kernels" in out
    assert main(["record", "out.json", "zoo.moe:build", "bf16", "0,8"]) == 2
    assert "whole numbers ≥ 1" in capsys.readouterr().err
    assert main(["summarize", str(STEPS.with_name("absent.json"))]) == 2
    assert main([]) == 2
    from validation.predict import class_times  # the probe that shares its training step

    assert class_times.main(["out.json", "zoo.moe:build"]) == 2
