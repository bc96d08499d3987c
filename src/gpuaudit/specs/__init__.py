"""Datasheet spec catalog: peak figures per GPU, each with its source; lookup by NVML name or
PCI device id."""

from __future__ import annotations

from gpuaudit.specs.catalog import (
    FIGURE_FIELDS,
    PRECISIONS,
    GpuSpec,
    PeakTflops,
    Source,
    SpecCatalog,
    SpecCatalogError,
    load_catalog,
    lookup,
)

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
