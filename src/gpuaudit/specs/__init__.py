"""Datasheet spec catalog: peak figures per GPU, each with its source; lookup by NVML name or
PCI device id.

The names below are imported from `gpuaudit.specs.catalog` when first used (it parses YAML
into validating models), so that `gpuaudit.specs.figure_cache` — the cached figures a price
estimate needs — can be used without that cost."""

from __future__ import annotations

from typing import Any

__all__ = [
    "FIGURE_FIELDS",
    "PRECISIONS",
    "GpuSpec",
    "PeakTflops",
    "Source",
    "SpecCatalog",
    "SpecCatalogError",
    "load_catalog",
    "lookup",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from gpuaudit.specs import catalog

    value = getattr(catalog, name)
    globals()[name] = value
    return value
