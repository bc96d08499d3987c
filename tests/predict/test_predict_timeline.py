"""`predict`'s timeline replay with exact values: a host-bound step keeps its launches' pace,
the launch latency and alpha found from the timed step, the queue's and the device's gaps,
and a host-bound band widened by how far its timed steps moved."""

from __future__ import annotations

import dataclasses
import math

import pytest

from gpuaudit.model.opprofile import Timeline
from gpuaudit.predict import Change, load_profile, predict
from gpuaudit.predict import timeline as tlm
from gpuaudit.specs.catalog import load_catalog
from tests.support.predict import h200_rates, zoo_plain_run

SPECS = load_catalog()


def _timeline(**kw):
    # three steps of two kernels: launched at 0 and 10 µs of each 100 µs step, 30 µs each
    # (each second kernel waits for the first: one stream)
    launches = (0.0, 10.0, 100.0, 110.0, 200.0, 210.0)
    base = dict(steps=3, launch_us=launches, start_us=(5.0, 35.0, 105.0, 135.0, 205.0, 235.0),
                dur_us=(30.0,) * 6, group=(0, 1) * 3, step_start_us=(0.0, 100.0, 200.0))
    return Timeline(**{**base, **kw})


def test_a_host_bound_step_keeps_its_launches_pace():
    tl = _timeline()
    # launch latency 5 µs: each step's second kernel waits for the first (35 → 65), then the
    # next step launches at 100: the period is the host's 100 µs (one step's last kernel end
    # to the next's)
    assert tlm.latency_us(tl) == 5.0
    assert tlm.period(tl, tl.dur_us, 1.0)[0] == pytest.approx(100.0)
    # kernels three times longer: 90 µs each, 180 a step: the device's pace
    assert tlm.period(tl, [90.0] * 6, 1.0)[0] == pytest.approx(180.0)
    # the host twice as fast (α 0.5): 50 µs a step while the kernels take 60
    assert tlm.period(tl, tl.dur_us, 0.5)[0] == pytest.approx(60.0)


def test_alpha_is_found_so_that_the_replay_lasts_the_timed_step():
    rep = tlm.calibrate(_timeline(), 80.0)
    assert rep.identified and rep.alpha == pytest.approx(0.8, abs=1e-6)
    assert rep.period_us == pytest.approx(80.0, abs=1e-3)
    # a step the device never waited in cannot say: assumed, or the host's own time measured
    long = _timeline(dur_us=(90.0,) * 6, start_us=(5, 95, 185, 275, 365, 455))
    assert not tlm.calibrate(long, 180.0).identified
    assert tlm.calibrate(long, 180.0).alpha == tlm.DEFAULT_ALPHA
    measured = tlm.calibrate(long, 180.0, host_step_us=50.0)
    assert measured.identified and measured.alpha == pytest.approx(0.5)
    assert measured.unsteady == 0.0 and measured.alpha_unc == tlm.U_ALPHA
    # a host alone (batch 1) slower than the whole step: its pace moved by at least that much
    # between the two measurements, and α's band says so
    unsteady = tlm.calibrate(long, 180.0, host_step_us=216.0)
    assert unsteady.unsteady == pytest.approx(0.2)
    assert unsteady.alpha_unc == pytest.approx(math.hypot(tlm.U_ALPHA, 0.2))


def test_timed_steps_that_moved_widen_the_hosts_band_as_far_as_they_moved():
    long = _timeline(dur_us=(90.0,) * 6, start_us=(5, 95, 185, 275, 365, 455))
    # the timed steps' half IQR 30 % of their median: more than the host alone said (20 %)
    rep = tlm.calibrate(long, 180.0, host_step_us=216.0, spread=0.3)
    assert rep.unsteady == pytest.approx(0.3)
    assert rep.alpha_unc == pytest.approx(math.hypot(tlm.U_ALPHA, 0.3))
    # and less than it: the larger of the two witnesses stands
    assert tlm.calibrate(long, 180.0, host_step_us=216.0, spread=0.05).unsteady == \
        pytest.approx(0.2)


def test_the_sources_timed_spread_is_read_from_its_run_and_widens_a_host_bound_band():
    run = zoo_plain_run("recsys")
    prof = load_profile(run, "dlrm/bf16")
    # dlrm/bf16/step_time: median 6.672 ms, IQR 6.360–7.166 ms
    assert prof.step_spread == pytest.approx((7.165552020072937 - 6.360040187835693) / 2
                                             / 6.671823978424072)
    steady = predict(dataclasses.replace(prof, step_spread=0.0), h200_rates(), Change(batch=8192),
                     SPECS)
    moved = predict(dataclasses.replace(prof, step_spread=0.5), h200_rates(), Change(batch=8192),
                    SPECS)
    assert moved.step_ms == pytest.approx(steady.step_ms)
    assert moved.step_ms_high - moved.step_ms_low > steady.step_ms_high - steady.step_ms_low


