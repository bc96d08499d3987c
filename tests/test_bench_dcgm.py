"""DCGM diagnostics (`dcgmi diag`) as a reference: the JSON reader on real outputs
(tests/fixtures/dcgm/README.md says where each comes from), the number regexes on real lines,
and run_native against a stand-in dcgmi."""

from __future__ import annotations

import json
import stat
import sys
import time

import pytest

from gpuaudit.bench import dcgm, runner
from gpuaudit.bench.context import BenchContext, Profile
from gpuaudit.bench.dcgm import extract_figures, figures_of, parse_dcgmi_diag_json
from gpuaudit.bench.suites import SUITES
from gpuaudit.model import Machine, Severity

from .conftest import FIXTURES, fixture_machine

DCGM = FIXTURES / "dcgm"
VC_R2 = DCGM / "virtualclient_dcgm3_r2_1gpu.json"
VC_R3 = DCGM / "virtualclient_dcgm3_r3_1gpu.json"
NV_4GPU = DCGM / "nvidia_testdiagmanager_per_gpu_4gpu.json"
GB10 = DCGM / "dcgm4_gb10_r1.json"
ISSUE215 = DCGM / "dcgm4_issue215_diagnostic_fragment.txt"
GEN5_X16 = 32 * 128 / 130 * 16 / 8  # 63.015 GB/s per direction
ENGINE_DOWN = ("Error: unable to establish a connection to the specified host: localhost\n"
               "Error: Unable to connect to host engine. Host engine connection "
               "invalid/disconnected.\n")


def machine(name: str = "h200-2gpu") -> Machine:
    return fixture_machine(name)


def ctx_for(m: Machine, **kw) -> BenchContext:
    return BenchContext(machine=m, devices=(), **kw)


def issue215_document() -> str:
    """The fragment from NVIDIA/DCGM #215 inside the 4.x document shell."""
    body = ISSUE215.read_text().rstrip().rstrip(",")
    return ('{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [\n'
            + body + "\n]}]}}")


# ---- the JSON reader ----

def test_dcgm3_level2_one_gpu():
    diag = parse_dcgmi_diag_json(VC_R2.read_text())
    assert (diag.layout, diag.version, diag.runtime_error) == ("3.x", None, None)
    assert len(diag.tests) == 11
    assert [t.name for t in diag.tests][-2:] == ["PCIe", "GPU Memory"]
    deny = diag.test("Denylist")
    assert deny is not None and deny.category == "Deployment"
    (only,) = deny.results  # software checks carry no GPU
    assert (only.gpu_index, only.status) == (None, "Pass")
    pcie = diag.test("pcie")  # looked up by slug
    assert pcie is not None and pcie.category == "Integration" and pcie.result == "Pass"
    (r,) = pcie.results
    assert (r.gpu_index, r.entity, r.status) == (0, "gpu:0", "Pass")
    assert r.info[0].startswith("GPU 0 GPU 0 GPU to Host bandwidth:\t\t13.15 GB/s, ")


def test_dcgm3_level3_one_gpu_with_a_skipped_test_and_figures():
    diag = parse_dcgmi_diag_json(VC_R3.read_text())
    assert len(diag.tests) == 16
    assert {t.name: t.result for t in diag.tests if t.category != "Deployment"} == {
        "PCIe": "Pass", "GPU Memory": "Pass", "Diagnostic": "Pass", "EUD Test": "Skip",
        "Targeted Stress": "Pass", "Targeted Power": "Pass", "Memory Bandwidth": "Pass"}
    by = {(t.name, f.suffix): f for t in diag.tests for f in figures_of(t)}
    assert by[("Diagnostic", "gflops")].value == pytest.approx(11103.02 * 2**30 / 1e9)
    assert by[("Targeted Stress", "gflops")].value == 3184.0
    assert by[("Targeted Power", "avg_w")].value == 70.0
    assert {f.gpu_index for f in by.values()} == {0}


