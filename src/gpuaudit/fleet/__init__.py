"""Layer 4: the same audit across many nodes of a Ray cluster, and the fleet judged by itself.

`run_fleet` (Ray, imported when called) audits every GPU node and hands each node's Run to a
saver; `analyse` turns the store's rows into a FleetReport (bad nodes and why). Nothing here
prints or opens a database.
"""

from __future__ import annotations

import importlib
from typing import Any

from .records import (
    FLEET_SCHEMA_VERSION,
    BadNode,
    Deviation,
    FigureSpread,
    FleetReport,
    FleetRows,
    FleetRun,
    NodeOutcome,
    NodeState,
)

_LAZY = {
    "run_fleet": ("gpuaudit.fleet.runner", "run_fleet"),
    "NodeProgress": ("gpuaudit.fleet.runner", "NodeProgress"),
    "analyse": ("gpuaudit.fleet.analysis", "analyse"),
    "all_reduce_across": ("gpuaudit.fleet.allreduce", "all_reduce_across"),
    "audit_node": ("gpuaudit.fleet.node", "audit_node"),
}

__all__ = ["FLEET_SCHEMA_VERSION", "BadNode", "Deviation", "FigureSpread", "FleetReport",
           "FleetRows", "FleetRun", "NodeOutcome", "NodeState", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'gpuaudit.fleet' has no attribute {name!r}")
    module, attr = _LAZY[name]
    return getattr(importlib.import_module(module), attr)
