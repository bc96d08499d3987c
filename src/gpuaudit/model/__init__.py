"""Layer 1: the records every other layer exchanges (immutable, typed, units in field names)."""

from .base import SCHEMA_VERSION, Record
from .cost import Billing, Offer
from .diagnosis import Bottleneck, Change, Diagnosis, Observation
from .feed import Nic, RdmaPort, StorageTarget
from .finding import Evidence, Finding, Severity, worst
from .fleet import NodeIdentity
from .machine import (
    Clocks,
    Ecc,
    Gpu,
    GpuProcess,
    Host,
    Link,
    LinkKind,
    Machine,
    MigInstance,
    NvLink,
    PcieLink,
    Power,
    RemappedRows,
    RetiredPages,
    Thermal,
)
from .measurement import ContendingProcess, Contention, Measurement, Params
from .opprofile import OpProfile
from .run import Run, RunStatus, new_run_id, utc_now
from .schema import json_schema, load_run, recommend_json_schema
from .telemetry import Alert, GpuSample, ProcessSample, Sample, XidEvent
from .tuning import AccumulationPlan, TrialResult, TuneResult

__all__ = [
    "SCHEMA_VERSION",
    "AccumulationPlan",
    "Alert",
    "Billing",
    "Bottleneck",
    "Change",
    "Clocks",
    "ContendingProcess",
    "Contention",
    "Diagnosis",
    "Ecc",
    "Evidence",
    "Finding",
    "Gpu",
    "GpuProcess",
    "GpuSample",
    "Host",
    "Link",
    "LinkKind",
    "Machine",
    "Measurement",
    "MigInstance",
    "Nic",
    "NodeIdentity",
    "NvLink",
    "Observation",
    "Offer",
    "OpProfile",
    "Params",
    "PcieLink",
    "Power",
    "ProcessSample",
    "RdmaPort",
    "Record",
    "RemappedRows",
    "RetiredPages",
    "Run",
    "RunStatus",
    "Sample",
    "Severity",
    "StorageTarget",
    "Thermal",
    "TrialResult",
    "TuneResult",
    "XidEvent",
    "json_schema",
    "load_run",
    "new_run_id",
    "recommend_json_schema",
    "utc_now",
    "worst",
]
