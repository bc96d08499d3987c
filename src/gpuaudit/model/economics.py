"""What owning a server, a unit of work and idle GPUs cost: the records of `cost tco`,
`cost work` and `cost idle` (`gpuaudit.model.pricing` names them too).

Every money figure sits beside a `currency` field; durations carry their unit in the field name
(`_s`, `_hours`); every figure computed from a price names the price's source and date.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal

from .lite import Lite, record
from .pricing import PriceRef

# -- buy vs rent ---------------------------------------------------------------------------------


@record
class Tco(Lite):
    """Owning a server: what a year costs, per GPU-hour, and against a rental price."""

    currency: str
    capex: float
    gpu_count: int
    amortization_years: float
    cost_of_capital_pct: float  # annual
    residual_value_pct: float  # of capex, at the end of the amortization period
    power_w: float  # average draw of the server, before PUE
    power_source: str  # "measured", "given", "TDP: 8 × 700 W + host 2000 W", ...
    pue: float
    price_per_kwh: float
    colocation_per_month: float
    maintenance_pct_per_year: float  # of capex
    utilization: float  # share of the year's GPU-hours that carry work
    annual_capital_cost: float  # the annuity that repays capex (less residual) at that rate
    annual_energy_cost: float
    annual_colocation_cost: float
    annual_maintenance_cost: float
    annual_cost: float
    cost_per_gpu_hour_at_full_use: float
    cost_per_used_gpu_hour: float  # at `utilization`
    rental_price_per_gpu_hour: float | None = None
    # Utilization above which owning costs less than renting the same used hours; above 1:
    # owning never pays at that rental price.
    break_even_utilization: float | None = None
    cheaper: Literal["buy", "rent"] | None = None  # at `utilization`


# -- price-performance ---------------------------------------------------------------------------

Basis = Literal["measured", "estimate", "given"]


@record
class WorkCost(Lite):
    """The cost of one unit of work at one price."""

    metric: Literal["pflop_hour", "million_training_tokens", "thousand_inferences", "epoch"]
    cost: float
    currency: str
    unit: str  # "USD per PFLOP-hour", ...
    rate: float  # the throughput it was computed from, for the whole instance
    rate_unit: str  # "PFLOP/s", "tokens/s", "inferences/s", "samples/s"
    # measured: from a stored run (run_id); estimate: from datasheet figures and the stated
    # assumptions; given: a throughput the user supplied.
    basis: Basis
    run_id: str | None = None
    assumptions: tuple[str, ...] = ()


@record
class PricePerformance(Lite):
    price: PriceRef
    gpu_model: str
    results: tuple[WorkCost, ...]
    notes: tuple[str, ...] = ()


# -- idle cost -----------------------------------------------------------------------------------


@record
class IdleGpu(Lite):
    hostname: str
    gpu: int
    observed_hours: float  # covered by readings
    idle_hours: float
    unknown_hours: float  # readings without an activity figure, or errors: never idle
    idle_cost: float


@record
class IdleCost(Lite):
    since: datetime
    until: datetime
    threshold_pct: float
    price_per_gpu_hour: float
    currency: str
    price_source: str
    price_date: date | None
    gpus: tuple[IdleGpu, ...]
    observed_gpu_hours: float
    idle_gpu_hours: float
    idle_fraction: float | None  # of the observed GPU-hours; None when nothing was observed
    idle_cost: float
