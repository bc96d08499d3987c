"""Datasheet figures as data: load, validate and look up ``data/gpus.yaml``.

Every figure in the catalog carries the source it was taken from, because a benchmark reported
as "% of spec" is only as good as the spec. Units: GB = 10^9 B, GB/s = 10^9 B/s, TFLOP/s =
10^12 FLOP/s (int8 in TOPS), tensor-core figures DENSE (datasheets print them with 2:4
sparsity; the YAML holds them halved).
"""

from __future__ import annotations

import datetime as dt
import functools
import importlib.resources
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpuaudit.errors import BadInputError
from gpuaudit.reading import load_yaml, read_text

from .figures import PRECISIONS

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


# Fields that are figures (each non-null one must name its source); peak_tflops.* added below.
_SCALAR_FIGURES: tuple[str, ...] = (
    "nvml_names",
    "pci_device_ids",
    "memory_gb",
    "memory_bandwidth_gbps",
    "nvlink_bandwidth_gbps",
    "nvlink_links",
    "pcie_generation",
    "pcie_width",
    "tdp_w",
    "max_sm_clock_mhz",
    "sm_count",
    "rops",
    "texture_units",
    "rt_cores",
    "graphics_tpcs",
)
FIGURE_FIELDS: tuple[str, ...] = _SCALAR_FIGURES + tuple(f"peak_tflops.{p}" for p in PRECISIONS)

_NVIDIA_VENDOR_ID = 0x10DE
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class SpecCatalogError(ValueError):
    """The spec catalog file is unreadable or inconsistent (one-line message)."""


class Source(BaseModel):
    """Where a figure was read: a datasheet, product page, whitepaper or ID list."""

    model_config = _FROZEN

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    title: str = Field(min_length=1)
    url: str = Field(pattern=r"^https?://\S+$")
    accessed: dt.date


class PeakTflops(BaseModel):
    """Dense peak throughput per precision, TFLOP/s (int8: TOPS); None = no published figure."""

    model_config = _FROZEN

    # No defaults on purpose: the YAML must say null explicitly, so a forgotten key is an error.
    fp64: float | None = Field(gt=0)
    fp64_tensor: float | None = Field(gt=0)
    fp32: float | None = Field(gt=0)
    tf32: float | None = Field(gt=0)
    bf16: float | None = Field(gt=0)
    fp16: float | None = Field(gt=0)
    fp8: float | None = Field(gt=0)
    int8: float | None = Field(gt=0)


Architecture = Literal["volta", "turing", "ampere", "ada", "hopper", "blackwell"]


class GpuSpec(BaseModel):
    """One GPU product as its datasheet describes it, with a source per non-null figure."""

    model_config = _FROZEN

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    name: str = Field(min_length=1)
    vendor: Literal["NVIDIA"]
    architecture: Architecture
    form_factor: str = Field(min_length=1)
    nvml_names: tuple[str, ...] = Field(min_length=1)
    pci_device_ids: tuple[int, ...] = Field(min_length=1)
    memory_gb: float = Field(gt=0)
    memory_bandwidth_gbps: float = Field(gt=0)  # GB/s, 10^9 B/s, read + write as datasheets count
    peak_tflops: PeakTflops
    nvlink_bandwidth_gbps: float | None = Field(gt=0)  # total bidirectional per GPU
    nvlink_links: int | None = Field(gt=0)
    pcie_generation: int = Field(ge=1, le=7)
    pcie_width: int = Field(ge=1, le=32)
    tdp_w: float = Field(gt=0)
    # The highest SM clock the datasheet gives (its boost clock); NVML's max SM clock should
    # reach it. None where no source we hold prints it.
    max_sm_clock_mhz: float | None = Field(gt=0)
    # Graphics units, for `bench render` and `recommend render`; None where no source we hold
    # prints the figure (NVIDIA publishes no ROP count for its datacenter parts).
    sm_count: int | None = Field(default=None, gt=0)
    rops: int | None = Field(default=None, gt=0)
    texture_units: int | None = Field(default=None, gt=0)
    rt_cores: int | None = Field(default=None, ge=0)  # 0: the product has none
    # TPCs (two SMs each) that run vertex and pixel shaders, where not all do: GH100 products
    # have two (the Hopper whitepaper), so rasterised rendering uses 4 of their SMs.
    graphics_tpcs: int | None = Field(default=None, gt=0)
    sources: dict[str, Source]
    notes: str | None = None

    @model_validator(mode="after")
    def _check(self) -> GpuSpec:
        for dev in self.pci_device_ids:
            if not 0 < dev <= 0xFFFF:
                raise ValueError(f"pci_device_ids: {dev:#x} is not a 16-bit device id")
        unknown = sorted(set(self.sources) - set(FIGURE_FIELDS))
        if unknown:
            raise ValueError(f"sources: {unknown[0]!r} is not a figure field")
        for key in FIGURE_FIELDS:
            if self.figure(key) is not None and key not in self.sources:
                raise ValueError(f"{key}: figure has no source")
        return self

    def figure(self, field: str) -> Any:
        """The value of a figure field, ``peak_tflops.x`` dotted keys included."""
        if field.startswith("peak_tflops."):
            return getattr(self.peak_tflops, field.removeprefix("peak_tflops."))
        if field not in _SCALAR_FIGURES:
            raise KeyError(field)
        return getattr(self, field)

    def source_of(self, field: str) -> Source | None:
        """The source of a figure (``memory_gb``, ``peak_tflops.bf16`` or just ``bf16``)."""
        if field in PRECISIONS:
            field = f"peak_tflops.{field}"
        return self.sources.get(field)

    def peak(self, precision: str) -> float | None:
        """Dense datasheet peak for a precision (TFLOP/s; int8 TOPS), None if none published."""
        key = precision.strip().lower()
        if key not in PRECISIONS:
            # A typo must not read as "this GPU has no such figure".
            raise ValueError(f"unknown precision {precision!r}; expected one of {PRECISIONS}")
        value: float | None = getattr(self.peak_tflops, key)
        return value


