"""One grammar for every command: --json everywhere, a run id or a run's JSON file wherever a
run is taken, one name per concept (old names still parse, out of the help), help that never
cuts a summary or splits a word, and the rules of values shipped as `gpuaudit help input`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuaudit.cli.app import COMMANDS, app, load_command
from gpuaudit.cli.group import DEPRECATED_NAMES
from tests.conftest import cli_env
from tests.support import cli

ROOT = Path(__file__).parent.parent
FIX = ROOT / "tests" / "fixtures"


def gpuaudit(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """At 80 columns: the width the help is checked to fit."""
    return cli.gpuaudit(*args, timeout=timeout, columns=80)


def every_command() -> list[list[str]]:
    found: list[list[str]] = [[]]

    def walk(cmd, path):
        found.append(path)
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, [*path, name])

    for name in COMMANDS:
        walk(load_command(name), [name])
    return found


HELPS = {" ".join(p) or "gpuaudit": p for p in every_command()}


@pytest.mark.parametrize("path", list(HELPS.values()), ids=list(HELPS))
def test_help_keeps_every_word_whole(path):
    text = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"},
                              terminal_width=80).stdout
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80, text
    # a word broken at a hyphen or cut at the line's end leaves a letter and '-' (or a
    # bracket opened and not closed) at a line's end
    for line in lines:
        assert not re.search(r"[A-Za-z]-$", line.rstrip()), line
    assert "docs/input.md" not in text  # a pip install has no docs folder
    for name in DEPRECATED_NAMES:  # old names parse, but are not taught
        if name != "--profile" or path[:1] == ["doctor"]:
            assert not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), (name, path)


def test_the_root_help_lists_every_summary_whole():
    text = " ".join(CliRunner().invoke(app, ["--help"], env={"COLUMNS": "80"},
                                       terminal_width=80).stdout.split())
    for name, (_, _, summary, _) in COMMANDS.items():
        assert f"{name} {summary}" in text, name  # whole, not cut to '...'


def test_help_input_is_shipped_and_is_the_manual():
    packaged = (ROOT / "src" / "gpuaudit" / "data" / "input.md").read_text()
    assert packaged == (ROOT / "docs" / "input.md").read_text()
    shown = gpuaudit("help", "input")
    assert shown.returncode == 0 and "Durations (DURATION)" in shown.stdout
    doc = json.loads(gpuaudit("help", "input", "--json").stdout)
    assert doc["markdown"] == packaged
    assert gpuaudit("help", "cost", "job").stdout == gpuaudit("cost", "job", "--help").stdout
    bad = gpuaudit("help", "nonsense")
    assert bad.returncode == 2 and "no help topic or command 'nonsense'" in bad.stderr


def test_json_on_every_command():
    for path in every_command():
        command = load_command(path[0]) if path else None
        for word in path[1:]:
            command = command.commands[word]  # type: ignore[union-attr]
        if path and not getattr(command, "commands", None):
            opts = {o for p in command.params for o in getattr(p, "opts", ())}
            assert "--json" in opts, path
    schema = gpuaudit("schema", "--json")
    assert schema.returncode == 0 and json.loads(schema.stdout)["$defs"]


def test_serve_says_where_it_listens_as_json(tmp_path):
    from gpuaudit.store import Store

    db = f"sqlite:///{tmp_path / 'r.db'}"
    Store(db).close()  # serve reads a store that exists
    proc = subprocess.Popen([sys.executable, "-m", "gpuaudit", "serve", "--port", "0",
                             "--no-live", "--json", "--db", db],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env())
    try:
        doc = json.loads(proc.stdout.readline())
        assert doc["kind"] == "serve" and doc["url"] == f"http://127.0.0.1:{doc['port']}/"
        assert doc["live"] is None and doc["token_required"] is False
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_run_file_wherever_a_run_is_taken(tmp_path):
    run_file = FIX / "runs" / "h200-2gpu-bench-quick.json"
    shown = gpuaudit("show", str(run_file))
    assert shown.returncode == 0 and "Benchmarks" in shown.stdout
    assert json.loads(gpuaudit("show", str(run_file), "--json").stdout)["id"]


def test_inspect_saves_like_run_and_bench_unless_told_not_to(tmp_path):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    snap = str(FIX / "h200-2gpu" / "inspect.json")
    kept = gpuaudit("inspect", "--from", snap, "--db", db)
    assert "saved as run" in kept.stdout
    gpuaudit("inspect", "--from", snap, "--db", db, "--no-save")
    listing = json.loads(gpuaudit("runs", "--json", "--db", db).stdout)
    assert [r["kind"] for r in listing] == ["inspect"]


@pytest.mark.parametrize("old, new", [
    (["monitor", "--price-usd-per-gpu-hour"], ["monitor", "--price-per-gpu-hour"]),
    (["cost", "job", "--price"], ["cost", "job", "--price-per-hour"]),
    (["doctor", "--profile"], ["doctor", "--profiler-trace"]),
    (["recommend", "--from-run"], ["recommend", "--run"]),
    (["recommend", "train", "--budget-usd"], ["recommend", "train", "--budget"]),
])
def test_one_name_per_concept_old_names_kept(old, new):
    *path, old_name = old
    *_, new_name = new
    command = load_command(path[0])
    for word in path[1:]:
        command = command.commands[word]
    param = next(p for p in command.params if old_name in getattr(p, "opts", ()))
    assert new_name in param.opts  # the same option: old scripts get the same behaviour
    text = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"}).stdout
    assert new_name in text and not re.search(rf"{re.escape(old_name)}(?![\w-])", text)


def test_cost_work_takes_a_run_file_too():
    run_file = str(FIX / "runs" / "h200-1gpu-run-quick.json")
    done = gpuaudit("cost", "work", "--instance", "nebius/gpu-h200-sxm_1gpu-16vcpu-200gb",
                    "--run", run_file,
                    "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)
