"""Health findings on real H200 snapshots, and on copies with one fault planted each."""

from __future__ import annotations

import json

import pytest

from gpuaudit.inspect import check_machine, read_snapshot
from gpuaudit.model import Machine, Severity

from .faults import FAULTS, base_doc, fault_path, planted, render


def findings_of(doc: dict) -> dict[tuple[str, int | None], str]:
    machine = Machine.model_validate(doc["machine"])
    return {(f.code, f.gpu_index): f.severity.value for f in check_machine(machine)}


def test_healthy_h200_passes_every_check():
    found = findings_of(base_doc("h200-1gpu"))
    assert set(found.values()) == {"PASS"}
    assert {code for code, _ in found} >= {
        "pcie", "clocks", "power", "thermal", "ecc", "remapped-rows", "memory", "torch"}


def test_two_gpu_box_real_finding_one_historic_uncorrectable_ecc_error():
    # Recorded as found: nvidia-smi -q on that host shows GPU 0 with one aggregate
    # uncorrectable SRAM SEC-DED error (L2) and no volatile ones; everything else passes.
    found = findings_of(base_doc("h200-2gpu"))
    problems = {k: v for k, v in found.items() if v != "PASS"}
    assert problems == {("ecc.uncorrectable-history", 0): "WARN"}
    assert ("ecc", 1) in found
    for gpu in (0, 1):
        assert found[("nvlink", gpu)] == found[("fabric", gpu)] == "PASS"


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_committed_fault_copy_is_current(fault):
    assert fault_path(fault).read_text() == render(planted(fault)), (
        "regenerate with: python -m tests.faults")


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_planted_fault_is_found_and_nothing_else_changes(fault):
    doc = json.loads(fault_path(fault).read_text())
    base = findings_of(base_doc(fault.base))
    found = findings_of(doc)
    got = {code: sev for (code, _), sev in found.items() if code in fault.expect}
    assert got == fault.expect
    # Apart from the expected problems (and the PASS they replace), nothing moved.
    def problems(findings: dict) -> set:
        return {code for (code, _), sev in findings.items() if sev != "PASS"}

    assert problems(found) - problems(base) - set(fault.expect) == set()
    lost = {k for k, v in base.items() if v == "PASS"} - set(found)
    assert all(code.split(".")[0] in {e.split(".")[0] for e in fault.expect} | {"spec"}
               for code, _ in lost), lost


def test_read_snapshot_reads_a_fault_copy(tmp_path):
    fault = next(f for f in FAULTS if f.name == "ecc-uncorrectable")
    machine = read_snapshot(fault_path(fault))
    (finding,) = [f for f in check_machine(machine) if f.code == "ecc.uncorrectable-volatile"]
    assert finding.severity is Severity.FAIL
    assert finding.gpu_index == 0
    assert finding.evidence["volatile_uncorrected"] == 2
    assert finding.advice


def test_pcie_gen_drop_is_only_info_while_idle_but_warns_under_load():
    idle = next(f for f in FAULTS if f.name == "pcie-gen-below-max-idle")
    busy = next(f for f in FAULTS if f.name == "pcie-gen-below-max-busy")
    assert findings_of(planted(idle))[("pcie.gen-below-max-idle", 0)] == "INFO"
    assert findings_of(planted(busy))[("pcie.gen-below-max", 0)] == "WARN"


def test_no_gpu_machine_is_info_not_failure():
    doc = base_doc("h200-1gpu")
    doc["machine"]["gpus"] = []
    doc["machine"]["nvml_error"] = "NVML could not start: NVML Shared Library Not Found"
    found = check_machine(Machine.model_validate(doc["machine"]))
    assert [(f.code, f.severity) for f in found] == [("gpu.none", Severity.INFO)]
    assert "Shared Library Not Found" in found[0].message