def _normalize_name(name: str) -> str:
    return " ".join(name.split()).casefold()


class SpecCatalog:
    """All known GPUs, indexed by id, NVML product name and PCI device id."""

    def __init__(self, gpus: tuple[GpuSpec, ...], sources: dict[str, Source]) -> None:
        self.gpus = gpus
        self.sources = sources
        self._by_id: dict[str, GpuSpec] = {}
        self._by_name: dict[str, GpuSpec] = {}
        self._by_pci: dict[int, GpuSpec] = {}
        for gpu in gpus:
            _add_unique(self._by_id, gpu.id, gpu, "id")
            for name in gpu.nvml_names:
                _add_unique(self._by_name, _normalize_name(name), gpu, "nvml_names")
            for dev in gpu.pci_device_ids:
                _add_unique(self._by_pci, dev, gpu, "pci_device_ids")

    def __repr__(self) -> str:
        return f"SpecCatalog({len(self.gpus)} gpus)"

    def get(self, gpu_id: str) -> GpuSpec | None:
        return self._by_id.get(gpu_id)

    def lookup(
        self, nvml_name: str | None = None, pci_device_id: int | None = None
    ) -> GpuSpec | None:
        """Find the spec for a GPU as NVML reports it; None when unknown, never a guess.

        The PCI device id wins (it tells SXM from PCIe where names could be mistaken); it may
        be the 16-bit device id or NVML's 32-bit ``pciDeviceId`` (device << 16 | 0x10DE). The
        name must match exactly up to case and runs of whitespace: no substring matching, so
        "NVIDIA H100 PCIe" can never fall onto the SXM part.
        """
        if pci_device_id is not None:
            dev = _device_id(pci_device_id)
            if dev is not None and dev in self._by_pci:
                return self._by_pci[dev]
        if nvml_name is not None:
            return self._by_name.get(_normalize_name(nvml_name))
        return None


def _device_id(value: int) -> int | None:
    if 0 < value <= 0xFFFF:
        return value
    if 0xFFFF < value <= 0xFFFFFFFF and value & 0xFFFF == _NVIDIA_VENDOR_ID:
        return value >> 16
    return None  # another vendor's combined id, or not an id at all


def _add_unique(index: dict[Any, GpuSpec], key: Any, gpu: GpuSpec, field: str) -> None:
    other = index.get(key)
    if other is not None:
        shown = f"{key:#06x}" if isinstance(key, int) else repr(key)
        raise SpecCatalogError(
            f"entry {gpu.id!r}: field {field!r}: {shown} is also used by entry {other.id!r}"
        )
    index[key] = gpu


# --- loading ---------------------------------------------------------------------------------