def test_nvidia_per_gpu_sample_with_failures_skips_and_shared_entries():
    diag = parse_dcgmi_diag_json(NV_4GPU.read_text())
    assert (diag.layout, diag.version, len(diag.tests)) == ("3.x", "1.7", 17)
    deny = diag.test("Denylist")
    assert deny is not None
    # one entry "gpu_ids": "0,1,2,3" → one result per GPU, the upper-case word normalised
    assert [(r.gpu_index, r.status, r.covers) for r in deny.results] == [
        (g, "Pass", (0, 1, 2, 3)) for g in range(4)]
    sm = diag.test("sm_stress")
    assert sm is not None and sm.category == "Stress" and sm.result == "Fail"
    assert [r.status for r in sm.results] == ["Fail", "Pass", "Fail", "Fail"]
    assert sm.results[0].warnings == ("Max stress level of 2128.7 did not exceed desired "
                                      "stress level of 3000.0 for GPU 0",)
    assert sm.results[0].error_ids == (50,)
    memory = diag.test("memory")
    assert memory is not None and memory.result == "Pass"  # Pass beats one Skip
    assert memory.results[0].status == "Skip"
    assert "ECC memory on GPU 0 is not currently active" in memory.results[0].warnings[0]
    assert diag.test("targeted_power").result == "Skip"


def test_dcgm4_level1_failure_with_summary_and_metadata():
    diag = parse_dcgmi_diag_json(GB10.read_text())
    assert (diag.layout, diag.version, diag.driver_version) == ("4.x", "4.2.3", "580.82.09")
    (sw,) = diag.tests
    assert (sw.name, sw.category, sw.result) == ("software", "Deployment", "Fail")
    (r,) = sw.results
    assert (r.gpu_index, r.entity, r.status, r.error_ids) == (0, "gpu:0", "Fail", (29,))
    assert "Persistence mode for GPU 0 is disabled" in r.warnings[0]
    assert sw.summary_info[0].startswith("Error getting the SRAM Threshold Count for GPU 0")


def test_dcgm4_fragment_from_issue_215():
    diag = parse_dcgmi_diag_json(issue215_document())
    (test,) = diag.tests
    assert test.name == "diagnostic" and test.result == "Pass"
    assert [(r.gpu_index, len(r.info)) for r in test.results] == [
        (0, 3), (1, 3), (2, 2), (3, 0), (4, 0), (5, 0), (6, 0), (7, 0)]
    figs = figures_of(test)  # the info the issue says went missing has no figure
    assert [(f.gpu_index, f.suffix) for f in figs] == [(0, "gflops"), (1, "gflops")]
    assert figs[0].value == pytest.approx(859.08 * 1.073741824)
    assert "2^30" in figs[0].notes[0]


def test_banner_and_unknown_keys_are_tolerated():
    text = ("Successfully ran diagnostic for group.\n" + json.dumps({
        "DCGM Diagnostic": {"future_key": 1, "test_categories": [{"category": "Deployment",
            "shiny": True, "tests": [{"name": "software", "extra": [1], "results": [
                {"entity_group": "GPU", "entity_id": 3, "status": "pass", "new": "x"}]}]}]},
        "something_new": {}}, indent=1))
    (t,) = parse_dcgmi_diag_json(text).tests
    assert (t.result, t.results[0].gpu_index, t.results[0].status) == ("Pass", 3, "Pass")


def test_iterations_read_the_last_run():
    one = json.loads(VC_R2.read_text())
    text = json.dumps({"iterations": [json.loads(GB10.read_text()), one],
                       "Overall Result": "Pass"})
    assert parse_dcgmi_diag_json(text).layout == "3.x"


def test_runtime_error_is_read():
    # the shape of dcgmi/Diag.cpp HelperDisplayFailureMessage in JSON mode
    text = json.dumps({"DCGM Diagnostic": {"version": "4.2.3",
                                           "runtime_error": "Error: something broke"}})
    diag = parse_dcgmi_diag_json(text)
    assert (diag.tests, diag.runtime_error, diag.version) == ((), "Error: something broke",
                                                              "4.2.3")


@pytest.mark.parametrize("text", [
    VC_R2.read_text()[:-40],  # cut short
    '{\n  "DCGM Diagnostic" : { "test_categories" : [ }\n}',
])
def test_malformed_json_is_one_line_value_error(text):
    with pytest.raises(ValueError, match="not valid JSON") as err:
        parse_dcgmi_diag_json(text)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("text", ["", ENGINE_DOWN, '{"nvbandwidth": {}}'])
def test_no_diagnostic_json_is_a_value_error(text):
    with pytest.raises(ValueError, match="no dcgmi diag JSON"):
        parse_dcgmi_diag_json(text)


# ---- the numbers in dcgmi's texts ----

