"""The host's own time and the device's gaps, on a real recording: ConvNeXt (held-out) in bf16
and fp32 on one H200, each mode's step at batch 1 timed in 8 rounds beside the other
precision family's (`workloads.hosttime`)."""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from gpuaudit.predict import Change, grouped, load_profile, predict
from gpuaudit.predict import timeline as tlm
from gpuaudit.specs.catalog import load_catalog
from tests.support.predict import h200_rates, zoo_run

SPECS = load_catalog()
RATES = h200_rates(SPECS)


@pytest.fixture(scope="module")
def run():
    return zoo_run("convnext-h200-run")



def test_the_rounds_hold_the_hosts_pace_and_the_two_families_agree(run):
    bf16, fp32 = (load_profile(run, f"convnext-s/{p}").record for p in ("bf16", "fp32"))
    for rec in (bf16, fp32):
        assert len(rec.host_rounds_ms) == len(rec.alt_host_rounds_ms) == 8
        assert rec.host_step_ms == pytest.approx(statistics.median(rec.host_rounds_ms),
                                                 rel=0.05)
    # autocast's host cost timed from either side: bf16 ÷ fp32 from the fp32 recording, and
    # the inverse of fp32 ÷ bf16 from the bf16 one, within 5 % of each other
    on, _ = grouped.host_ratio(fp32)
    off, _ = grouped.host_ratio(bf16)
    assert on > 1.2 and on * off == pytest.approx(1.0, abs=0.05)
    # and the two recordings' own host times, timed a minute apart, say the same
    assert bf16.host_step_ms / fp32.host_step_ms == pytest.approx(on, rel=0.05)


def test_the_device_binds_at_the_hosts_pace_and_the_gap_fills_the_step(run):
    rec = load_profile(run, "convnext-s/bf16").record
    tl = rec.timeline
    rep = tlm.calibrate(tl, rec.step_ms * 1e3, rec.host_step_ms * 1e3)
    # α is the host's measured pace, not raised to fill the step; the gap is the device's,
    # under the trace's own median between queued kernels
    measured = rec.host_step_ms * 1e3 / tlm.host_us(tl, tlm.latency_us(tl))
    assert rep.alpha == pytest.approx(measured)
    assert 0.0 < rep.gap_us <= tlm.queued_gap_us(tl)
    assert rep.period_us == pytest.approx(rec.step_ms * 1e3, rel=0.02)


def test_a_device_bound_step_longer_than_the_median_gap_fills_keeps_the_hosts_pace(run):
    """Planted: the bf16 step timed 7 % longer than its replay at the trace's median gap. The
    device never waits on the host there, so the rest is the device's, between its kernels
    (up to the largest median seen): the host keeps its measured pace and a host-bound
    target is not made longer with the device's time (an LSTM's fp32 step, 3 % past its
    median's reach, had scaled its bf16 prediction, host-bound, by 1.07)."""
    rec = load_profile(run, "convnext-s/bf16").record
    tl = rec.timeline
    lat = tlm.latency_us(tl)
    measured = rec.host_step_ms * 1e3 / tlm.host_us(tl, lat)
    median = tlm.queued_gap_us(tl)
    step = tlm.period(tl, tl.dur_us, measured, lat, median)[0] * 1.07
    rep = tlm.calibrate(tl, step, rec.host_step_ms * 1e3)
    assert rep.alpha == pytest.approx(measured)
    assert median < rep.gap_us <= tlm.GAP_MAX_US
    assert rep.period_us == pytest.approx(step, rel=0.02)
    # past what the largest gap fills, the gap is not stretched further: a slower host takes
    # the rest, the device keeping its trace's own gap between the kernels it ran back to back
    far = tlm.period(tl, tl.dur_us, measured, lat, tlm.GAP_MAX_US)[0] * 1.1
    slow = tlm.calibrate(tl, far, rec.host_step_ms * 1e3)
    assert slow.gap_us == pytest.approx(median) and slow.alpha > measured


@pytest.mark.parametrize(("src", "target"), [("fp32", "bf16"), ("bf16", "fp32")])
def test_each_recording_predicts_the_others_step(run, src, target):
    """Each precision predicted from the other recording lands within 10 % of that
    precision's own recorded step (ConvNeXt fp32 → bf16 was +44.6 % on another recording
    with the development families' autocast ratio)."""
    there = load_profile(run, f"convnext-s/{target}").record
    p = predict(load_profile(run, f"convnext-s/{src}"), RATES, Change(precision=target),
                SPECS)
    assert p.step_ms == pytest.approx(there.step_ms, rel=0.10)
    assert p.step_ms_low <= there.step_ms * 1.05 and p.step_ms_high >= there.step_ms * 0.95
    assert any("round by round" in b for b in p.basis)


def test_a_host_that_moved_while_profiling_widens_the_band_and_says_so(run):
    """The same recording with its host's rounds at batch 1 planted ±20 % apart (an unsteady
    loan's host moved 4–34 % a recording): the fp32 → bf16 step keeps its figure, its band
    takes the host's range where the host binds, and a note says why; the steady original
    has no such note."""
    steady = load_profile(run, "convnext-s/fp32")
    rounds = steady.record.host_rounds_ms
    mid = statistics.median(rounds)
    moved = tuple(mid * (1.2 if i % 2 else 0.8) for i in range(len(rounds)))
    assert tlm.rounds_moved(moved) == pytest.approx(0.2)
    unsteady = dataclasses.replace(steady, record=steady.record.model_copy(
        update={"host_rounds_ms": moved}))
    a, b = (predict(p, RATES, Change(precision="bf16"), SPECS) for p in (steady, unsteady))
    assert b.step_ms == pytest.approx(a.step_ms, rel=1e-6)
    # a slower host lengthens the step where the host binds; a faster one cannot shorten
    # it past the device's time, so only the high edge moves
    assert b.step_ms_high > a.step_ms_high * 1.015
    assert b.step_ms_low == pytest.approx(a.step_ms_low, rel=0.01)
    assert any("pace moved ±20 %" in n for n in b.notes)
    assert not any("pace moved" in n for n in a.notes)


def test_held_rounds_that_wandered_widen_the_band_as_batch_1_rounds_do():
    """The MobileNetV2 recording whose fp32 host base is its work held at its batch: its
    held rounds planted ±20 % apart (their median kept) leave the tf32 figure as it was and
    widen its band where the host binds, as the same spread in its batch-1 rounds does; the
    note says the host's pace moved."""
    from tests.support.predict import zoo_run

    prof = load_profile(zoo_run("mobilenet-held-h200-run"), "mobilenet-v2/fp32")
    held = prof.record.host_held_ms
    mid = statistics.median(held["fp32"])
    wide = tuple(mid * (1.2 if i % 2 else 0.8) for i in range(len(held["fp32"])))
    assert statistics.median(wide) == pytest.approx(mid)
    moved = dataclasses.replace(prof, record=prof.record.model_copy(
        update={"host_held_ms": {**held, "fp32": wide}}))
    a, b = (predict(p, RATES, Change(precision="tf32"), SPECS) for p in (prof, moved))
    assert not a.dry_run  # recorded on the H200
    assert b.step_ms == pytest.approx(a.step_ms, rel=1e-6)
    assert b.step_ms_high > a.step_ms_high * 1.01
    assert b.step_ms_low <= a.step_ms_low
    assert any("pace moved ±20 %" in n for n in b.notes)