class _SourceYaml(BaseModel):
    model_config = _FROZEN

    title: str
    url: str
    accessed: dt.date


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _validation_message(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "(entry)"
    return f"field {loc!r}: {_one_line(first['msg'])}"


def _parse_sources(raw: Any, where: str) -> dict[str, Source]:
    if not isinstance(raw, dict):
        raise SpecCatalogError(f"{where}: 'sources' must be a mapping of source id to source")
    sources: dict[str, Source] = {}
    for sid, body in raw.items():
        try:
            fields = _SourceYaml.model_validate(body)
            sources[str(sid)] = Source(id=str(sid), **fields.model_dump())
        except ValidationError as err:
            raise SpecCatalogError(f"{where}: source {sid!r}: {_validation_message(err)}") from None
    return sources


def _parse_gpu(raw: Any, index: int, sources: dict[str, Source], where: str) -> GpuSpec:
    if not isinstance(raw, dict):
        raise SpecCatalogError(f"{where}: gpus[{index}] must be a mapping")
    entry = dict(raw)
    label = f"entry {entry.get('id', f'gpus[{index}]')!r}"

    default_id = entry.pop("source", None)
    if default_id is None:
        raise SpecCatalogError(f"{where}: {label}: field 'source': missing default source id")
    overrides = entry.pop("field_sources", None) or {}
    if not isinstance(overrides, dict):
        raise SpecCatalogError(f"{where}: {label}: field 'field_sources' must be a mapping")

    def resolve(field: str, sid: Any) -> Source:
        if sid not in sources:
            raise SpecCatalogError(f"{where}: {label}: field {field!r}: unknown source id {sid!r}")
        return sources[sid]

    default = resolve("source", default_id)
    resolved: dict[str, Source] = {}
    for key, sid in overrides.items():
        if key not in FIGURE_FIELDS:
            raise SpecCatalogError(
                f"{where}: {label}: field 'field_sources': {key!r} is not a figure field"
            )
        resolved[key] = resolve(f"field_sources.{key}", sid)

    peaks = entry.get("peak_tflops")
    for key in FIGURE_FIELDS:
        if key in resolved:
            continue
        if key.startswith("peak_tflops."):
            value = peaks.get(key.split(".", 1)[1]) if isinstance(peaks, dict) else None
        else:
            value = entry.get(key)
        if value is not None:
            resolved[key] = default
    try:
        return GpuSpec.model_validate({**entry, "sources": resolved})
    except ValidationError as err:
        raise SpecCatalogError(f"{where}: {label}: {_validation_message(err)}") from None


def _parse_catalog(text: str, where: str) -> SpecCatalog:
    try:
        doc = load_yaml(text, where)
    except BadInputError as err:
        raise SpecCatalogError(str(err)) from None
    if not isinstance(doc, dict) or set(doc) != {"sources", "gpus"}:
        raise SpecCatalogError(f"{where}: expected exactly the top-level keys 'sources' and 'gpus'")
    sources = _parse_sources(doc["sources"], where)
    if not isinstance(doc["gpus"], list) or not doc["gpus"]:
        raise SpecCatalogError(f"{where}: 'gpus' must be a non-empty list")
    gpus = tuple(_parse_gpu(raw, i, sources, where) for i, raw in enumerate(doc["gpus"]))
    try:
        return SpecCatalog(gpus, sources)
    except SpecCatalogError as err:
        raise SpecCatalogError(f"{where}: {err}") from None


@functools.lru_cache(maxsize=1)
def _default_catalog() -> SpecCatalog:
    data = importlib.resources.files("gpuaudit.specs").joinpath("data/gpus.yaml")
    return _parse_catalog(data.read_text(encoding="utf-8"), "gpus.yaml")


def load_catalog(path: str | Path | None = None) -> SpecCatalog:
    """Load a spec catalog; the packaged one (cached) when ``path`` is None."""
    if path is None:
        return _default_catalog()
    try:
        text = read_text(path, "spec catalog")
    except BadInputError as err:
        raise SpecCatalogError(str(err)) from None
    return _parse_catalog(text, str(path))


def lookup(nvml_name: str | None = None, pci_device_id: int | None = None) -> GpuSpec | None:
    """:meth:`SpecCatalog.lookup` on the packaged catalog."""
    return load_catalog().lookup(nvml_name=nvml_name, pci_device_id=pci_device_id)
