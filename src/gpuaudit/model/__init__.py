"""Layer 1: the records every other layer exchanges (immutable, typed, units in field names).

Each name is imported from its module when first used, so that a command which needs only
the light price records (`gpuaudit recommend`, `catalog list`) does not pay for importing
every pydantic record of the project.
"""

from __future__ import annotations

import importlib
from typing import Any

# name → the module (in this package) that defines it
_WHERE: dict[str, str] = {
    "AccumulationPlan": "tuning",
    "Alert": "telemetry",
    "Billing": "cost",
    "Bottleneck": "diagnosis",
    "Change": "diagnosis",
    "Clocks": "machine",
    "ContendingProcess": "measurement",
    "Contention": "measurement",
    "Diagnosis": "diagnosis",
    "Ecc": "machine",
    "Evidence": "finding",
    "Finding": "finding",
    "Gpu": "machine",
    "GpuProcess": "machine",
    "GpuSample": "telemetry",
    "Host": "machine",
    "json_schema": "schema",
    "Link": "machine",
    "LinkKind": "machine",
    "load_run": "schema",
    "Machine": "machine",
    "Measurement": "measurement",
    "MigInstance": "machine",
    "new_run_id": "run",
    "Nic": "feed",
    "NodeIdentity": "fleet",
    "NvLink": "machine",
    "Observation": "diagnosis",
    "Offer": "cost",
    "OpProfile": "opprofile",
    "Params": "measurement",
    "PcieLink": "machine",
    "Power": "machine",
    "ProcessSample": "telemetry",
    "RdmaPort": "feed",
    "recommend_json_schema": "schema",
    "Record": "base",
    "RemappedRows": "machine",
    "RetiredPages": "machine",
    "Run": "run",
    "RunStatus": "run",
    "Sample": "telemetry",
    "SCHEMA_VERSION": "version",
    "Severity": "finding",
    "StorageTarget": "feed",
    "Thermal": "machine",
    "TrialResult": "tuning",
    "TuneResult": "tuning",
    "utc_now": "run",
    "worst": "finding",
    "XidEvent": "telemetry",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuaudit.model' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
