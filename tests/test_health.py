"""Health findings on real H200 snapshots, and on copies with one fault planted each."""

from __future__ import annotations

import json
import math

import pytest

from gpuaudit.errors import BadInputError
from gpuaudit.inspect import check_machine, read_snapshot
from gpuaudit.model import Gpu, Machine, Severity
from gpuaudit.specs import lookup

from .faults import FAULTS, base_doc, fault_path, planted, render

Found = dict[tuple[str, int | None], str]


def findings_of(doc: dict, expect_gpus: int | None = None) -> Found:
    machine = Machine.model_validate(doc["machine"])
    found: Found = {}
    for f in check_machine(machine, expect_gpus=expect_gpus):
        assert (f.code, f.gpu_index) not in found, f"two findings {f.code} on GPU {f.gpu_index}"
        found[f.code, f.gpu_index] = f.severity.value
    return found


def on_gpu(found: Found, gpu: int) -> Found:
    return {k: v for k, v in found.items() if k[1] == gpu}


def test_healthy_h200_passes_every_check_and_notes_its_nvlink_is_unused():
    found = findings_of(base_doc("h200-1gpu"))
    assert {k: v for k, v in found.items() if v != "PASS"} == {
        ("nvlink.unused-single-gpu", 0): "INFO"}  # NVML: "Not Supported" in that one-GPU VM
    assert {code for code, _ in found} >= {
        "memory-size", "pcie", "clocks", "clocks-max", "power", "thermal", "ecc",
        "remapped-rows", "memory", "xid", "torch"}


def test_two_gpu_box_real_finding_historic_uncorrectable_ecc_errors_on_gpu_1():
    # Recorded as found (2026-11-30 20:34): nvidia-smi -q on that host shows GPU 1 with two
    # aggregate DRAM uncorrectable errors, no volatile ones, and one row remapped for them
    # (none pending, no remap failure); GPU 0 has none. Everything else passes.
    found = findings_of(base_doc("h200-2gpu"))
    problems = {k: v for k, v in found.items() if v != "PASS"}
    assert problems == {("ecc.uncorrectable-history", 1): "WARN"}
    assert found[("ecc", 0)] == "PASS"
    assert found[("remapped-rows", 1)] == "PASS"  # the remap worked: a spare row took over
    for gpu in (0, 1):
        assert found[("nvlink", gpu)] == found[("fabric", gpu)] == "PASS"
        # Read on this recording, "not recorded" on the one before it.
        assert found[("inforom", gpu)] == found[("recovery", gpu)] == "PASS"


def test_every_datasheet_figure_is_checked_with_its_spec_and_source():
    machine = Machine.model_validate(base_doc("h200-2gpu")["machine"])
    spec = lookup(nvml_name="NVIDIA H200")
    by_code = {f.code: f for f in check_machine(machine) if f.gpu_index == 0}
    for code, fld in (("memory-size", "memory_gb"), ("pcie", "pcie_generation"),
                      ("power", "tdp_w"), ("clocks-max", "max_sm_clock_mhz"),
                      ("nvlink", "nvlink_links")):
        ev = by_code[code].evidence
        assert ev[f"spec_{fld}"] == spec.figure(fld), code
        assert ev["spec_source"] == spec.source_of(fld).title and ev["spec_url"], code


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_committed_fault_copy_is_current(fault):
    assert fault_path(fault).read_text() == render(planted(fault)), (
        "regenerate with: python -m tests.faults")


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_planted_fault_is_found_on_its_gpu_and_nothing_else_changes(fault):
    doc = json.loads(fault_path(fault).read_text())
    base = findings_of(base_doc(fault.base), fault.expect_gpus)
    found = findings_of(doc, fault.expect_gpus)
    got = {code: sev for (code, gpu), sev in found.items()
           if code in fault.expect and gpu in (fault.gpu, None)}
    assert got == fault.expect
    # The control: the real snapshot passes this check, and the fault takes the PASS away.
    if fault.control is not None:
        assert base[(fault.control, fault.gpu)] == "PASS"
        assert found.get((fault.control, fault.gpu)) != "PASS"
    # Apart from the expected problems (and the PASS they replace), nothing moved.
    def problems(findings: Found) -> set:
        return {code for (code, _), sev in findings.items() if sev != "PASS"}

    assert problems(found) - problems(base) - set(fault.expect) == set()
    prefixes = {e.split(".")[0] for e in fault.expect} | fault.replaces | {"spec"}
    lost = {code for (code, _), v in base.items() if v == "PASS"} - {c for c, _ in found}
    assert all(code.split(".")[0] in prefixes for code in lost), lost
    # A fault on one GPU leaves the other GPU judged exactly as before.
    if fault.gpu is not None and fault.base == "h200-2gpu":
        other = 1 - fault.gpu
        assert on_gpu(found, other) == on_gpu(base, other)


