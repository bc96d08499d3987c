"""What work costs: the records of the pricing models (TCO, price-performance and idle cost
are in `economics`).

Every money figure sits beside a `currency` field; durations carry their unit in the field name
(`_s`, `_hours`); every figure computed from a price names the price's source and date, so that
a reader can tell where it came from and how old it is.
"""

from __future__ import annotations

from datetime import date
from enum import Enum

from .cost import Billing
from .lite import Lite, record


class PricingModel(str, Enum):
    """How an instance is paid for: which of an offer's prices applies. One enum for the
    price a figure was computed from (`PriceRef.kind`), the options `compare_job` weighs and
    the model `recommend` picks. Values are the `Offer` price fields' stems
    (`on_demand_price_per_hour`); `label` is how text names them."""

    ON_DEMAND = "on_demand"
    SPOT = "spot"
    RESERVED_1Y = "reserved_1y"
    RESERVED_3Y = "reserved_3y"

    @property
    def label(self) -> str:
        """on-demand, spot, reserved-1y, reserved-3y."""
        return self.value.replace("_", "-")

    @property
    def price_field(self) -> str:
        """The `Offer` field holding this price, e.g. on_demand_price_per_hour."""
        return f"{self.value}_price_per_hour"


# The name the price kinds had before they were merged with recommend's pricing models.
PriceKind = PricingModel


@record
class PriceRef(Lite):
    """The price a figure was computed from, and where that price came from."""

    offer: str  # Offer.key, e.g. "aws/p5.48xlarge@us-east-1"
    kind: PricingModel
    price_per_hour: float  # of the whole instance
    gpu_count: int
    currency: str
    source: str
    price_date: date


# -- pricing models for one job ----------------------------------------------------------------


@record
class Job(Lite):
    """A job's size: `solve_hours` of failure-free work on `instances` instances at once."""

    gpu_hours: float
    gpus_per_instance: int
    instances: int
    solve_hours: float  # wall time without interruptions = gpu_hours / (gpus × instances)


@record
class OnDemandCost(Lite):
    price: PriceRef
    instances: int
    wall_hours: float
    billing: Billing  # the unit rounded by
    billing_assumed: bool = False  # the catalog does not list it: per second was assumed
    billing_minimum_s: float
    billed_hours: float  # per instance, after granularity and minimum
    cost: float
    currency: str


@record
class ReservedCost(Lite):
    price: PriceRef  # the effective hourly rate of the term
    term_years: int
    term_hours: float  # 8760 per year
    instances: int
    terms_needed: int  # per instance: a job longer than one term needs several
    term_cost: float  # what the reservation(s) cost whatever runs on them
    wall_hours: float
    # Share of the reserved hours that carry work. None: nothing but this job uses the term.
    utilization: float | None
    cost: float  # this job's cost: the whole term(s), or its share at `utilization`
    # Utilization of the term at which reserved costs what on-demand would (None: no on-demand
    # price to compare with). Below it, on-demand is cheaper.
    break_even_utilization: float | None
    currency: str


@record
class CheckpointPlan(Lite):
    """Checkpointing on interruptible capacity (Young 1974; Daly 2006)."""

    mtbi_hours: float  # mean time between interruptions of the job (all its instances)
    checkpoint_s: float  # δ: time to write one checkpoint
    restart_s: float  # R: time from an interruption back to work (capacity, reload)
    young_interval_s: float  # sqrt(2δM)
    daly_interval_s: float  # Daly's higher-order optimum
    interval_s: float  # the compute time between checkpoints used (Daly's unless given)


@record
class SpotCost(Lite):
    price: PriceRef
    instances: int
    plan: CheckpointPlan
    solve_hours: float
    expected_wall_hours: float  # with checkpoints, lost work and restarts (Daly's model)
    expected_interruptions: float
    overhead_pct: float  # (expected wall − solve) / solve × 100
    billed_hours: float  # per instance
    expected_cost: float
    currency: str
    assumptions: tuple[str, ...]


@record
class PricingOption(Lite):
    name: PricingModel
    wall_hours: float  # expected, for spot
    cost: float
    currency: str
    meets_deadline: bool | None  # None: no deadline given


@record
class Unpriced(Lite):
    name: PricingModel
    reason: str


@record
class JobComparison(Lite):
    offer: str
    job: Job
    deadline_hours: float | None
    on_demand: OnDemandCost | None
    reserved_1y: ReservedCost | None
    reserved_3y: ReservedCost | None
    spot: SpotCost | None
    options: tuple[PricingOption, ...]  # cheapest first
    unpriced: tuple[Unpriced, ...]
    # The cheapest option that meets the deadline (None: none does, or nothing is priced).
    cheapest: PricingModel | None
    verdict: str  # one sentence a person reads
    currency: str
    price_source: str
    price_date: date

