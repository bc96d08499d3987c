"""Prices: one rentable GPU instance as a catalog lists it.

Every price is per hour of the whole instance, in `currency`, with the source and the date it
was read, so that a figure computed from it can say where it came from and how old it is.

`Offer` is a tuple-based record, not a pydantic model: a catalog holds thousands of them and
`gpuaudit recommend` reads 10,000 in a few milliseconds from the parsed-catalog cache (a
tuple is built in C; a pydantic model or a frozen dataclass costs ten times more per offer).
It validates what it is given when made by keyword, as the pydantic model did, and offers the
same `model_dump`/`model_copy`; pydantic reads it as an object in a JSON Schema.
"""

from __future__ import annotations

import functools
import math
import typing
from datetime import date
from enum import Enum
from typing import Any, NamedTuple

from .lite import dump


class Billing(str, Enum):
    SECOND = "second"
    MINUTE = "minute"
    HOUR = "hour"


class _OfferFields(NamedTuple):
    provider: str  # "aws", "gcp", "azure", "lambda", ...
    instance_type: str  # the provider's name for it, e.g. "p5en.48xlarge"
    region: str | None  # None: the same price everywhere the provider sells it
    gpu_model: str  # the specs id (e.g. "h200-sxm", see gpuaudit.specs), or a name specs lacks
    gpu_count: int  # ≥ 1
    gpu_memory_gib: float | None  # per GPU
    vcpus: int | None
    ram_gib: float | None
    currency: str
    on_demand_price_per_hour: float | None
    spot_price_per_hour: float | None
    reserved_1y_price_per_hour: float | None  # effective hourly rate of a 1-year term
    reserved_3y_price_per_hour: float | None
    # None: the granularity is not known. Code that rounds by it must then round per second
    # (the most favourable case) and say that it assumed so: see `effective_billing`.
    billing: Billing | None
    billing_minimum_s: float  # e.g. 60: the first minute is billed in full
    # GCP-style composition: the on-demand price of the host machine type alone and of ONE GPU,
    # when the provider prices them separately (on_demand = host + gpu_count × gpu). None when
    # the instance is priced as a whole or the part is not known. ≥ 0.
    host_price_per_hour: float | None
    gpu_price_per_hour: float | None
    source: str  # where the prices were read (a URL, or "user")
    price_date: date  # when they were read
    notes: str | None  # e.g. "GCP: a2 host + A100 GPUs priced separately, summed"


FIELDS: tuple[str, ...] = _OfferFields._fields
REQUIRED = ("provider", "instance_type", "gpu_model", "gpu_count", "source", "price_date")
DEFAULTS: dict[str, Any] = {
    "region": None, "gpu_memory_gib": None, "vcpus": None, "ram_gib": None, "currency": "USD",
    "on_demand_price_per_hour": None, "spot_price_per_hour": None,
    "reserved_1y_price_per_hour": None, "reserved_3y_price_per_hour": None,
    "billing": Billing.SECOND, "billing_minimum_s": 0.0, "host_price_per_hour": None,
    "gpu_price_per_hour": None, "notes": None,
}
_TEXT = ("provider", "instance_type", "gpu_model", "currency", "source")
_OPTIONAL_TEXT = ("region", "notes")
_OPTIONAL_FLOAT = ("gpu_memory_gib", "ram_gib", "on_demand_price_per_hour",
                   "spot_price_per_hour", "reserved_1y_price_per_hour",
                   "reserved_3y_price_per_hour", "host_price_per_hour", "gpu_price_per_hour")
_NON_NEGATIVE = ("host_price_per_hour", "gpu_price_per_hour")


def _number(name: str, value: Any, whole: bool = False) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"{name}: a number is expected, not {value!r}")
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ValueError(f"{name}: {value!r} is not a number") from None
    if not isinstance(value, int | float):
        raise ValueError(f"{name}: a number is expected, not {type(value).__name__}")
    if whole:
        if value != int(value):
            raise ValueError(f"{name}: {value!r} is not a whole number")
        return int(value)
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name}: not a number")
    return value


def _rebuild(values: tuple[Any, ...]) -> Offer:
    return tuple.__new__(Offer, values)