@pytest.mark.parametrize(("line", "suffix", "value", "unit", "gpu", "target"), [
    # VirtualClient (≤ 3.x, doubled prefix)
    ("GPU 0 GPU 0 GPU to Host bandwidth:\t\t13.15 GB/s", "d2h", 13.15, "GB/s", 0, None),
    ("GPU 0 GPU 0 Host to GPU latency:\t\t2.370 us", "h2d_latency", 2.37, "us", 0, None),
    ("GPU 0 GPU 0 relative stress level\t3184", "gflops", 3184.0, "GFLOP/s", 0, None),
    ("GPU 0 GPU 0 power average:\t70 W", "avg_w", 70.0, "W", 0, None),
    # NVIDIA's per-GPU sample
    ("GPU 2 Host to GPU bandwidth:\t\t12.13 GB/s", "h2d", 12.13, "GB/s", 2, None),
    ("GPU 3 bidirectional bandwidth:\t22.41 GB/s", "bidir", 22.41, "GB/s", 3, None),
    ("GPU 1 relative stress level:\t577", "gflops", 577.0, "GFLOP/s", 1, None),
    ("Max stress level of 1096.5 did not exceed desired stress level of 3000.0 for GPU 2",
     "max_gflops", 1096.5, "GFLOP/s", 2, 3000.0),
    # NVIDIA/DCGM issue #215 (DCGM 3 output quoted there)
    ("GPU 0 GPU to Host bandwidth:\t\t24.02 GB/s", "d2h", 24.02, "GB/s", 0, None),
])
def test_figure_regexes_on_real_lines(line, suffix, value, unit, gpu, target):
    (f,) = extract_figures(line, gpu_index=7)
    assert (f.suffix, f.value, f.unit, f.gpu_index, f.target) == (suffix, value, unit, gpu,
                                                                   target)


@pytest.mark.parametrize(("line", "expected"), [
    # lines built from DCGM's format strings @72fa3fe (no capture of these is public)
    ("Host to GPU bandwidth:\t\t55.21 GB/s", [("h2d", 55.21, 5, None)]),  # 4.x: no prefix
    ("GPU 5 max power: 698.4 W average power usage: 652.0 W",
     [("max_w", 698.4, 5, None), ("avg_w", 652.0, 5, None)]),
    ("Max stress level of 31000.0 did not reach desired stress level of 37500.0 for GPU 4",
     [("max_gflops", 31000.0, 4, 37500.0)]),
    ("Max power of 510.0 did not reach desired power minimum target_power_min_ratio of 525.0 "
     "for GPU 3", [("max_w", 510.0, 3, 525.0)]),
    ("GPU 1 only achieved a memory bandwidth of 3110.00 GB/s, failing to meet 3333.00 GB/s "
     "for test 0", [("bandwidth", 3110.0, 1, 3333.0)]),
    # texts without a figure
    ("GPU 0 Allocated 15206918958 bytes (97.3%)", []),
    ("Running with precisions: FP64 1, FP32 1, FP16 1", []),
    ("GPU 0 temperature average:\t31 C", []),
])
def test_figure_regexes_on_dcgm_formats(line, expected):
    got = [(f.suffix, f.value, f.gpu_index, f.target) for f in extract_figures(line, 5)]
    assert got == expected


def test_comma_joined_info_gives_every_figure_once():
    pcie = parse_dcgmi_diag_json(VC_R2.read_text()).test("PCIe")
    assert {f.suffix: f.value for f in figures_of(pcie)} == {
        "d2h": 13.15, "h2d": 13.11, "bidir": 22.49,
        "d2h_latency": 2.287, "h2d_latency": 2.37, "bidir_latency": 4.532}


# ---- Measurements ----

