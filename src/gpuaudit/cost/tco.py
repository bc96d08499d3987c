"""Buy vs rent: what owning a GPU server costs per GPU-hour, and the utilization at which
owning beats renting.

A year of ownership costs the capital recovery (an annuity: the payment that repays capex,
less the residual value, over the amortization period at the cost of capital), the energy
(average draw × PUE × 8760 h × price per kWh: the server is on all year, busy or not), the
colocation fee and the maintenance (a share of capex per year). That is fixed; renting costs
only the hours used. docs/cost.md has the formulas and a worked example.
"""

from __future__ import annotations

from gpuaudit.errors import BadInputError
from gpuaudit.model.economics import Tco

from .pricing import HOURS_PER_YEAR, _fraction, _non_negative, _positive


def capital_recovery_factor(rate: float, years: float) -> float:
    """CRF(r, n) = r(1+r)^n / ((1+r)^n − 1): the share of a loan repaid each year, interest
    included. At r = 0 it is 1/n (straight-line)."""
    years = _positive("amortization period", years)
    rate = _non_negative("cost of capital", rate)
    if rate == 0:
        return 1 / years
    growth = (1 + rate) ** years
    return rate * growth / (growth - 1)


def server_power_w(gpu_tdp_w: float, gpu_count: int, host_power_w: float = 0.0) -> float:
    """A server's draw from its GPUs' TDP (an upper bound: the board limit) plus the host."""
    return _positive("GPU TDP", gpu_tdp_w) * gpu_count + _non_negative("host power",
                                                                        host_power_w)


def tco(*, capex: float, gpu_count: int, amortization_years: float = 5.0,
        cost_of_capital_pct: float = 0.0, residual_value_pct: float = 0.0,
        power_w: float, power_source: str = "given", pue: float = 1.0,
        price_per_kwh: float = 0.0, colocation_per_month: float = 0.0,
        maintenance_pct_per_year: float = 0.0, utilization: float = 1.0,
        rental_price_per_gpu_hour: float | None = None, currency: str = "USD") -> Tco:
    """Owning `gpu_count` GPUs bought for `capex` (the whole server(s), all-in).

    `power_w` is the average draw of the hardware over the year (measured, or TDP as an upper
    bound), before PUE; `utilization` the share of the year's GPU-hours that carry work. With
    a rental price per GPU-hour: the break-even utilization, above which owning is cheaper.
    """
    capex = _positive("capex", capex)
    if not isinstance(gpu_count, int) or gpu_count < 1:
        raise BadInputError(f"GPU count must be a whole number >= 1, not {gpu_count!r}")
    years = _positive("amortization period", amortization_years)
    rate_pct = _non_negative("cost of capital", cost_of_capital_pct)
    residual_pct = _non_negative("residual value", residual_value_pct)
    if residual_pct > 100:
        raise BadInputError(f"residual value must be <= 100 % of capex, not {residual_pct}")
    power_w = _non_negative("power", power_w)
    if not pue >= 1:
        raise BadInputError(f"PUE must be >= 1 (facility energy / IT energy), not {pue!r}")
    kwh = _non_negative("price per kWh", price_per_kwh)
    colo = _non_negative("colocation per month", colocation_per_month)
    maint_pct = _non_negative("maintenance", maintenance_pct_per_year)
    utilization = _fraction("utilization", utilization)
    if rental_price_per_gpu_hour is not None:
        _positive("rental price per GPU-hour", rental_price_per_gpu_hour)

    rate = rate_pct / 100
    # The residual is recovered at the end: only its present value reduces what is repaid.
    residual_pv = capex * residual_pct / 100 / (1 + rate) ** years
    capital = (capex - residual_pv) * capital_recovery_factor(rate, years)
    energy = power_w / 1000 * pue * HOURS_PER_YEAR * kwh
    colocation = colo * 12
    maintenance = capex * maint_pct / 100
    annual = capital + energy + colocation + maintenance
    gpu_hours = HOURS_PER_YEAR * gpu_count
    full = annual / gpu_hours
    break_even = cheaper = None
    if rental_price_per_gpu_hour is not None:
        break_even = annual / (gpu_hours * rental_price_per_gpu_hour)
        cheaper = "buy" if utilization > break_even else "rent"
    return Tco(currency=currency, capex=capex, gpu_count=gpu_count, amortization_years=years,
               cost_of_capital_pct=rate_pct, residual_value_pct=residual_pct, power_w=power_w,
               power_source=power_source, pue=pue, price_per_kwh=kwh,
               colocation_per_month=colo, maintenance_pct_per_year=maint_pct,
               utilization=utilization, annual_capital_cost=capital, annual_energy_cost=energy,
               annual_colocation_cost=colocation, annual_maintenance_cost=maintenance,
               annual_cost=annual, cost_per_gpu_hour_at_full_use=full,
               cost_per_used_gpu_hour=full / utilization,
               rental_price_per_gpu_hour=rental_price_per_gpu_hour,
               break_even_utilization=break_even, cheaper=cheaper)  # type: ignore[arg-type]
