"""The base every record shares: immutable, typed, strict about unknown fields."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

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