def test_verdicts_and_figures_from_a_failing_run():
    diag = parse_dcgmi_diag_json(NV_4GPU.read_text())
    found = dcgm.to_measurements(ctx_for(machine()), diag, level=3, gpus=[0, 1])
    assert {m.gpu_index for m in found} <= {None, 0, 1}  # GPUs 2, 3 were not asked for
    sm = {m.gpu_index: m for m in found if m.name == "diag_sm_stress"}
    assert (sm[0].value, sm[0].unit, sm[0].verified) == (0.0, "pass", False)
    assert sm[0].notes == ("dcgmi: Max stress level of 2128.7 did not exceed desired stress "
                           "level of 3000.0 for GPU 0",)
    assert (sm[1].value, sm[1].verified) == (1.0, True)
    assert sm[0].params == {"tool": "dcgmi", "level": 3, "dcgm_version": "1.7",
                            "test": "sm_stress", "category": "Stress", "status": "Fail",
                            "entity": "gpu:0", "dcgm_error_ids": "50"}
    mem0 = next(m for m in found if m.name == "diag_memory" and m.gpu_index == 0)
    assert mem0.skipped and mem0.skipped_reason.startswith(
        "dcgmi skipped memory: ECC memory on GPU 0 is not currently active.")
    h2d = {m.gpu_index: m for m in found if m.name == "pcie_h2d"}
    assert (h2d[1].value, h2d[1].unit, h2d[1].params["test"]) == (12.13, "GB/s", "pcie")
    assert h2d[1].spec_value == pytest.approx(GEN5_X16)
    assert h2d[1].pct_of_spec == pytest.approx(100 * 12.13 / GEN5_X16, abs=0.01)
    stress = next(m for m in found if m.name == "sm_stress_max_gflops")
    assert (stress.gpu_index, stress.value, stress.params["dcgm_threshold"]) == (0, 2128.7,
                                                                                 3000.0)
    findings = runner.bench_findings(found)
    fails = [f for f in findings if f.severity is Severity.FAIL]
    assert [(f.code, f.gpu_index, f.evidence["test"]) for f in fails] == [
        ("dcgm.test-failed", 0, "diag_sm_stress")]
    # dcgmi's figures meet the box comparison like ours: GPU 0's PCIe latency (4.386 us
    # against 3.269 us on GPU 1) is a straggler; the 0/1 verdicts never are.
    warns = {(f.code, f.gpu_index, f.evidence["name"]) for f in findings if f not in fails}
    assert ("bench.straggler", 0, "pcie_d2h_latency") in warns
    assert not any(name.startswith("diag_") for _, _, name in warns)


def test_warn_and_unknown_statuses_do_not_pass():
    text = json.dumps({"DCGM GPU Diagnostic": {"test_categories": [{"category": "Stress",
        "tests": [{"name": "Targeted Power", "results": [
            {"gpu_ids": "0", "status": "Warn", "warnings": [{"warning": "clocks dropped"}]},
            {"gpu_ids": "1", "status": "Exploded"}]}]}]}})
    rows = dcgm.to_measurements(ctx_for(machine()), parse_dcgmi_diag_json(text), level=3)
    warn, odd = rows
    assert (warn.value, warn.verified) == (0.0, False)
    assert "dcgmi: clocks dropped" in warn.notes
    assert odd.skipped and "'Exploded'" in odd.skipped_reason


# ---- running dcgmi ----

