"""The datasheet figures a price estimate needs (peaks per precision, memory, bandwidth,
NVLink), without the YAML parser and the validating models: `gpuaudit recommend` needs these
figures of a few dozen GPUs in a few milliseconds.

`load_figures()` reads them from the parsed-file cache (`gpuaudit.filecache`), keyed on the
spec catalog file; on a miss it loads the full catalog (`gpuaudit.specs.catalog`, which checks
every figure and its source) and keeps its figures. A `SpecFigures` answers the questions a
`GpuSpec` answers for cost estimates (`peak`, `memory_gb`, ...) and is used in its place.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PRECISIONS: tuple[str, ...] = ("fp64", "fp64_tensor", "fp32", "tf32", "bf16", "fp16", "fp8",
                               "int8")
_LAYOUT = 1


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


def spec_file() -> Path:
    # Beside this module (importlib.resources would cost a fast command ~5 ms of imports).
    return Path(__file__).with_name("data") / "gpus.yaml"


def load_figures() -> FigureCatalog:
    """The packaged spec catalog's figures, from the cache while the file is unchanged."""
    global _LOADED
    if _LOADED is None:
        from gpuaudit import filecache

        def build() -> FigureCatalog:
            from .catalog import load_catalog

            return FigureCatalog(figures_of(g) for g in load_catalog().gpus)

        _LOADED = filecache.cached(
            "specs", [spec_file()], build, salt=f"figures {_LAYOUT} {_code_salt()}",
            encode=lambda cat: [tuple(getattr(g, f) for f in SpecFigures.__slots__)
                                for g in cat.gpus],
            decode=lambda rows: FigureCatalog(SpecFigures(*row) for row in rows))
    return _LOADED


def _code_salt() -> str:
    # The parsing code counts as a source: a changed loader never serves old figures.
    parts = []
    for name in ("catalog.py", "figures.py"):
        try:
            st = (Path(__file__).parent / name).stat()
        except OSError:
            continue
        parts.append(f"{name}:{st.st_mtime_ns}:{st.st_size}")
    return ";".join(parts)


_LOADED: FigureCatalog | None = None
