"""Buy vs rent: the annuity, energy, colocation and maintenance arithmetic, break-even."""

from __future__ import annotations

import pytest

from gpuaudit.cost.tco import capital_recovery_factor, server_power_w, tco
from gpuaudit.errors import BadInputError


def test_straight_line_example_exact():
    # 250,000 over 5 years at 0 %: 50,000/y. 10 kW × PUE 1.25 × 8760 h × 0.10 = 10,950/y.
    # Colocation 1,000/month = 12,000/y. Maintenance 5 % = 12,500/y. Total 85,450/y.
    t = tco(capex=250_000, gpu_count=8, amortization_years=5, power_w=10_000, pue=1.25,
            price_per_kwh=0.10, colocation_per_month=1000, maintenance_pct_per_year=5,
            utilization=0.5, rental_price_per_gpu_hour=2.0)
    assert t.annual_capital_cost == 50_000
    assert t.annual_energy_cost == pytest.approx(10_950)
    assert t.annual_colocation_cost == 12_000
    assert t.annual_maintenance_cost == 12_500
    assert t.annual_cost == pytest.approx(85_450)
    assert t.cost_per_gpu_hour_at_full_use == pytest.approx(85_450 / 70_080)  # 1.2193
    assert t.cost_per_used_gpu_hour == pytest.approx(85_450 / 35_040)  # 2.4387 at 50 %
    assert t.break_even_utilization == pytest.approx(85_450 / 140_160)  # 0.6097
    assert t.cheaper == "rent"  # 50 % < 61 %
    assert tco(**{**_args(), "utilization": 0.7, "rental_price_per_gpu_hour": 2.0}
               ).cheaper == "buy"


def _args() -> dict:
    return dict(capex=250_000, gpu_count=8, amortization_years=5, power_w=10_000, pue=1.25,
                price_per_kwh=0.10, colocation_per_month=1000, maintenance_pct_per_year=5)


def test_annuity_at_8_percent():
    # CRF(8 %, 5) = 0.08·1.08^5 / (1.08^5 − 1) = 0.2504564545...
    assert capital_recovery_factor(0.08, 5) == pytest.approx(0.2504564546, rel=1e-9)
    assert capital_recovery_factor(0, 4) == 0.25
    # a rate too small for (1+r)^n to differ from 1 in floating point: the r → 0 limit, 1/n
    assert capital_recovery_factor(1.2e-125, 5) == pytest.approx(0.2, rel=1e-12)
    # near 0: 1/n + r(n+1)/(2n)
    assert capital_recovery_factor(1e-9, 5) == pytest.approx(0.2 + 6e-10, rel=1e-12)
    t = tco(**{**_args(), "cost_of_capital_pct": 8})
    assert t.annual_capital_cost == pytest.approx(250_000 * 0.2504564546, rel=1e-9)  # 62,614.11


def test_residual_value_reduces_capital_by_its_present_value():
    t = tco(**{**_args(), "cost_of_capital_pct": 8, "residual_value_pct": 20})
    pv = 50_000 / 1.08 ** 5  # 34,029.16
    assert t.annual_capital_cost == pytest.approx((250_000 - pv) * 0.2504564546, rel=1e-9)
    # At 0 %, straight-line: (250,000 − 50,000) / 5.
    assert tco(**{**_args(), "residual_value_pct": 20}).annual_capital_cost == 40_000


def test_power_from_tdp_and_never_breaking_even():
    assert server_power_w(700, 8, 2000) == 7600
    t = tco(capex=400_000, gpu_count=8, amortization_years=3, power_w=server_power_w(700, 8),
            power_source="TDP", rental_price_per_gpu_hour=1.0)
    assert t.power_source == "TDP"
    assert t.break_even_utilization > 1  # 133,333/y ÷ 70,080 = 1.90
    assert t.cheaper == "rent"


@pytest.mark.parametrize(("change", "needle"), [
    ({"capex": 0}, "capex"),
    ({"capex": -1}, "capex"),
    ({"utilization": 1.01}, "utilization"),
    ({"utilization": 0}, "utilization"),
    ({"pue": 0.9}, "PUE"),
    ({"gpu_count": 0}, "GPU count"),
    ({"amortization_years": 0}, "amortization"),
    ({"residual_value_pct": 120}, "residual"),
    ({"rental_price_per_gpu_hour": 0}, "rental"),
    ({"price_per_kwh": -0.1}, "kWh"),
])
def test_bad_inputs(change, needle):
    with pytest.raises(BadInputError, match=needle):
        tco(**{**_args(), **change})