def test_a_lost_gpu_fails_on_that_gpu_with_its_xid_not_as_an_unknown_model():
    doc = planted(next(f for f in FAULTS if f.name == "gpu-lost"))
    run_findings = check_machine(Machine.model_validate(doc["machine"]))
    gpu0 = [f for f in run_findings if f.gpu_index == 0]
    assert [(f.code, f.severity) for f in gpu0] == [("gpu.lost", Severity.FAIL)]
    assert "GPU is lost" in gpu0[0].message and "XID 79" in gpu0[0].message
    assert gpu0[0].evidence["xids_on_unknown_bus"].startswith("XID 79×1 (GPU has fallen off")
    codes = {f.code for f in run_findings}
    assert not codes & {"spec.unknown-model", "box.mixed-models", "xid.critical"}
    # GPU 1 is still judged in full, its real historic ECC warning included.
    base = check_machine(Machine.model_validate(base_doc("h200-2gpu")["machine"]))
    gpu1 = {(f.code, f.severity) for f in run_findings if f.gpu_index == 1}
    assert gpu1 == {(f.code, f.severity) for f in base if f.gpu_index == 1}
    assert {"memory-size", "nvlink"} <= {code for code, _ in gpu1}
    assert ("ecc.uncorrectable-history", Severity.WARN) in gpu1


def test_a_lost_gpu_makes_the_run_fail(tmp_path):
    from typer.testing import CliRunner

    from gpuaudit.cli.app import app

    fault = next(f for f in FAULTS if f.name == "gpu-lost")
    result = CliRunner().invoke(app, ["inspect", "--from", str(fault_path(fault))])
    assert result.exit_code == 1, result.output
    assert "gpu.lost" in result.output


def test_xids_are_counted_per_gpu_by_bus_id():
    doc = base_doc("h200-2gpu")
    bus1 = "0000:00:07"
    assert Machine.model_validate(doc["machine"]).gpus[1].pci_bus_id == bus1 + ".0"
    doc["machine"]["xid_counts_by_bus"] = {"0000:00:06": {"13": 3}, bus1: {"79": 1, "13": 1}}
    doc["machine"]["xid_counts"] = {"13": 4, "79": 1}
    findings = {(f.code, f.gpu_index): f for f in
                check_machine(Machine.model_validate(doc["machine"]))}
    assert findings["xid.seen", 0].evidence["xid_events"] == 3
    assert findings["xid.critical", 1].evidence["xid_events"] == 2
    assert findings["xid.critical", 1].evidence["xids"] == (
        "XID 13×1, XID 79×1 (GPU has fallen off the bus)")
    assert not [k for k in findings if k[0].startswith("xid") and k[1] is None]


def test_gpu_count_control_and_missing_gpu_on_a_box_with_no_gpu_left():
    doc = base_doc("h200-2gpu")
    assert findings_of(doc, expect_gpus=2)[("gpu-count", None)] == "PASS"
    assert findings_of(doc, expect_gpus=1)[("gpu-count.extra", None)] == "WARN"
    doc["machine"]["gpus"] = []
    doc["machine"]["links"] = []
    found = findings_of(doc, expect_gpus=2)
    # The host checks stay: torch against the driver, and the CUDA environment (recorded empty).
    assert found == {("gpu.none", None): "INFO", ("gpu-count.missing", None): "FAIL",
                     ("torch", None): "PASS", ("env", None): "PASS"}


@pytest.mark.parametrize("name", ["reading-nan", "reading-negative", "reading-infinite",
                                  "reading-percent-over-100"])
def test_a_reading_that_is_not_a_number_is_named_and_never_passes(name):
    fault = next(f for f in FAULTS if f.name == name)
    machine = read_snapshot(fault_path(fault))  # the committed file reads back (NaN included)
    findings = check_machine(machine)
    (bad,) = [f for f in findings if f.code == "reading.untrusted"]
    assert bad.gpu_index == 0 and "=" in bad.evidence["readings"]
    for f in findings:
        for value in f.evidence.values():
            assert not (isinstance(value, float) and not math.isfinite(value)), f
            assert not (isinstance(value, int | float) and not isinstance(value, bool)
                        and value < 0), f


def test_a_damaged_xid_tally_is_named_and_its_counts_not_judged():
    doc = base_doc("h200-2gpu")
    doc["machine"]["xid_counts_by_bus"] = {"0000:00:06": {"79": -3}}
    doc["machine"]["xid_counts"] = {"79": -3}
    found = findings_of(doc)
    assert found[("reading.untrusted", None)] == "WARN"
    assert ("xid", 0) not in found and found[("xid", 1)] == "PASS"
    assert not [k for k in found if k[0].startswith("xid.")]


