"""The command line as a user runs it: exit codes, JSON, one-line errors, the store."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from gpuaudit.model import json_schema
from tests.conftest import FedRun, cli_env
from tests.support.cli import FIX, ROOT, assert_one_line_error, gpuaudit, validate_run
from tests.support.faults import FAULTS, fault_path


@pytest.fixture
def db(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


def test_version_and_help_on_every_command():
    assert gpuaudit("--version").stdout.strip().startswith("gpuaudit 0.")
    for cmd in ("inspect", "run", "runs", "show", "schema"):
        proc = gpuaudit(cmd, "--help")
        assert proc.returncode == 0 and "Usage" in proc.stdout, cmd


def test_inspect_from_a_real_two_gpu_snapshot_exits_0_and_shows_the_machine():
    proc = gpuaudit("inspect", "--from", str(FIX / "h200-2gpu" / "inspect.json"))
    assert proc.returncode == 0, proc.stderr
    assert "NVIDIA H200" in proc.stdout
    assert "NV18" in proc.stdout  # the topology matrix
    assert "989.5" in proc.stdout  # the dense bf16 datasheet peak
    # The one real problem on that host: a historic uncorrectable ECC error (a WARN).
    assert "ecc.uncorrectable-history" in proc.stdout
    assert "verdict: WARN" in proc.stdout


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_inspect_from_fault_exit_code_and_json(fault):
    expect = ("--expect-gpus", str(fault.expect_gpus)) if fault.expect_gpus is not None else ()
    proc = gpuaudit("inspect", "--json", "--from", str(fault_path(fault)), *expect)
    doc = json.loads(proc.stdout)
    validate_run(doc)
    codes = {f["code"]: f["severity"] for f in doc["findings"]}
    for code, severity in fault.expect.items():
        assert codes[code] == severity
    assert proc.returncode == (1 if "FAIL" in fault.expect.values() else 0)


def test_json_output_round_trips_through_from(tmp_path):
    first = gpuaudit("inspect", "--json", "--from", str(FIX / "h200-1gpu" / "inspect.json"))
    saved = tmp_path / "snap.json"
    saved.write_text(first.stdout)
    second = gpuaudit("inspect", "--json", "--from", str(saved))
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert a["machine"] == b["machine"]
    assert a["findings"] == b["findings"]


def test_published_schema_is_current():
    published = json.loads((ROOT / "docs" / "schema" / "run.schema.json").read_text())
    assert published == json_schema(), "regenerate: gpuaudit schema > docs/schema/run.schema.json"


def test_live_inspect_without_gpu_states_it_and_exits_0():
    from tests.conftest import gpu_count

    if gpu_count():
        pytest.skip("this machine has a GPU")
    proc = gpuaudit("inspect")
    assert proc.returncode == 0, proc.stderr
    assert "No NVIDIA GPU" in proc.stdout
    assert "CPU" in proc.stdout and "memory" in proc.stdout


def test_bad_snapshots_get_one_line_and_exit_2(tmp_path):
    assert_one_line_error(gpuaudit("inspect", "--from", str(tmp_path / "missing.json")),
                          "missing.json")
    garbled = tmp_path / "garbled.json"
    garbled.write_text('{"schema_version": 1, "machine": ')
    assert_one_line_error(gpuaudit("inspect", "--from", str(garbled)), "not valid JSON")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    assert_one_line_error(gpuaudit("inspect", "--from", str(binary)))
    good = json.loads((FIX / "h200-1gpu" / "inspect.json").read_text())
    wrong = dict(good, machine=dict(good["machine"], gpus="many"))
    (tmp_path / "wrong.json").write_text(json.dumps(wrong))
    assert_one_line_error(gpuaudit("inspect", "--from", str(tmp_path / "wrong.json")),
                          "machine.gpus")
    newer = dict(good, schema_version=99)
    (tmp_path / "newer.json").write_text(json.dumps(newer))
    assert_one_line_error(gpuaudit("inspect", "--from", str(tmp_path / "newer.json")),
                          "schema_version 99")
    (tmp_path / "list.json").write_text("[1, 2]")
    assert_one_line_error(gpuaudit("inspect", "--from", str(tmp_path / "list.json")))
    no_machine = dict(good, machine=None)
    (tmp_path / "nomachine.json").write_text(json.dumps(no_machine))
    assert_one_line_error(gpuaudit("inspect", "--from", str(tmp_path / "nomachine.json")),
                          "no machine")


def test_bad_usage_exits_2():
    assert gpuaudit("inspect", "--no-such-flag").returncode == 2
    assert gpuaudit("no-such-command").returncode == 2


def test_bad_db_url_is_one_line_and_exit_2(tmp_path):
    snap = str(FIX / "h200-1gpu" / "inspect.json")
    proc = gpuaudit("inspect", "--from", snap, "--save", "--db", "notadialect://x")
    assert_one_line_error(proc)
    proc = gpuaudit("runs", "--db", "postgresql://u:secret@127.0.0.1:1/x")
    assert_one_line_error(proc)
    assert "secret" not in proc.stderr


def test_unwritable_data_directory_is_one_line_and_exit_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    env = {"GPUAUDIT_DB": "", "XDG_DATA_HOME": str(blocker)}
    # Refused before the work starts (--no-bench: it would only inspect, but it never does).
    assert_one_line_error(gpuaudit("run", "--no-bench", env=env), "data directory", str(blocker))
    # Reading the default store where nothing was ever saved is an empty list, creating nothing.
    proc = gpuaudit("runs", env=env)
    assert proc.returncode == 0 and "no runs stored yet" in proc.stdout, proc.stderr


def test_save_list_show_round_trip(db):
    snap = str(FIX / "faults" / "ecc-uncorrectable.json")
    saved = gpuaudit("inspect", "--from", snap, "--save", "--db", db)
    assert saved.returncode == 1  # the planted FAIL
    run_id = re.search(r"saved as run (\w+)", saved.stdout).group(1)
    listing = json.loads(gpuaudit("runs", "--json", "--db", db).stdout)
    assert [r["id"] for r in listing] == [run_id]
    assert listing[0]["verdict"] == "FAIL" and listing[0]["findings_fail"] == 1
    shown = gpuaudit("show", run_id[:6], "--json", "--db", db)
    assert shown.returncode == 1
    assert json.loads(shown.stdout)["id"] == run_id
    missing = gpuaudit("show", "ffffffff", "--db", db)
    assert_one_line_error(missing, "ffffffff")


def test_run_saves_and_prints_a_summary(db):
    proc = gpuaudit("run", "--db", db)
    assert proc.returncode in (0, 1), proc.stderr
    assert "saved as run" in proc.stdout
    listing = json.loads(gpuaudit("runs", "--json", "--db", db).stdout)
    assert len(listing) == 1 and listing[0]["kind"] == "run"


def test_run_json_is_a_valid_document_on_stdout(fed_run: FedRun):
    # the session's `run --json` (tests/conftest.py), also read by the feed verdict's test
    proc = fed_run.done
    doc = json.loads(proc.stdout)
    validate_run(doc)
    assert doc["kind"] == "run" and doc["machine"]["host"]["hostname"]
    assert "saved as run" in proc.stderr


# -- bench ----------------------------------------------------------------------------------


def test_bench_bad_input_is_one_line_and_exit_2():
    assert_one_line_error(gpuaudit("bench", "warp-drive"), "unknown suite warp-drive")
    assert_one_line_error(gpuaudit("bench", "matmul", "--gpus", "7"), "no GPU 7")
    assert_one_line_error(gpuaudit("bench", "matmul", "--gpus", "x"), "--gpus")
    assert_one_line_error(gpuaudit("bench", "collectives", "--sizes", "8G:1M"), "MIN is larger")
    assert_one_line_error(gpuaudit("bench", "collectives", "--sizes", "lots"), "--sizes")
    assert gpuaudit("bench", "--profile", "forever").returncode == 2


def test_bench_on_cpu_measures_what_it_can_and_saves_it(db):
    pytest.importorskip("torch")
    proc = gpuaudit("bench", "matmul", "memory", "--json", "--db", db)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    validate_run(doc)
    assert doc["kind"] == "bench" and doc["status"] == "complete"
    by = {(m["suite"], m["name"]): m for m in doc["measurements"]}
    assert by[("matmul", "fp32")]["value"] > 0 and by[("matmul", "fp32")]["verified"] is True
    assert by[("memory", "copy")]["unit"] == "GB/s"
    assert by[("matmul", "bf16")]["value"] is None and by[("matmul", "bf16")]["skipped_reason"]
    shown = gpuaudit("show", doc["id"], "--db", db)
    assert shown.returncode == 0 and "Benchmarks" in shown.stdout and "skipped" in shown.stdout


def test_ctrl_c_during_bench_saves_a_partial_run_and_exits_130(db, tmp_path):
    pytest.importorskip("torch")
    import signal
    import time

    import psutil

    # The tag tells this run's workers from those of other runs on the same machine.
    tag = f"ctrl-c-{os.getpid()}"
    env = cli_env(COLUMNS="160", GPUAUDIT_TEST_TAG=tag)

    def workers() -> list[psutil.Process]:
        found = []
        for p in psutil.process_iter(["cmdline"]):
            if "gpuaudit.bench.collectives_worker" in " ".join(p.info["cmdline"] or []):
                try:
                    if p.environ().get("GPUAUDIT_TEST_TAG") == tag:
                        found.append(p)
                except psutil.Error:
                    continue
        return found

    # Large gloo collectives keep the run busy for a while after matmul and memory are done.
    proc = subprocess.Popen([sys.executable, "-m", "gpuaudit", "bench", "matmul", "memory",
                             "collectives", "--sizes", "64M:1G", "--db", db],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    # Ctrl-C once the collectives are running (their workers have started): matmul and memory
    # are done by then, however loaded the machine.
    deadline = time.monotonic() + 180
    while not workers() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in out + err and "Traceback" not in err
    listing = json.loads(gpuaudit("runs", "--json", "--db", db).stdout)
    assert [r["status"] for r in listing] == ["partial"]
    stored = json.loads(gpuaudit("show", listing[0]["id"], "--json", "--db", db).stdout)
    assert {m["suite"] for m in stored["measurements"]} >= {"matmul", "memory"}
    # ...and the collective's worker processes went with it.
    time.sleep(1)
    assert workers() == []
