"""Pricing models: billing rounding, reserved break-even, Young/Daly against Daly's published
examples and against a simulation of the model, spot expected time and cost, the comparison."""

from __future__ import annotations

import math
import random
from datetime import date

import pytest

from gpuaudit.cost.pricing import (
    billed_seconds,
    compare_job,
    daly_interval_s,
    daly_wall_time_s,
    expected_wall_time_s,
    make_job,
    mtbi_hours_from_rate,
    on_demand_cost,
    reserved_cost,
    spot_cost,
    young_interval_s,
)
from gpuaudit.errors import BadInputError
from gpuaudit.model import Billing, Offer

MIN, HOUR = 60.0, 3600.0


def offer(**kw) -> Offer:
    base = dict(provider="test", instance_type="g8", gpu_model="h100-sxm", gpu_count=8,
                on_demand_price_per_hour=32.0, spot_price_per_hour=12.0,
                reserved_1y_price_per_hour=20.0, reserved_3y_price_per_hour=14.0,
                billing=Billing.SECOND, source="test", price_date=date(2025, 6, 1))
    return Offer(**{**base, **kw})


# -- billing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("wall", "billing", "minimum", "billed"), [
    (61.2, Billing.SECOND, 0, 62),
    (30, Billing.SECOND, 60, 60),  # AWS: per second, a minute at least
    (61, Billing.MINUTE, 0, 120),
    (3600.0000001, Billing.HOUR, 0, 3600),  # float noise is not an extra hour
    (3601, Billing.HOUR, 0, 7200),
    (0, Billing.HOUR, 0, 0),
    (7200, Billing.MINUTE, 600, 7200),
])
def test_billed_seconds_rounds_up_to_the_unit_and_the_minimum(wall, billing, minimum, billed):
    assert billed_seconds(wall, billing, minimum) == billed


def test_on_demand_job_billed_per_instance_with_hourly_rounding():
    o = offer(billing=Billing.HOUR)
    job = make_job(o, gpu_hours=100, instances=2)  # 100 / 16 GPUs = 6.25 h
    assert job.solve_hours == 6.25
    c = on_demand_cost(o, job)
    assert c.billed_hours == 7
    assert c.cost == 7 * 32.0 * 2
    assert c.currency == "USD" and c.price.source == "test"
    per_second = on_demand_cost(offer(), job)
    assert per_second.cost == pytest.approx(6.25 * 32 * 2)


# -- reserved --------------------------------------------------------------------------------


def test_reserved_break_even_and_term_cost():
    o = offer()
    job = make_job(o, wall_hours=100)
    r = reserved_cost(o, job, 1)
    assert r.break_even_utilization == 20.0 / 32.0  # 0.625
    assert r.terms_needed == 1
    assert r.term_cost == 8760 * 20.0
    assert r.cost == r.term_cost  # nothing else uses the term: the job pays all of it
    shared = reserved_cost(o, job, 1, utilization=0.8)
    assert shared.cost == pytest.approx(100 * 20.0 / 0.8)  # 2500
    # At the break-even utilization reserved costs exactly what on-demand does.
    at_be = reserved_cost(o, job, 1, utilization=r.break_even_utilization)
    assert at_be.cost == pytest.approx(on_demand_cost(o, job).cost)
    three = reserved_cost(o, make_job(o, wall_hours=30000), 3)
    assert three.terms_needed == 2 and three.term_cost == 2 * 3 * 8760 * 14.0


# -- Young and Daly --------------------------------------------------------------------------


def test_young_and_daly_exact_values():
    # δ = 5 min, M = 24 h: sqrt(2·300·86400) = 7200 s exactly; δ/2M = 1/576, sqrt = 1/24.
    assert young_interval_s(300, 86400) == 7200.0
    assert daly_interval_s(300, 86400) == pytest.approx(7200 * (1 + 1 / 72 + 1 / 5184) - 300,
                                                        rel=1e-12)
    # M = 6 h: sqrt(2·300·21600) = 3600; δ/2M = 1/144.
    assert daly_interval_s(300, 21600) == pytest.approx(3600 * (1 + 1 / 36 + 1 / 1296) - 300,
                                                        rel=1e-12)
    # δ ≥ 2M: Daly checkpoints once per MTBI.
    assert daly_interval_s(600, 300) == 300
    assert daly_interval_s(600, 299.9) == 299.9


@pytest.mark.parametrize(("mtbi_s", "paper_min"), [(24 * HOUR, 117), (6 * HOUR, 57),
                                                   (15 * MIN, 9.1)])
def test_daly_interval_matches_the_papers_figures(mtbi_s, paper_min):
    # Daly (2006) figs. 3-5: δ = 5 min, R = 10 min, T_s = 500 h; τ_opt 117, 57 and 9.1 min.
    tau_min = daly_interval_s(5 * MIN, mtbi_s) / MIN
    assert round(tau_min, 0 if paper_min > 10 else 1) == paper_min
    # Young over-estimates, the more so as δ/M grows (120, 60, 12.2 min).
    assert young_interval_s(5 * MIN, mtbi_s) / MIN > tau_min


