"""Tests of the datasheet spec catalog: data invariants, lookup rules, and loader errors."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from gpuaudit import specs
from gpuaudit.specs import (
    FIGURE_FIELDS,
    PRECISIONS,
    GpuSpec,
    SpecCatalog,
    SpecCatalogError,
    load_catalog,
)

CATALOG = load_catalog()
GPUS = {g.id: g for g in CATALOG.gpus}

# The GPUs people rent; each must be in the catalog, with its NVML name resolving to it.
REQUIRED = {
    "v100-sxm2-16gb": "Tesla V100-SXM2-16GB",
    "v100-sxm2-32gb": "Tesla V100-SXM2-32GB",
    "v100-pcie-16gb": "Tesla V100-PCIE-16GB",
    "t4": "Tesla T4",
    "a10": "NVIDIA A10",
    "a10g": "NVIDIA A10G",
    "l4": "NVIDIA L4",
    "l40s": "NVIDIA L40S",
    "a100-sxm4-40gb": "NVIDIA A100-SXM4-40GB",
    "a100-sxm4-80gb": "NVIDIA A100-SXM4-80GB",
    "a100-pcie-40gb": "NVIDIA A100-PCIE-40GB",
    "a100-pcie-80gb": "NVIDIA A100 80GB PCIe",
    "h100-sxm": "NVIDIA H100 80GB HBM3",
    "h100-pcie": "NVIDIA H100 PCIe",
    "h100-nvl": "NVIDIA H100 NVL",
    "h200-sxm": "NVIDIA H200",
    "h200-nvl": "NVIDIA H200 NVL",
    "b200": "NVIDIA B200",
    "rtx-4090": "NVIDIA GeForce RTX 4090",
    "rtx-3090": "NVIDIA GeForce RTX 3090",
}


def with_peaks(*precisions: str) -> list[GpuSpec]:
    return [g for g in CATALOG.gpus if all(g.peak(p) is not None for p in precisions)]


def ids(gpus: list[GpuSpec]) -> list[str]:
    return [g.id for g in gpus]


# --- the data ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("gpu_id", "nvml_name"), sorted(REQUIRED.items()))
def test_required_gpu_present_and_found_by_its_nvml_name(gpu_id: str, nvml_name: str) -> None:
    assert gpu_id in GPUS
    assert nvml_name in GPUS[gpu_id].nvml_names
    assert CATALOG.lookup(nvml_name=nvml_name) is GPUS[gpu_id]


@pytest.mark.parametrize("gpu", CATALOG.gpus, ids=ids(list(CATALOG.gpus)))
def test_every_non_null_figure_has_a_resolvable_source(gpu: GpuSpec) -> None:
    for field in FIGURE_FIELDS:
        value = gpu.figure(field)
        source = gpu.source_of(field)
        if value is not None:
            assert source is not None, f"{gpu.id}.{field} has no source"
            assert CATALOG.sources[source.id] == source
            assert source.url.startswith(("https://", "http://"))
    assert gpu.source_of("bf16") == gpu.source_of("peak_tflops.bf16")


@pytest.mark.parametrize("gpu", CATALOG.gpus, ids=ids(list(CATALOG.gpus)))
def test_every_entry_has_the_always_required_figures(gpu: GpuSpec) -> None:
    assert gpu.vendor == "NVIDIA"
    assert gpu.nvml_names and gpu.pci_device_ids
    assert gpu.memory_gb > 0 and gpu.memory_bandwidth_gbps > 0 and gpu.tdp_w > 0
    assert gpu.pcie_generation >= 3 and gpu.pcie_width == 16
    assert gpu.peak("fp32") is not None
    # NVLink bandwidth and link count are both known or both absent.
    assert (gpu.nvlink_bandwidth_gbps is None) == (gpu.nvlink_links is None)


def test_sources_that_nobody_uses_are_flagged() -> None:
    used = {s.id for g in CATALOG.gpus for s in g.sources.values()}
    assert used == set(CATALOG.sources)


def test_no_two_entries_share_an_nvml_name_or_pci_id() -> None:
    names = [" ".join(n.split()).casefold() for g in CATALOG.gpus for n in g.nvml_names]
    pcis = [d for g in CATALOG.gpus for d in g.pci_device_ids]
    assert len(names) == len(set(names))
    assert len(pcis) == len(set(pcis))
    assert len(GPUS) == len(CATALOG.gpus)


@pytest.mark.parametrize("gpu", with_peaks("bf16", "fp16"), ids=ids(with_peaks("bf16", "fp16")))
def test_bf16_equals_fp16_dense(gpu: GpuSpec) -> None:
    # Every datasheet in the catalog prints one figure for both (FP32 accumulation).
    assert gpu.peak("bf16") == gpu.peak("fp16")


@pytest.mark.parametrize("gpu", with_peaks("fp8", "bf16"), ids=ids(with_peaks("fp8", "bf16")))
def test_fp8_is_twice_bf16(gpu: GpuSpec) -> None:
    assert gpu.architecture in {"ada", "hopper", "blackwell"}
    assert math.isclose(gpu.peak("fp8"), 2 * gpu.peak("bf16"), rel_tol=0.03)  # type: ignore[operator]


@pytest.mark.parametrize("gpu", with_peaks("tf32", "bf16"), ids=ids(with_peaks("tf32", "bf16")))
def test_tf32_is_half_bf16(gpu: GpuSpec) -> None:
    assert math.isclose(gpu.peak("tf32"), gpu.peak("bf16") / 2, rel_tol=0.03)  # type: ignore[operator]


def test_no_fp8_before_ada_and_no_bf16_before_ampere() -> None:
    for gpu in CATALOG.gpus:
        if gpu.architecture in {"volta", "turing", "ampere"}:
            assert gpu.peak("fp8") is None, gpu.id
        if gpu.architecture in {"volta", "turing"}:
            assert gpu.peak("bf16") is None and gpu.peak("tf32") is None, gpu.id
        else:
            assert gpu.peak("bf16") is not None, gpu.id


@pytest.mark.parametrize("gpu", CATALOG.gpus, ids=ids(list(CATALOG.gpus)))
def test_ordering_of_precisions(gpu: GpuSpec) -> None:
    p = {k: gpu.peak(k) for k in PRECISIONS}
    if p["int8"] is not None and p["fp16"] is not None:
        assert p["int8"] >= p["fp16"]
    if p["fp16"] is not None:
        assert p["fp16"] > p["fp32"]  # type: ignore[operator]
    if p["tf32"] is not None:
        assert p["tf32"] >= p["fp32"]  # type: ignore[operator]
    if p["fp64"] is not None:
        assert p["fp64"] <= p["fp32"]  # type: ignore[operator]
    if p["fp64_tensor"] is not None:
        assert p["fp64"] is not None and p["fp64_tensor"] >= p["fp64"]


def test_dense_reference_figures() -> None:
    # Spot checks against the datasheets (sparse figures halved) so a slip in the YAML shows.
    h200 = GPUS["h200-sxm"]
    assert (h200.peak("bf16"), h200.peak("fp8"), h200.peak("tf32")) == (989.5, 1979, 494.5)
    assert (h200.peak("fp64"), h200.peak("fp64_tensor"), h200.peak("fp32")) == (34, 67, 67)
    assert (h200.memory_gb, h200.memory_bandwidth_gbps, h200.tdp_w) == (141, 4800, 700)
    assert (h200.nvlink_bandwidth_gbps, h200.pcie_generation, h200.pcie_width) == (900, 5, 16)
    assert GPUS["h100-sxm"].peak_tflops == h200.peak_tflops
    assert GPUS["h100-pcie"].peak("bf16") == 756.5
    assert GPUS["a100-sxm4-80gb"].peak("bf16") == 312
    assert GPUS["a100-sxm4-80gb"].memory_bandwidth_gbps == 2039
    assert GPUS["l4"].peak("fp8") == 242.5


def test_peak_rejects_an_unknown_precision() -> None:
    with pytest.raises(ValueError, match="unknown precision"):
        GPUS["h200-sxm"].peak("fp4")
    assert GPUS["h200-sxm"].peak(" BF16 ") == 989.5


# --- lookup ------------------------------------------------------------------------------------


def test_lookup_by_nvml_name_and_by_pci_id() -> None:
    assert CATALOG.lookup(nvml_name="NVIDIA H200") is GPUS["h200-sxm"]
    assert CATALOG.lookup(pci_device_id=0x2335) is GPUS["h200-sxm"]
    assert CATALOG.lookup(pci_device_id=0x233510DE) is GPUS["h200-sxm"]
    assert CATALOG.lookup(pci_device_id=0x233B10DE) is GPUS["h200-nvl"]


def test_lookup_pcie_part_never_falls_onto_sxm() -> None:
    assert CATALOG.lookup(nvml_name="NVIDIA H100 PCIe") is GPUS["h100-pcie"]
    assert CATALOG.lookup(pci_device_id=0x233110DE) is GPUS["h100-pcie"]
    assert CATALOG.lookup(nvml_name="NVIDIA H100") is None  # 0x2339 variant: unknown, no guess


def test_lookup_normalizes_case_and_whitespace_only() -> None:
    assert CATALOG.lookup(nvml_name="nvidia  h200") is GPUS["h200-sxm"]
    assert CATALOG.lookup(nvml_name="  NVIDIA\tH200 ") is GPUS["h200-sxm"]
    assert CATALOG.lookup(nvml_name="NVIDIA-H200") is None


@pytest.mark.parametrize("name", ["H200", "NVIDIA H20", "NVIDIA H200 SXM", "Tesla V100", "", "A10"])
def test_lookup_never_guesses_by_substring(name: str) -> None:
    assert CATALOG.lookup(nvml_name=name) is None


def test_lookup_pci_id_wins_and_unknown_ids_are_none() -> None:
    # The PCI id is the more precise key, so it wins over a (mis)reported name.
    assert CATALOG.lookup(nvml_name="NVIDIA H100 PCIe", pci_device_id=0x2335) is GPUS["h200-sxm"]
    # An unknown id falls back to the name; neither known gives None.
    assert CATALOG.lookup(nvml_name="NVIDIA L4", pci_device_id=0xFFFF) is GPUS["l4"]
    assert CATALOG.lookup(pci_device_id=0x233510EE) is None  # not NVIDIA's vendor id
    assert CATALOG.lookup(pci_device_id=0) is None
    assert CATALOG.lookup(pci_device_id=0x1_0000_0000) is None
    assert CATALOG.lookup() is None


def test_legacy_driver_names_resolve() -> None:
    assert CATALOG.lookup(nvml_name="A100-SXM4-40GB") is GPUS["a100-sxm4-40gb"]
    assert CATALOG.lookup(nvml_name="GeForce RTX 3090") is GPUS["rtx-3090"]


def test_module_level_lookup_uses_the_cached_default_catalog() -> None:
    assert load_catalog() is CATALOG
    found = specs.lookup(nvml_name="NVIDIA H200")
    assert found is not None and found.id == "h200-sxm"
    assert CATALOG.get("h200-sxm") is GPUS["h200-sxm"]
    assert CATALOG.get("nope") is None


def test_records_are_frozen() -> None:
    gpu = GPUS["h200-sxm"]
    with pytest.raises(ValueError):
        gpu.memory_gb = 1  # type: ignore[misc]
    with pytest.raises(ValueError):
        gpu.peak_tflops.bf16 = 1  # type: ignore[misc]


# --- loader errors -----------------------------------------------------------------------------


def packaged_doc() -> dict:
    path = Path(specs.catalog.__file__).parent / "data" / "gpus.yaml"
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def write(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "gpus.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def test_a_copy_of_the_packaged_file_loads(tmp_path: Path) -> None:
    catalog = load_catalog(write(tmp_path, packaged_doc()))
    assert isinstance(catalog, SpecCatalog)
    assert [g.id for g in catalog.gpus] == [g.id for g in CATALOG.gpus]


def h200_entry(doc: dict) -> dict:
    return next(e for e in doc["gpus"] if e["id"] == "h200-sxm")


def assert_one_line_error(path: Path, *parts: str) -> None:
    with pytest.raises(SpecCatalogError) as info:
        load_catalog(path)
    message = str(info.value)
    assert "\n" not in message
    for part in parts:
        assert part in message


def test_unknown_source_id_names_entry_and_field(tmp_path: Path) -> None:
    doc = packaged_doc()
    h200_entry(doc)["field_sources"]["peak_tflops.fp8"] = "no-such-source"
    assert_one_line_error(write(tmp_path, doc), "h200-sxm", "peak_tflops.fp8", "no-such-source")


def test_unknown_default_source_names_entry(tmp_path: Path) -> None:
    doc = packaged_doc()
    h200_entry(doc)["source"] = "no-such-source"
    assert_one_line_error(write(tmp_path, doc), "h200-sxm", "source", "no-such-source")


def test_missing_field_names_entry_and_field(tmp_path: Path) -> None:
    doc = packaged_doc()
    del h200_entry(doc)["memory_bandwidth_gbps"]
    assert_one_line_error(write(tmp_path, doc), "h200-sxm", "memory_bandwidth_gbps")


def test_missing_precision_key_is_an_error_not_a_null(tmp_path: Path) -> None:
    doc = packaged_doc()
    del h200_entry(doc)["peak_tflops"]["fp8"]
    assert_one_line_error(write(tmp_path, doc), "h200-sxm", "peak_tflops.fp8")


def test_unknown_field_and_bad_value_are_errors(tmp_path: Path) -> None:
    doc = packaged_doc()
    h200_entry(doc)["memroy_gb"] = 141
    assert_one_line_error(write(tmp_path, doc), "h200-sxm", "memroy_gb")
    doc = packaged_doc()
    h200_entry(doc)["memory_gb"] = -1
    assert_one_line_error(write(tmp_path, doc), "h200-sxm", "memory_gb")
    doc = packaged_doc()
    h200_entry(doc)["field_sources"]["peak_tflops.fp4"] = "nvidia-h200-page"
    assert_one_line_error(write(tmp_path, doc), "h200-sxm", "peak_tflops.fp4")


def test_duplicate_pci_id_and_name_are_errors(tmp_path: Path) -> None:
    doc = packaged_doc()
    next(e for e in doc["gpus"] if e["id"] == "h200-nvl")["pci_device_ids"] = [0x2335]
    assert_one_line_error(write(tmp_path, doc), "h200-nvl", "pci_device_ids", "0x2335", "h200-sxm")
    doc = packaged_doc()
    next(e for e in doc["gpus"] if e["id"] == "h100-pcie")["nvml_names"] = ["nvidia H200"]
    assert_one_line_error(write(tmp_path, doc), "h100-pcie", "nvml_names", "h200-sxm")


def test_bad_source_record_is_an_error(tmp_path: Path) -> None:
    doc = packaged_doc()
    doc["sources"]["nvidia-h200-page"]["accessed"] = "last tuesday"
    assert_one_line_error(write(tmp_path, doc), "nvidia-h200-page", "accessed")


def test_invalid_yaml_and_wrong_shape(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text("sources: {a: [1, 2\ngpus: [\n", encoding="utf-8")
    assert_one_line_error(path, "invalid YAML", "line")
    assert_one_line_error(write(tmp_path, {"gpus": []}), "sources", "gpus")
    assert_one_line_error(tmp_path / "absent.yaml", "cannot read")
