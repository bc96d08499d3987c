"""The base every record shares: immutable, typed, strict about unknown fields."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from .version import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "Record"]


class Record(BaseModel):
    """An immutable record. Unknown fields are an error, so a garbled snapshot is caught."""

    model_config = ConfigDict(frozen=True, extra="forbid")
