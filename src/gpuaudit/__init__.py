"""gpuaudit: what a GPU server really delivers, why a job does not get it, what it costs.

The capabilities are plain functions returning `gpuaudit.model` records:

    >>> from gpuaudit import inspect_machine
    >>> run = inspect_machine()          # snapshot + health findings
    >>> run.verdict, run.machine.gpus

They and the others (`run_bench`, `Monitor`, `load_catalog`, `compare_job`, `recommend`...)
are imported when first used, so `import gpuaudit` stays light and needs no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__

# name → (module, attribute): the library API of layer 4, loaded on first use (the inspect
# functions too: their NVML stack is not for a command that only reads prices).
_LAZY = {
    "check_machine": ("gpuaudit.inspect", "check_machine"),
    "inspect_machine": ("gpuaudit.inspect", "inspect_machine"),
    "read_snapshot": ("gpuaudit.inspect", "read_snapshot"),
    "audit": ("gpuaudit.audit", "audit"),
    "run_bench": ("gpuaudit.bench.runner", "run_bench"),
    "feed_findings": ("gpuaudit.bench.feed.verdict", "feed_findings"),
    "FeedJob": ("gpuaudit.bench.feed.verdict", "FeedJob"),
    "serve_network": ("gpuaudit.bench.feed.serve", "serve"),
    "Monitor": ("gpuaudit.telemetry.monitor", "Monitor"),
    "Sampler": ("gpuaudit.hw.telemetry", "Sampler"),
    "IdlePolicy": ("gpuaudit.telemetry.idle", "IdlePolicy"),
    "load_rules": ("gpuaudit.telemetry.rules", "load_rules"),
    "load_catalog": ("gpuaudit.cost.catalog", "load_catalog"),
    "validate_catalog": ("gpuaudit.cost.catalog", "validate"),
    "compare_job": ("gpuaudit.cost.pricing", "compare_job"),
    "tco": ("gpuaudit.cost.tco", "tco"),
    "price_performance": ("gpuaudit.cost.work", "price_performance"),
    "idle_cost": ("gpuaudit.cost.work", "idle_cost"),
    "recommend": ("gpuaudit.cost.recommend", "recommend"),
    "run_fleet": ("gpuaudit.fleet.runner", "run_fleet"),
    "Store": ("gpuaudit.store", "Store"),
    "check_store": ("gpuaudit.store", "check_store"),
    "save_or_keep": ("gpuaudit.store", "save_or_keep"),
    "watch": ("gpuaudit.jobwatch", "watch"),
    "step": ("gpuaudit.jobwatch", "step"),
    "loader": ("gpuaudit.jobwatch", "loader"),
    "lightning_callback": ("gpuaudit.jobwatch", "lightning_callback"),
    "diagnose_command": ("gpuaudit.diagnose.doctor", "run"),
    "diagnose_recordings": ("gpuaudit.diagnose.doctor", "from_recordings"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'gpuaudit' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # once: gpuaudit.step() is called every training step
    return value