class Offer(_OfferFields):
    """One instance type (in one region) with its prices. Make it by keyword; the fields, their
    order and their defaults are `FIELDS`, `DEFAULTS` (required: `REQUIRED`)."""

    __slots__ = ()

    def __new__(cls, **given: Any) -> Offer:
        unknown = set(given) - set(FIELDS)
        if unknown:
            raise ValueError(f"Offer: unknown field(s) {', '.join(sorted(unknown))}")
        missing = [k for k in REQUIRED if given.get(k) is None]
        if missing:
            raise ValueError(f"{missing[0]}: field required")
        v = {**DEFAULTS, **given}
        for name in _TEXT:
            if not isinstance(v[name], str):
                raise ValueError(f"{name}: text is expected, not {v[name]!r}")
        for name in _OPTIONAL_TEXT:
            if v[name] is not None and not isinstance(v[name], str):
                raise ValueError(f"{name}: text is expected, not {v[name]!r}")
        v["gpu_count"] = _number("gpu_count", v["gpu_count"], whole=True)
        if v["gpu_count"] < 1:
            raise ValueError(f"gpu_count: must be at least 1, not {v['gpu_count']}")
        if v["vcpus"] is not None:
            v["vcpus"] = _number("vcpus", v["vcpus"], whole=True)
        for name in _OPTIONAL_FLOAT:
            if v[name] is not None:
                v[name] = _number(name, v[name])
        for name in _NON_NEGATIVE:
            if v[name] is not None and v[name] < 0:
                raise ValueError(f"{name}: must be at least 0, not {v[name]:g}")
        v["billing_minimum_s"] = _number("billing_minimum_s", v["billing_minimum_s"])
        if v["billing"] is not None and not isinstance(v["billing"], Billing):
            try:
                v["billing"] = Billing(v["billing"])
            except ValueError:
                raise ValueError(f"billing: {v['billing']!r} is not second, minute or hour"
                                 ) from None
        when = v["price_date"]
        if isinstance(when, str):
            try:
                when = date.fromisoformat(when.strip())
            except ValueError:
                raise ValueError(f"price_date: {when!r} is not a date (YYYY-MM-DD)") from None
        if not isinstance(when, date) or hasattr(when, "hour"):
            raise ValueError(f"price_date: a date is expected, not {when!r}")
        v["price_date"] = when
        return tuple.__new__(cls, tuple(v[name] for name in FIELDS))

    @classmethod
    def from_values(cls, values: tuple[Any, ...]) -> Offer:
        """An offer from its values in `FIELDS` order, trusted (no checks): for offers read
        back from the parsed-catalog cache, which were checked when first made."""
        return tuple.__new__(cls, values)

    def __reduce__(self) -> tuple[Any, ...]:  # pickle and copy without the keyword checks
        return (_rebuild, (tuple(self),))

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

    # -- the pydantic-like interface ---------------------------------------------------------

    def model_dump(self, *, mode: str = "python") -> dict[str, Any]:
        return dump(self, mode == "json")  # type: ignore[no-any-return]

    def model_copy(self, *, update: dict[str, Any] | None = None) -> Offer:
        return Offer(**{**self._asdict(), **(update or {})})

    @classmethod
    def model_validate(cls, data: dict[str, Any]) -> Offer:
        return cls(**data)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        # An Offer inside a record's JSON Schema (recommend's): an object with these fields.
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(
            lambda m: cls(**dict(m)), handler(_schema_model()))


@functools.cache
def _schema_model() -> Any:
    """The pydantic model an Offer's JSON Schema and validation are read from."""
    from pydantic import ConfigDict, Field, create_model

    hints = typing.get_type_hints(_OfferFields)
    bounds: dict[str, dict[str, Any]] = {"gpu_count": {"ge": 1}, "host_price_per_hour": {"ge": 0},
              "gpu_price_per_hour": {"ge": 0}}
    fields: dict[str, Any] = {}
    for name in FIELDS:
        default = DEFAULTS.get(name, ...)
        fields[name] = (hints[name], Field(default, **bounds.get(name, {})))
    return create_model("Offer", __config__=ConfigDict(frozen=True, extra="forbid"),
                        **fields)


BILLING_ASSUMPTION = "billing granularity not known: rounded per second (the lowest possible cost)"