def _numeric_optimum(solve, delta, restart, m) -> float:
    """The τ that minimises Daly's published T_w, by golden-section search."""
    lo, hi = delta / 100, 4 * m + 10 * delta
    g = (math.sqrt(5) - 1) / 2
    for _ in range(200):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if daly_wall_time_s(solve, a, delta, restart, m) < daly_wall_time_s(solve, b, delta,
                                                                           restart, m):
            hi = b
        else:
            lo = a
    return (lo + hi) / 2


@pytest.mark.parametrize("mtbi_s", [24 * HOUR, 6 * HOUR, 15 * MIN, 3 * MIN])
def test_daly_estimate_is_close_to_the_true_optimum_and_beats_young(mtbi_s):
    solve, delta, restart = 500 * HOUR, 5 * MIN, 10 * MIN
    best = _numeric_optimum(solve, delta, restart, mtbi_s)
    daly, young = daly_interval_s(delta, mtbi_s), young_interval_s(delta, mtbi_s)

    def tw(tau):
        return daly_wall_time_s(solve, tau, delta, restart, mtbi_s)

    # Daly's own error bound: under 5 % in τ for δ < 2M; its wall time within 0.5 % of optimal.
    assert abs(daly - best) / best < 0.05
    assert tw(daly) <= tw(young)
    assert tw(daly) / tw(best) - 1 < 0.005


def _simulate(solve, tau, delta, restart, m, runs, seed) -> float:
    """Daly's model run literally: segments of τ+δ (the last: the rest, no checkpoint); an
    interruption loses the segment; each retry first needs R; interruptions are exponential
    and may strike during a restart too."""
    rng = random.Random(seed)
    total = 0.0
    n = max(math.ceil(solve / tau - 1e-9) - 1, 0)
    segments = [tau + delta] * n + [solve - n * tau]
    for _ in range(runs):
        t = 0.0
        for seg in segments:
            need = seg
            while True:
                life = rng.expovariate(1 / m)
                if life >= need:
                    t += need
                    break
                t += life
                need = restart + seg
        total += t
    return total / runs


@pytest.mark.parametrize(("solve", "delta", "restart", "m"), [
    (20 * HOUR, 5 * MIN, 10 * MIN, 6 * HOUR),
    (10 * HOUR, 5 * MIN, 10 * MIN, 1 * HOUR),
    (2 * HOUR, 2 * MIN, 5 * MIN, 30 * MIN),
    (30 * MIN, 2 * MIN, 5 * MIN, 6 * HOUR),  # shorter than τ: one segment, no checkpoint
])
def test_expected_wall_time_agrees_with_a_simulation(solve, delta, restart, m):
    tau = daly_interval_s(delta, m)
    expected = expected_wall_time_s(solve, tau, delta, restart, m)
    simulated = _simulate(solve, tau, delta, restart, m, runs=4000, seed=6)
    assert simulated == pytest.approx(expected, rel=0.02)
    assert expected > solve


def test_finite_formula_converges_to_the_published_one_for_long_jobs():
    args = (5 * MIN, 10 * MIN, 24 * HOUR)
    tau = daly_interval_s(5 * MIN, 24 * HOUR)
    solve = 1000 * tau  # a whole number of intervals
    # Differs only by the last checkpoint, which the finite model does not write.
    diff = daly_wall_time_s(solve, tau, *args) - expected_wall_time_s(solve, tau, *args)
    one_segment_checkpoint = (math.exp(10 / (24 * 60)) * 24 * HOUR
                              * (math.expm1((tau + 5 * MIN) / (24 * HOUR))
                                 - math.expm1(tau / (24 * HOUR))))
    assert diff == pytest.approx(one_segment_checkpoint, rel=1e-9)


def test_daly_worked_example_expected_wall_time():
    # Daly fig. 4 parameters: T_s = 500 h, δ = 5 min, R = 10 min, M = 6 h, τ = Daly's.
    tau = daly_interval_s(300, 21600)  # 3402.78 s
    tw = daly_wall_time_s(500 * HOUR, tau, 300, 600, 21600)
    by_hand = 21600 * math.exp(600 / 21600) * math.expm1((tau + 300) / 21600) * 500 * 3600 / tau
    assert tw == by_hand
    # ≈ 22 % over 500 h: first order, δ/τ 8.8 % + (τ+δ)/2M 8.6 % + R/M 2.8 %, plus higher terms.
    assert tw / HOUR == pytest.approx(610.22, abs=0.01)


# -- interruption rates ------------------------------------------------------------------------


def test_mtbi_from_an_hourly_probability():
    assert mtbi_hours_from_rate(0.1) == pytest.approx(-1 / math.log(0.9))  # 9.491 h
    assert mtbi_hours_from_rate(0.05, period_hours=720) / 24 == pytest.approx(584.9, abs=0.1)


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.1])
def test_interruption_rate_must_be_a_probability(bad):
    with pytest.raises(BadInputError, match="interruption rate"):
        mtbi_hours_from_rate(bad)


