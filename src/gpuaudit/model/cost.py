"""Prices: one rentable GPU instance as a catalog lists it.

Every price is per hour of the whole instance, in `currency`, with the source and the date it
was read, so that a figure computed from it can say where it came from and how old it is.
"""

from __future__ import annotations

from datetime import date
from enum import Enum

from pydantic import Field

from .base import Record


class Billing(str, Enum):
    SECOND = "second"
    MINUTE = "minute"
    HOUR = "hour"


class Offer(Record):
    provider: str  # "aws", "gcp", "azure", "lambda", ...
    instance_type: str  # the provider's name for it, e.g. "p5en.48xlarge"
    region: str | None = None  # None: the same price everywhere the provider sells it
    gpu_model: str  # the specs id (e.g. "h200-sxm", see gpuaudit.specs), or a name specs lacks
    gpu_count: int = Field(ge=1)
    gpu_memory_gib: float | None = None  # per GPU
    vcpus: int | None = None
    ram_gib: float | None = None
    currency: str = "USD"
    on_demand_price_per_hour: float | None = None
    spot_price_per_hour: float | None = None
    reserved_1y_price_per_hour: float | None = None  # effective hourly rate of a 1-year term
    reserved_3y_price_per_hour: float | None = None
    # None: the granularity is not known. Code that rounds by it must then round per second
    # (the most favourable case) and say that it assumed so: see `effective_billing`.
    billing: Billing | None = Billing.SECOND
    billing_minimum_s: float = 0.0  # e.g. 60: the first minute is billed in full
    # GCP-style composition: the on-demand price of the host machine type alone and of ONE GPU,
    # when the provider prices them separately (on_demand = host + gpu_count × gpu). None when
    # the instance is priced as a whole or the part is not known.
    host_price_per_hour: float | None = Field(default=None, ge=0)
    gpu_price_per_hour: float | None = Field(default=None, ge=0)
    source: str  # where the prices were read (a URL, or "user")
    price_date: date  # when they were read
    notes: str | None = None  # e.g. "GCP: a2 host + A100 GPUs priced separately, summed"

    @property
    def key(self) -> str:
        return f"{self.provider}/{self.instance_type}" + (f"@{self.region}" if self.region
                                                          else "")

    def per_gpu(self, price_per_hour: float | None) -> float | None:
        return None if price_per_hour is None else price_per_hour / self.gpu_count

    @property
    def billing_known(self) -> bool:
        return self.billing is not None

    @property
    def effective_billing(self) -> Billing:
        """The granularity to round by: `billing`, or per second when it is not known (the
        caller should then state that assumption, e.g. with `BILLING_ASSUMPTION`)."""
        return Billing.SECOND if self.billing is None else self.billing

    @property
    def composed(self) -> bool:
        """True when the on-demand price is host + gpu_count × GPU (both parts known)."""
        return self.host_price_per_hour is not None and self.gpu_price_per_hour is not None


BILLING_ASSUMPTION = "billing granularity not known: rounded per second (the lowest possible cost)"