def fake_dcgmi(tmp_path, body: str):
    """A stand-in dcgmi: a Python script."""
    script = tmp_path / "dcgmi"
    script.write_text(f"#!{sys.executable}\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def printing(tmp_path, fixture, exit_code: int = 0):
    """A fake that records its argv and environment, prints `fixture`, exits `exit_code`."""
    seen = tmp_path / "seen.json"
    body = ("import json, os, sys\n"
            f"json.dump({{'argv': sys.argv[1:], 'nvls': os.environ.get('NCCL_NVLS_ENABLE')}}, "
            f"open({str(seen)!r}, 'w'))\n"
            f"sys.stdout.write(open({str(fixture)!r}).read())\n"
            f"sys.exit({exit_code})\n")
    return fake_dcgmi(tmp_path, body), seen


def test_run_native_without_dcgmi(monkeypatch, tmp_path):
    monkeypatch.delenv(dcgm.ENV_VAR, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    (m,) = dcgm.run_native(ctx_for(machine()))
    assert (m.suite, m.name) == ("dcgm", "diag")
    assert m.skipped_reason == "dcgmi not found (install DCGM, or set GPUAUDIT_DCGMI)"


def test_run_native_passing_run(monkeypatch, tmp_path):
    script, seen = printing(tmp_path, VC_R2)
    monkeypatch.setenv(dcgm.ENV_VAR, str(script))
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    found = list(dcgm.run_native(ctx_for(machine("h200-1gpu"), profile=Profile.STANDARD)))
    called = json.loads(seen.read_text())
    assert called["argv"] == ["diag", "-r", "2", "-i", "0", "-j"]
    assert called["nvls"] == "0"  # the safe environment reached the tool
    rows = [m for m in found if m.unit == "pass"]
    assert len(rows) == 11 and all(m.verified is True and m.value == 1.0 for m in rows)
    pcie = next(m for m in rows if m.name == "diag_pcie")
    assert (pcie.gpu_index, pcie.params["level"], pcie.params["test"]) == (0, 2, "PCIe")
    d2h = next(m for m in found if m.name == "pcie_d2h")
    assert (d2h.value, d2h.gpu_index, d2h.suite) == (13.15, 0, "dcgm")
    assert runner.bench_findings(found) == []


def test_run_native_failing_run_is_a_fail_finding_through_the_runner(monkeypatch, tmp_path):
    script, seen = printing(tmp_path, NV_4GPU, exit_code=226)  # dcgmi's exit on a failure
    monkeypatch.setenv(dcgm.ENV_VAR, str(script))
    monkeypatch.delenv("GPUAUDIT_NVBANDWIDTH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvbandwidth
    monkeypatch.setattr(runner, "suite", lambda name: lambda ctx: iter(()))
    monkeypatch.setattr(runner, "select_devices", lambda machine, gpus: ())
    run = runner.run_bench(["transfer"], machine=machine(), with_native=True,
                           profile=Profile.FULL)
    assert json.loads(seen.read_text())["argv"] == ["diag", "-r", "3", "-i", "0,1", "-j"]
    suites = {m.suite for m in run.measurements}
    assert suites == {"transfer", "dcgm"}  # nvbandwidth's "not found" row, then DCGM's
    fails = [f for f in run.findings if f.severity is Severity.FAIL]
    assert [(f.gpu_index, f.code, f.evidence["test"]) for f in fails] == [
        (0, "dcgm.test-failed", "diag_sm_stress")]
    assert run.verdict is Severity.FAIL


def test_native_map_runs_dcgm_with_transfer():
    assert SUITES["transfer"].native == ("gpuaudit.bench.nvbandwidth", "gpuaudit.bench.dcgm")


def test_run_native_host_engine_down(monkeypatch, tmp_path):
    script = fake_dcgmi(tmp_path, f"import sys\nsys.stdout.write({ENGINE_DOWN!r})\n"
                                  "sys.exit(251)\n")
    monkeypatch.setenv(dcgm.ENV_VAR, str(script))
    (m,) = dcgm.run_native(ctx_for(machine()))
    assert m.skipped_reason.startswith(
        "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.")
    assert "nv-hostengine" in m.skipped_reason and "\n" not in m.skipped_reason


def test_run_native_runtime_error(monkeypatch, tmp_path):
    out = tmp_path / "out.json"
    out.write_text(json.dumps({"DCGM Diagnostic": {"version": "4.2.3",
                                                   "runtime_error": "Error: bad\nmore"}}))
    script, _ = printing(tmp_path, out, exit_code=1)
    monkeypatch.setenv(dcgm.ENV_VAR, str(script))
    (m,) = dcgm.run_native(ctx_for(machine()))
    assert m.skipped_reason == "dcgmi diag: Error: bad"


def test_run_native_reports_garbage(monkeypatch, tmp_path):
    script = fake_dcgmi(tmp_path, "import sys\nprint('oops', file=sys.stderr)\nsys.exit(3)\n")
    monkeypatch.setenv(dcgm.ENV_VAR, str(script))
    (m,) = dcgm.run_native(ctx_for(machine()))
    assert m.skipped_reason == "no dcgmi diag JSON in the output (exit 3: oops)"


@pytest.mark.parametrize("ignores_sigterm", [False, True])
def test_run_native_kills_a_hung_dcgmi(monkeypatch, tmp_path, ignores_sigterm):
    body = "import signal, time\n"
    if ignores_sigterm:
        body += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    script = fake_dcgmi(tmp_path, body + "time.sleep(60)\n")
    monkeypatch.setenv(dcgm.ENV_VAR, str(script))
    monkeypatch.setattr(dcgm, "LEVEL_TIMEOUT_S", {1: 0.5, 2: 0.5, 3: 0.5})
    monkeypatch.setattr(dcgm, "TERM_GRACE_S", 0.5)
    start = time.monotonic()
    (m,) = dcgm.run_native(ctx_for(machine(), timeout_s=0.5))
    assert time.monotonic() - start < 10
    assert m.skipped_reason == "dcgmi diag -r 1 timed out after 0.5 s (stopped)"


def test_run_native_with_no_gpu(monkeypatch, tmp_path):
    script, seen = printing(tmp_path, VC_R2)
    monkeypatch.setenv(dcgm.ENV_VAR, str(script))
    bare = machine().model_copy(update={"gpus": ()})
    (m,) = dcgm.run_native(ctx_for(bare))
    assert m.skipped_reason == "no NVIDIA GPU to diagnose" and not seen.exists()
