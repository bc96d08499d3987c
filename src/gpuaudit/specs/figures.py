"""The datasheet figures a price estimate needs (peaks per precision, memory, bandwidth,
NVLink), without the YAML parser and the validating models: `gpuaudit recommend` needs these
figures of a few dozen GPUs in a few milliseconds.

The records only: `gpuaudit.specs.figure_cache.load_figures()` reads them from the parsed-file
cache, or from the full catalog on a miss. A `SpecFigures` answers the questions a `GpuSpec`
answers for cost estimates (`peak`, `memory_gb`, ...) and is used in its place.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

PRECISIONS: tuple[str, ...] = ("fp64", "fp64_tensor", "fp32", "tf32", "bf16", "fp16", "fp8",
                               "int8")


@dataclass(frozen=True, slots=True)
class SpecFigures:
    """One GPU's figures as `GpuSpec` has them (units: GB, GB/s, TFLOP/s dense, W)."""

    id: str
    name: str
    architecture: str
    form_factor: str
    memory_gb: float
    memory_bandwidth_gbps: float
    nvlink_bandwidth_gbps: float | None
    pcie_generation: int
    pcie_width: int
    tdp_w: float
    peaks: tuple[tuple[str, float | None], ...]

    def peak(self, precision: str) -> float | None:
        """Dense datasheet peak (TFLOP/s; int8 TOPS), None when none is published."""
        key = precision.strip().lower()
        for name, value in self.peaks:
            if name == key:
                return value
        raise ValueError(f"unknown precision {precision!r}; expected one of {PRECISIONS}")


class FigureCatalog:
    """The figures of every GPU of a spec catalog, by id."""

    def __init__(self, gpus: Iterable[SpecFigures]) -> None:
        self.gpus = tuple(gpus)
        self._by_id = {g.id: g for g in self.gpus}

    def get(self, gpu_id: str) -> SpecFigures | None:
        return self._by_id.get(gpu_id)

    def __repr__(self) -> str:
        return f"FigureCatalog({len(self.gpus)} gpus)"


def figures_of(spec: Any) -> SpecFigures:
    """A `GpuSpec`'s figures."""
    return SpecFigures(
        id=spec.id, name=spec.name, architecture=spec.architecture,
        form_factor=spec.form_factor, memory_gb=spec.memory_gb,
        memory_bandwidth_gbps=spec.memory_bandwidth_gbps,
        nvlink_bandwidth_gbps=spec.nvlink_bandwidth_gbps,
        pcie_generation=spec.pcie_generation, pcie_width=spec.pcie_width, tdp_w=spec.tdp_w,
        peaks=tuple((p, spec.peak(p)) for p in PRECISIONS))
