"""Every node judged on what the fleet expects: GPU count, model, driver, CUDA, NVML
answering; from the fleet's majority or an --expect file. On the real H200 recordings, with
the faults planted in copies of them."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuaudit.cli.app import app
from gpuaudit.errors import BadInputError
from gpuaudit.fleet.expect import (
    Expectation,
    NodeFacts,
    facts_of,
    judge,
    load_expectation,
    majority,
)
from gpuaudit.fleet.records import FleetCheck
from gpuaudit.model import Machine
from tests.faults import base_doc
from tests.support.cli import error_line


def _machine(**changes) -> Machine:
    doc = copy.deepcopy(base_doc("h200-2gpu"))
    doc["machine"].update(changes)
    return Machine.model_validate(doc["machine"])


def _node(name: str, **changes) -> NodeFacts:
    return facts_of(name, _machine(**changes))


def test_the_recording_is_what_an_h200_fleet_expects():
    facts = _node("a")
    assert (facts.gpu_count, facts.gpu_model, facts.nvml_error) == (2, "NVIDIA H200", None)
    assert facts.driver_version and facts.cuda_version


def test_the_majority_names_the_odd_nodes_and_only_them():
    healthy = [_node(f"n{i}") for i in range(5)]
    one_gpu = _machine()
    one_gpu = one_gpu.model_copy(update={"gpus": one_gpu.gpus[:1]})
    odd = [facts_of("short", one_gpu), _node("old-driver", driver_version="570.86.15"),
           _node("no-nvml", gpus=[], nvml_error="NVML Shared Library Not Found")]
    fleet = healthy + odd
    expected, notes = majority(fleet)
    assert notes == []
    assert (expected.gpu_count, expected.gpu_model, expected.nvml) == (2, "NVIDIA H200", True)
    assert expected.driver_version == healthy[0].driver_version
    judged = {n.name: judge(n, expected) for n in fleet}
    assert {k for k, v in judged.items() if v} == {"short", "old-driver", "no-nvml"}
    assert judged["short"] == ("1 GPU(s), the fleet expects 2 (the majority of 8 nodes)",)
    assert judged["old-driver"] == (f"driver 570.86.15, the fleet expects "
                                    f"{expected.driver_version} (the majority of 8 nodes)",)
    assert judged["no-nvml"] == ("NVML does not answer: NVML Shared Library Not Found",)


def test_a_tie_is_not_judged_and_says_so():
    fleet = [_node("a"), _node("b"), _node("c", driver_version="570.86.15"),
             _node("d", driver_version="570.86.15")]
    expected, notes = majority(fleet)
    assert expected.driver_version is None and expected.gpu_count == 2
    assert len(notes) == 1 and notes[0].startswith("driver version not judged: no value on "
                                                   "more than half of the 4 nodes")
    assert all(judge(n, expected) == () for n in fleet)


def test_a_fleet_without_gpus_does_not_call_every_node_bad():
    fleet = [_node(f"cpu{i}", gpus=[], nvml_error="NVML Shared Library Not Found")
             for i in range(3)]
    expected, _ = majority(fleet)
    assert expected.nvml is False and all(judge(n, expected) == () for n in fleet)


def test_an_expect_file_with_patterns(tmp_path: Path):
    path = tmp_path / "expect.yaml"
    path.write_text("gpu_count: 2\ngpu_model: NVIDIA H200*\ndriver_version: '580.*'\n"
                    "cuda_version: '13.0'\n")
    expected = load_expectation(path)
    assert expected.source == f"--expect {path}" and expected.nvml
    assert judge(_node("a", driver_version="580.95.05"), expected) == ()
    assert judge(_node("b", driver_version="570.86.15", cuda_driver_version="12.8"), expected) == (
        f"driver 570.86.15, the fleet expects 580.* (--expect {path})",
        f"CUDA 12.8, the fleet expects 13.0 (--expect {path})")


@pytest.mark.parametrize(("text", "message"), [
    ("gpu_count: 8\ngpus: 8\n", "unknown key(s) gpus"),
    ("gpu_count: eight\n", "gpu_count: Input should be a valid integer"),
    ("- 8\n", "expected a mapping of gpu_count"),
    ("gpu_count: [8\n", "while parsing a flow sequence"),
])
def test_a_bad_expect_file_is_one_line(tmp_path: Path, text: str, message: str):
    path = tmp_path / "expect.yaml"
    path.write_text(text)
    with pytest.raises(BadInputError, match=re.escape(message)):
        load_expectation(path)
    with pytest.raises(BadInputError, match="no such file"):
        load_expectation(tmp_path / "missing.yaml")


def test_expectation_is_a_record():
    assert Expectation(source="x", gpu_count=8).model_dump()["gpu_count"] == 8


# -- fleet check: one node against the file, as a health check ------------------------------


def _snapshot(tmp_path: Path, **changes) -> Path:
    doc = copy.deepcopy(base_doc("h200-2gpu"))
    doc["machine"].update(changes)
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(doc))
    return path


def test_fleet_check_good_and_bad_nodes(tmp_path: Path):
    expect = tmp_path / "expect.yaml"
    expect.write_text("gpu_count: 2\ngpu_model: NVIDIA H200\n")
    good = CliRunner().invoke(app, ["fleet", "check", "--expect", str(expect), "--from",
                                    str(_snapshot(tmp_path)), "--node", "n1", "--json"])
    assert good.exit_code == 0, good.output
    checked = FleetCheck.model_validate_json(good.stdout)
    assert checked.node == "n1" and checked.reasons == () and not checked.bad
    expect.write_text("gpu_count: 8\n")
    bad = CliRunner().invoke(app, ["fleet", "check", "--expect", str(expect), "--from",
                                   str(_snapshot(tmp_path)), "--node", "n1"])
    assert bad.exit_code == 1
    assert f"n1: bad\n  2 GPU(s), the fleet expects 8 (--expect {expect})" in bad.stdout
    missing = CliRunner().invoke(app, ["fleet", "check", "--expect", str(tmp_path / "no.yaml"),
                                       "--from", str(_snapshot(tmp_path))])
    assert "--expect" in error_line(missing)


def test_fleet_check_names_a_node_whose_driver_cannot_be_reached(tmp_path: Path):
    expect = tmp_path / "expect.yaml"
    expect.write_text("gpu_count: 8\n")
    snap = _snapshot(tmp_path, gpus=[], nvml_error="NVML Shared Library Not Found")
    result = CliRunner().invoke(app, ["fleet", "check", "--expect", str(expect), "--from",
                                      str(snap), "--node", "n1", "--json"])
    assert result.exit_code == 1
    assert FleetCheck.model_validate_json(result.stdout).reasons == (
        "NVML does not answer: NVML Shared Library Not Found",)
