"""The base every record shares: immutable, typed, strict about unknown fields."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

# Bumped whenever a stored or printed document changes shape incompatibly.
#   2: Run.node (the fleet node a run was measured on)
#   3: Run.op_profiles (bench train --op-profile's records for predict)
SCHEMA_VERSION = 3


class Record(BaseModel):
    """An immutable record. Unknown fields are an error, so a garbled snapshot is caught."""

    model_config = ConfigDict(frozen=True, extra="forbid")
