"""The base every record shares: immutable, typed, strict about unknown fields."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from .version import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "Record"]


class Record(BaseModel):
    """An immutable record. Unknown fields are an error, so a garbled snapshot is caught, and
    so is a float that is not a number (NaN, ±inf): a record holds figures we can stand
    behind, whether made here or read back from a file or the store."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Facts(Record):
    """Machine facts as NVML answered them, NaN and ±inf included: inspect's check names such
    readings and leaves them out of its judgements (inspect/health/readings.py), which a
    refusal here would hide."""

    model_config = ConfigDict(allow_inf_nan=True)


# Larger than any count, FLOPs, bytes or time of one training step of any model (6·N·T for
# 10^12 parameters and 10^7 tokens a step is 6·10^19): a figure beyond it is damage.
MAX_AMOUNT = 1e24


def _bad_amount(v: Any) -> bool:
    return (isinstance(v, int | float) and not isinstance(v, bool)
            and not 0 <= v <= MAX_AMOUNT)


class Amounts(Record):
    """A record whose numbers are all amounts (counts, FLOPs, bytes, times, shares, shapes):
    one that is negative or beyond any machine's (10^24) is damage, refused with its field's
    path wherever the record is made or read back."""

    @field_validator("*", mode="after")
    @classmethod
    def _amounts(cls, value: Any) -> Any:
        if _bad_amount(value) or (isinstance(value, tuple) and any(map(_bad_amount, value))):
            raise ValueError(f"an amount from 0 to {MAX_AMOUNT:g}, not {value!r}"[:120])
        return value
