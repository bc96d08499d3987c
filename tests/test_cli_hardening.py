"""The command line under bad usage, as a user meets it: one line and exit 2 for usage errors
and refused values (no boxed five-line typer error), unwritable output in one line, output
paths checked before the work, conflicting options refused, help that fits and keeps its
defaults."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from datetime import datetime, timedelta
from typing import ClassVar

import pytest
from typer.testing import CliRunner

from gpuaudit.cli.app import app
from tests.conftest import SRC, cli_env, src_pythonpath
from tests.support.cli import FIX, assert_one_line_error, gpuaudit

TRACE = FIX / "telemetry" / "h200-2gpu-xid-lost.json"
COMMANDS = [(), ("inspect",), ("run",), ("bench",), ("runs",), ("show",), ("schema",),
            ("monitor",), ("monitor", "history"), ("cost",), ("cost", "job"), ("cost", "tco"),
            ("cost", "work"), ("cost", "idle"), ("catalog",), ("catalog", "list"),
            ("catalog", "show"), ("catalog", "validate"), ("catalog", "import"),
            ("recommend",), ("recommend", "train"), ("recommend", "finetune"),
            ("recommend", "serve"), ("doctor",), ("tune",), ("report",), ("compare",),
            ("serve",), ("fleet",), ("fleet", "run"), ("fleet", "report"), ("predict",)]


@pytest.mark.parametrize("args", [
    ("runs", "--no-such-option"),
    ("no-such-command",),
    ("runs", "--limit"),
    ("runs", "--limit", "x"),
    ("bench", "--profile", "forever"),
    ("cost", "tco"),  # a required option missing
])
def test_usage_errors_are_one_line_and_exit_2(args):
    proc = gpuaudit(*args)
    assert_one_line_error(proc)
    assert "╭" not in proc.stderr and "Usage:" not in proc.stderr


@pytest.mark.parametrize(("args", "needle"), [
    (("runs", "--limit", "99999999999999999999999"), "--limit"),
    (("cost", "tco", "--capex", "1", "--power-w", "1", "--rate-pct", "1e308"), "--rate-pct"),
    (("catalog", "validate", "--stale-days", "1e20"), "--stale-days"),
    (("recommend", "train", "--params", "7B", "--tokens", "1T", "--layers", "0"), "--layers"),
    (("recommend", "train", "--params", "7B", "--tokens", "1T", "--hidden", "-8"), "--hidden"),
    (("recommend", "train", "--params", "7B", "--tokens", "1T", "--deadline", "36"), "unit"),
    (("bench", "collectives", "--sizes", "1M:99999999G"), "at most 1 TiB"),
    (("catalog", "list", "--max-price", "inf"), "--max-price"),
    (("catalog", "list", "--max-price", "nan"), "--max-price"),
    (("cost", "job", "--price", "inf", "--gpu-hours", "1"), "--price"),
    (("cost", "job", "--price", "3", "--gpu-hours", "1", "--currency", "UDS"), "ISO 4217"),
    (("catalog", "list", "--gpu", "h200"), "did you mean h200-sxm"),
    (("catalog", "list", "--provider", "amazon"), "known: "),
    (("cost", "tco", "--capex", "1", "--gpu-model", "h200"), "h200-sxm"),
    (("monitor", "--once", "--count", "3"), "not both"),
    (("monitor", "--rules", str(FIX / "none.yml"), "--no-rules"), "not both"),
    (("monitor", "--speed", "2"), "--speed goes with --replay"),
    (("monitor", "--replay", str(TRACE), "--gpus", "5"), "has no GPU 5 (it has GPUs 0-1)"),
    (("monitor", "--replay", str(TRACE), "--gpus", "0,0"), "twice"),
    (("monitor", "--interval", "0s"), "--interval"),
    (("monitor", "history", "--since", "yesterday"), "--since"),
])
def test_refused_values_name_the_option(args, needle):
    assert_one_line_error(gpuaudit(*args), needle)


def test_a_catalog_with_no_usable_row_says_why(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("provider,instance_type,gpu_model,gpu_count,currency,"
                   "on_demand_price_per_hour,source,price_date\n"
                   "x,a,h100-sxm,0,USD,2,test,2026-01-01\n"
                   "x,b,h100-sxm,1,USD,abc,test,2026-01-01\n")
    proc = gpuaudit("recommend", "train", "--params", "1B", "--tokens", "1B", "--catalog",
                    str(bad))
    assert_one_line_error(proc, "no usable offer", "bad.csv:2", "1 more")
    assert_one_line_error(gpuaudit("catalog", "list", "--catalog", str(bad)),
                          "no usable offer")


def test_a_duplicated_catalog_column_is_refused(tmp_path):
    dup = tmp_path / "dup.csv"
    dup.write_text("provider,instance_type,gpu_model,gpu_count,currency,"
                   "on_demand_price_per_hour,on_demand_price_per_hour,source,price_date\n"
                   "x,a,h100-sxm,1,USD,2,9,test,2026-01-01\n")
    assert_one_line_error(gpuaudit("catalog", "list", "--catalog", str(dup)),
                          "on_demand_price_per_hour given twice")


def test_binary_files_are_one_line(tmp_path):
    blob = tmp_path / "blob.bin"
    blob.write_bytes(bytes(range(256)) * 8)
    assert_one_line_error(gpuaudit("monitor", "--replay", str(blob)), "binary")
    assert_one_line_error(gpuaudit("inspect", "--from", str(blob)), "binary", "blob.bin")
    assert_one_line_error(gpuaudit("monitor", "--replay", str(TRACE), "--rules", str(blob)),
                          "binary")
    assert_one_line_error(gpuaudit("catalog", "validate", str(blob)), "binary", "blob.bin")
    deep = tmp_path / "deep.yml"
    deep.write_text("groups:\n- name: g\n  rules:\n  - alert: A\n    expr: "
                    + "(" * 5000 + "1" + ")" * 5000 + "\n")
    assert_one_line_error(gpuaudit("monitor", "--replay", str(TRACE), "--rules", str(deep)),
                          "nested too deeply")


def test_record_to_a_missing_directory_fails_before_sampling(tmp_path):
    proc = gpuaudit("monitor", "--replay", str(TRACE), "--no-export", "--no-history",
                    "--speed", "0.001", "--record", str(tmp_path / "no" / "rec.json"))
    assert_one_line_error(proc, "--record", "does not exist")
    assert "samples" not in proc.stdout + proc.stderr  # refused before the first tick
    assert_one_line_error(gpuaudit("monitor", "--replay", str(TRACE), "--idle-log",
                                   str(tmp_path)), "--idle-log", "directory")


def test_a_recording_is_written_and_replays(tmp_path):
    rec = tmp_path / "rec.json"
    proc = gpuaudit("monitor", "--replay", str(TRACE), "--no-export", "--no-history",
                    "--count", "3", "--record", str(rec))
    assert proc.returncode == 0, proc.stderr
    assert "recorded 3 samples" in proc.stdout + proc.stderr
    again = gpuaudit("monitor", "--replay", str(rec), "--no-export", "--no-history", "--json")
    assert len(again.stdout.splitlines()) == 3


def test_unwritable_stdout_is_one_line_and_exit_1():
    for args in (("catalog", "list"), ("catalog", "list", "--json"), ("schema",)):
        with open("/dev/full", "w") as full:
            proc = subprocess.run([sys.executable, "-m", "gpuaudit", *args], stdout=full,
                                  stderr=subprocess.PIPE, text=True, timeout=120,
                                  env={"PYTHONPATH": src_pythonpath(), "PATH": "/usr/bin"})
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1, proc.stderr
        assert lines == ["gpuaudit: error: cannot write the output: No space left on device"]


def test_a_reader_that_goes_away_ends_quietly():
    proc = subprocess.run(f"{sys.executable} -m gpuaudit schema | head -c 10", shell=True,
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": src_pythonpath(), "PATH": "/usr/bin:/bin"})
    assert proc.stdout == '{\n  "$defs'[:10]
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a) or "gpuaudit")
def test_help_is_plain_and_keeps_defaults(args):
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "80"},
                                terminal_width=80)
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.startswith("Usage:")
    assert "╭" not in text and "<" not in text  # no boxes, no '<bool>', '<str>' or '<file>'
    assert all(len(line) <= 80 for line in text.splitlines()), text
    if "--db" in text:  # not eaten as rich markup
        assert "[default: a SQLite file in the user data directory]" in " ".join(text.split())
    if "DURATION" in text or "COUNT" in text or "AMOUNT" in text:
        assert "gpuaudit help input" in " ".join(text.split())


def test_conflicting_idle_options_and_replay_options_before_work(tmp_path):
    assert_one_line_error(gpuaudit("monitor", "--replay", str(TRACE), "--enable-actions"),
                          "--enable-actions goes with --idle-action")
    assert_one_line_error(gpuaudit("cost", "job", "--instance", "a/b", "--price", "1",
                                   "--gpu-hours", "1"), "not both")


def test_replay_pauses_are_capped_and_logged(caplog):
    from gpuaudit.hw.telemetry_trace import TraceReplay
    from gpuaudit.telemetry.monitor import MAX_REPLAY_PAUSE_S, replay_times

    trace = json.loads(TRACE.read_text())
    second = datetime.fromisoformat(trace["frames"][1]["time"])
    trace["frames"] = trace["frames"][:2]  # the first ten years before the second
    trace["frames"][0]["time"] = (second - timedelta(days=3650)).isoformat()

    class Stop(threading.Event):
        waits: ClassVar[list[float]] = []

        def wait(self, timeout=None):
            self.waits.append(timeout)
            return False

    stop = Stop()
    with caplog.at_level("WARNING", logger="gpuaudit.monitor"):
        times = list(replay_times(TraceReplay(trace), stop, speed=1.0))
    assert len(times) == 2 and stop.waits == [MAX_REPLAY_PAUSE_S]
    assert any("waiting 60 s instead" in r.getMessage() for r in caplog.records)


def test_runs_shows_partial_and_run_prints_findings_once(tmp_path):
    from gpuaudit.bench.stats import measure
    from gpuaudit.model import RunStatus
    from gpuaudit.model.schema import load_run
    from gpuaudit.store import Store

    run = load_run((FIX / "faults" / "ecc-uncorrectable.json").read_text(), origin="fixture")
    figure = measure("matmul", "fp32", "TFLOP/s", [1.0] * 5, warmup=0)
    run = run.model_copy(update={"status": RunStatus.PARTIAL, "kind": "run",
                                 "measurements": (figure,)})
    db = f"sqlite:///{tmp_path / 'r.db'}"
    with Store(db) as store:
        run_id = store.save(run)
    listing = gpuaudit("runs", "--db", db, env={"COLUMNS": "200"})
    assert "(partial)" in listing.stdout and "RunStatus" not in listing.stdout
    shown = gpuaudit("show", run_id, "--db", db, env={"COLUMNS": "200"})
    codes = re.findall(r"ecc\.uncorrectable-volatile", shown.stdout)
    assert len(codes) == 1, shown.stdout
    assert shown.stdout.count("verdict: FAIL") == 1


def test_children_get_src_first_and_keep_the_pythonpath_there_was(monkeypatch, tmp_path):
    # On the GPU machine the runner's PYTHONPATH holds the carried wheels (/tmp/site): a child
    # started with src alone could not import them.
    site = tmp_path / "site"
    site.mkdir()
    (site / "carried_wheel.py").write_text("WHERE = 'site'\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    assert src_pythonpath() == os.pathsep.join((str(SRC), str(site)))
    env = cli_env(COLUMNS="99")
    assert env["PYTHONPATH"] == src_pythonpath() and env["COLUMNS"] == "99"
    done = subprocess.run([sys.executable, "-c", "import carried_wheel, gpuaudit; "
                           "print(carried_wheel.WHERE, gpuaudit.__file__)"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    where, path = done.stdout.split()
    assert where == "site" and path.startswith(str(SRC))
    monkeypatch.delenv("PYTHONPATH")
    assert cli_env()["PYTHONPATH"] == str(SRC)