def test_nan_in_a_check_input_takes_away_its_pass():
    doc = base_doc("h200-2gpu")
    doc["machine"]["gpus"][0]["power"]["default_limit_w"] = float("nan")
    found = findings_of(doc)
    assert found[("reading.untrusted", 0)] == "WARN"
    assert found[("power", 0)] == "PASS"  # the datasheet still judges the enforced limit
    doc["machine"]["gpus"][0]["power"]["limit_w"] = float("inf")
    assert ("power", 0) not in findings_of(doc)


@pytest.mark.parametrize("where, value", [
    (("pcie", "gen_current"), "5"), (("pcie", "gen_current"), 5.0),
    (("ecc", "enabled"), 1), (("ecc", "enabled"), "yes"), (("power", "limit_w"), "700"),
    (("name",), 7), (("nvlinks",), "x")])
def test_a_snapshot_field_of_the_wrong_type_is_a_one_line_error(tmp_path, where, value):
    doc = base_doc("h200-2gpu")
    target = doc["machine"]["gpus"][0]
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInputError) as err:
        read_snapshot(path)
    message = str(err.value)
    assert "\n" not in message and ".".join(where) in message and repr(value) in message


def test_inspect_exits_2_on_a_snapshot_field_of_the_wrong_type(tmp_path):
    from tests.support.cli import assert_one_line_error, gpuaudit

    doc = base_doc("h200-2gpu")
    doc["machine"]["gpus"][1]["power"]["limit_w"] = "700 W"
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(doc))
    assert_one_line_error(gpuaudit("inspect", "--from", str(path)),
                          "machine.gpus.1.power.limit_w", "'700 W'")


def test_a_gpu_that_answers_nothing_is_recognised_from_old_snapshots():
    from gpuaudit.inspect.health.readings import answered_nothing

    assert answered_nothing(Gpu(index=0, name="unknown", error="GPU is lost"))
    assert answered_nothing(Gpu(index=0, name="unknown"))
    assert not answered_nothing(Gpu(index=0, name="NVIDIA H200"))


def test_pcie_gen_drop_is_only_info_while_idle_but_warns_under_load():
    idle = next(f for f in FAULTS if f.name == "pcie-gen-below-max-idle")
    busy = next(f for f in FAULTS if f.name == "pcie-gen-below-max-busy")
    assert findings_of(planted(idle))[("pcie.gen-below-max-idle", 0)] == "INFO"
    assert findings_of(planted(busy))[("pcie.gen-below-max", 0)] == "WARN"


def test_clocks_below_max_under_a_power_cap_are_explained_not_held():
    doc = base_doc("h200-2gpu")
    g = doc["machine"]["gpus"][0]
    g["utilization_gpu_pct"] = 100
    g["clocks"].update(sm_mhz=1200, event_reasons=["sw_power_cap"], event_reasons_mask=4)
    found = findings_of(doc)
    assert found[("clocks", 0)] == "PASS" and ("clocks.held-below-max", 0) not in found


def test_the_held_clocks_finding_gives_the_reset_commands():
    fault = next(f for f in FAULTS if f.name == "clocks-held-below-max")
    machine = Machine.model_validate(planted(fault)["machine"])
    (held,) = [f for f in check_machine(machine) if f.code == "clocks.held-below-max"]
    assert "nvidia-smi -rgc" in held.advice and "nvidia-smi -rac" in held.advice


def test_persistence_off_says_what_it_costs():
    fault = next(f for f in FAULTS if f.name == "persistence-off")
    machine = Machine.model_validate(planted(fault)["machine"])
    (info,) = [f for f in check_machine(machine) if f.code == "mode.persistence-off"]
    assert "first CUDA call" in info.message and "nvidia-persistenced" in info.advice


def test_read_snapshot_reads_a_fault_copy():
    fault = next(f for f in FAULTS if f.name == "ecc-uncorrectable")
    machine = read_snapshot(fault_path(fault))
    (finding,) = [f for f in check_machine(machine) if f.code == "ecc.uncorrectable-volatile"]
    assert finding.severity is Severity.FAIL
    assert finding.gpu_index == fault.gpu
    assert finding.evidence["volatile_uncorrected"] == 2
    assert finding.advice


def test_no_gpu_machine_is_info_not_failure():
    doc = base_doc("h200-1gpu")
    doc["machine"]["gpus"] = []
    doc["machine"]["nvml_error"] = "NVML could not start: NVML Shared Library Not Found"
    found = check_machine(Machine.model_validate(doc["machine"]))
    assert [(f.code, f.severity) for f in found if f.code != "torch"] == [
        ("gpu.none", Severity.INFO)]
    assert "Shared Library Not Found" in found[0].message