def test_a_step_the_device_hardly_waited_in_bounds_alpha_and_the_host_measured_sets_it():
    # 100 µs of host a step (host_us), 60 µs of kernels, timed at 62 µs: α is at most 0.62
    # (where the replay lasts the timed step), and the device waited only 2 % there
    tl = _timeline()
    assert tlm.host_us(tl) == pytest.approx(100.0)
    bound = tlm.calibrate(tl, 62.0)
    assert not bound.identified and bound.alpha == pytest.approx(0.62, abs=1e-6)
    # the host's own step measured at 40 µs says more than the bound: α 0.4
    assert tlm.calibrate(tl, 62.0, host_step_us=40.0).alpha == pytest.approx(0.4)
    # one measured above the bound keeps the bound
    assert tlm.calibrate(tl, 62.0, host_step_us=90.0).alpha == pytest.approx(0.62, abs=1e-6)


def test_the_devices_gap_between_queued_kernels_is_the_devices_and_kept_per_kernel():
    # each step's second kernel, queued behind the first, starts 2 µs after it ends
    tl = _timeline(start_us=(5.0, 37.0, 105.0, 137.0, 205.0, 237.0))
    assert tlm.queued_gap_us(tl) == 2.0
    # the host measured at 40 µs a step (α 0.4): the device binds, 60 µs of kernels and a
    # gap before each (both queued at that pace); timed at 61 µs: a gap of 0.5 µs fills it,
    # and α stays the host's measured pace
    rep = tlm.calibrate(tl, 61.0, host_step_us=40.0)
    assert rep.alpha == pytest.approx(0.4) and rep.gap_us == pytest.approx(0.5, abs=1e-4)
    # kernels three times longer: 180 µs and the same two gaps, not the step × 61/60
    assert tlm.period(tl, [90.0] * 6, rep.alpha, None, rep.gap_us)[0] == pytest.approx(181.0)
    # a host measured slower than the timed step allows (70 µs): α is found instead, no gap
    slow = tlm.calibrate(tl, 61.0, host_step_us=70.0)
    assert slow.gap_us == 0.0 and slow.alpha < 0.7
    # a step the trace's own gap cannot fill (timed at 70 µs, 64 at most): α is found
    assert tlm.calibrate(tl, 70.0, host_step_us=40.0).gap_us == 0.0


def test_a_gap_past_the_traces_own_is_read_as_the_hosts_too_unless_the_host_was_held():
    tl = _timeline(start_us=(5.0, 37.0, 105.0, 137.0, 205.0, 237.0))
    # timed at 67 µs, the host measured at 40 (α 0.4): the trace's 2 µs gap fills 64, so
    # 3.5 µs does it, past the trace's own; a host slower at the batch (α 0.67 at the
    # trace's gap) would do it as well, and the replay keeps both readings
    rep = tlm.calibrate(tl, 67.0, host_step_us=40.0)
    assert rep.alpha == pytest.approx(0.4) and rep.gap_us == pytest.approx(3.5, abs=1e-4)
    assert (rep.host_alpha, rep.host_gap_us) == (pytest.approx(0.67, abs=1e-4), 2.0)
    assert tlm.period(tl, tl.dur_us, rep.host_alpha, None, 2.0)[0] == pytest.approx(67.0)
    # kernels three times longer: 187 µs as the device's, 184 as the host's
    assert tlm.period(tl, [90.0] * 6, rep.alpha, None, rep.gap_us)[0] == pytest.approx(187.0)
    assert tlm.period(tl, [90.0] * 6, rep.host_alpha, None, 2.0)[0] == pytest.approx(184.0)
    # the host's work timed at the batch behind a held device tells them apart
    held = tlm.calibrate(tl, 67.0, host_step_us=40.0, held=True)
    assert held.gap_us == pytest.approx(3.5, abs=1e-4) and held.host_alpha == 0.0
    # within the trace's own gap, nothing to tell apart
    assert tlm.calibrate(tl, 61.0, host_step_us=40.0).host_alpha == 0.0


def test_host_time_blocked_in_a_full_queue_is_not_the_hosts():
    tl = _timeline(blocked_us=(0.0, 0.0, 60.0, 0.0, 60.0, 0.0))
    # 60 of each 100 µs between steps were spent waiting on the device: the host's own
    # pace is 40 µs a step, so two 30 µs kernels (60 µs) set the period
    assert tlm.period(tl, tl.dur_us, 1.0)[0] == pytest.approx(60.0)


def test_kernels_that_ran_at_once_replay_as_one():
    tl = _timeline(start_us=(5.0, 10.0, 105.0, 110.0, 205.0, 210.0))
    segs = tlm.segments(tl)
    assert len(segs) == 3 and segs[0].members == (0, 1) and segs[0].span == 35.0
    # both kernels twice as long: the union too
    ends, _ = tlm.simulate(tl, [60.0] * 6, 1.0)
    assert ends[0] - 5.0 == pytest.approx(70.0)