# -- spot and the comparison -------------------------------------------------------------------


def test_spot_cost_exact():
    o = offer()
    job = make_job(o, gpu_hours=8 * 40)  # 40 h on one instance
    s = spot_cost(o, job, mtbi_hours=6, checkpoint_s=300, restart_s=600)
    tau = daly_interval_s(300, 21600)
    wall = expected_wall_time_s(40 * HOUR, tau, 300, 600, 21600)
    assert s.plan.interval_s == tau and s.plan.young_interval_s == 3600
    assert s.expected_wall_hours == wall / HOUR
    assert s.expected_cost == pytest.approx(math.ceil(wall) / HOUR * 12.0)
    assert s.expected_interruptions == pytest.approx(wall / 21600)
    assert s.overhead_pct == pytest.approx((wall / HOUR - 40) / 40 * 100)


def test_spot_on_several_instances_divides_the_mtbi():
    o = offer()
    job = make_job(o, gpu_hours=8 * 40 * 4, instances=4)
    s = spot_cost(o, job, mtbi_hours=8, checkpoint_s=300, restart_s=600)
    assert s.plan.mtbi_hours == 2
    assert s.expected_cost == pytest.approx(s.billed_hours * 12.0 * 4)


def test_compare_picks_spot_without_a_deadline_and_on_demand_with_a_tight_one():
    o = offer()
    job = make_job(o, gpu_hours=8 * 40)
    free = compare_job(o, job, mtbi_hours=6, checkpoint_s=300, restart_s=600)
    assert free.cheapest == "spot"
    assert free.options[0].name == "spot"
    # Term-only reservations cost the whole term: a year, three years, the most expensive.
    assert [x.name for x in free.options][-2:] == ["reserved_1y", "reserved_3y"]
    tight = compare_job(o, job, mtbi_hours=6, checkpoint_s=300, restart_s=600,
                        deadline_hours=42)
    assert tight.spot.expected_wall_hours > 42
    assert tight.cheapest == "on_demand"
    assert "within the 42 h deadline" in tight.verdict and "spot" in tight.verdict
    none = compare_job(o, job, deadline_hours=10)
    assert none.cheapest is None and "no option meets" in none.verdict
    assert any(u.name == "spot" for u in none.unpriced)


def test_compare_with_shared_reservation_and_missing_prices():
    o = offer(spot_price_per_hour=None, reserved_3y_price_per_hour=None)
    job = make_job(o, wall_hours=100)
    c = compare_job(o, job, reserved_utilization=0.9)
    assert c.cheapest == "reserved_1y"  # 100 × 20 / 0.9 = 2222 < 3200 on-demand
    assert c.options[0].cost == pytest.approx(100 * 20 / 0.9)
    assert {u.name for u in c.unpriced} == {"spot", "reserved_3y"}


@pytest.mark.parametrize(("call", "needle"), [
    (lambda o: make_job(o, gpu_hours=0), "GPU-hours"),
    (lambda o: make_job(o, gpu_hours=-5), "GPU-hours"),
    (lambda o: make_job(o), "one of them"),
    (lambda o: reserved_cost(o, make_job(o, wall_hours=1), 1, utilization=1.2), "utilization"),
    (lambda o: compare_job(o, make_job(o, wall_hours=1), reserved_utilization=0), "utilization"),
    (lambda o: spot_cost(o, make_job(o, wall_hours=1), mtbi_hours=6, checkpoint_s=0,
                         restart_s=1), "checkpoint"),
    (lambda o: spot_cost(o, make_job(o, wall_hours=1), mtbi_hours=-1, checkpoint_s=60,
                         restart_s=1), "interruptions"),
    (lambda o: on_demand_cost(o.model_copy(update={"on_demand_price_per_hour": 0}),
                              make_job(o, wall_hours=1)), "price"),
    (lambda o: compare_job(o, make_job(o, wall_hours=1), deadline_hours=0), "deadline"),
])
def test_bad_inputs_are_one_line_errors(call, needle):
    with pytest.raises(BadInputError) as exc:
        call(offer())
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_billing_not_listed_is_rounded_per_second_and_said():
    from gpuaudit.cost.pricing import on_demand_cost, spot_cost
    from gpuaudit.model.cost import BILLING_ASSUMPTION

    o = offer(billing=None, billing_minimum_s=0, spot_price_per_hour=4.0)
    job = make_job(o, wall_hours=1.0001)
    od = on_demand_cost(o, job)
    assert od.billing is Billing.SECOND and od.billing_assumed is True
    assert od.billed_hours == pytest.approx(3601 / 3600)  # 3600.36 s to the second; not 2 h
    sp = spot_cost(o, job, mtbi_hours=20, checkpoint_s=300, restart_s=600)
    assert sp.assumptions[0] == BILLING_ASSUMPTION
    listed = on_demand_cost(offer(billing=Billing.HOUR), make_job(offer(), wall_hours=1.0001))
    assert listed.billed_hours == 2 and listed.billing_assumed is False
