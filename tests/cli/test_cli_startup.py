"""The root command loads its commands by name: `--help` and the cost commands import only
what they need, and the root help's one-liners are the commands' own."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
from typer._click.utils import make_default_short_help

from gpuaudit.cli.app import COMMANDS, load_command

HEAVY = ("gpuaudit.bench", "gpuaudit.inspect", "gpuaudit.hw", "gpuaudit.store", "sqlalchemy",
         "pynvml", "torch", "gpuaudit.diagnose", "gpuaudit.telemetry")


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_listed_help_is_the_commands_own(name):
    command = load_command(name)
    assert command.name == name
    first = " ".join((command.help or "").split("\n\n")[0].split())
    assert first == COMMANDS[name][2]
    for limit in (45, 80, 200):
        assert make_default_short_help(COMMANDS[name][2], limit) == \
            command.get_short_help_str(limit)


RECOMMEND_TRAIN = ["recommend", "train", "--params", "1B", "--tokens", "10B"]
# Parts of recommend that only some tasks or options use: an input-feed check (--feed), an
# all-reduce measured across nodes (--allreduce-run), the serving model (serve).
FOR_OTHER_TASKS = ("gpuaudit.cost.recommend.feed", "gpuaudit.cost.recommend.measured",
                   "gpuaudit.cost.recommend.serving")


def imported(argv: list[str]) -> set[str]:
    """The modules a whole `python -m gpuaudit ARGV` process imports (Python's own record of
    them, -X importtime: it holds however the process ends)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "gpuaudit", *argv],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split("|") for line in proc.stderr.splitlines()
            if line.startswith("import time:")]
    names = {row[2].strip() for row in rows[1:] if len(row) == 3}  # row 0 is the header
    assert "gpuaudit.cli.app" in names  # the record is there
    return names


@pytest.mark.parametrize("argv, absent", [
    (["--help"], (*HEAVY, "pydantic", "gpuaudit.cost", "gpuaudit.cli.machine")),
    (["catalog", "list", "--provider", "aws"], HEAVY),
    (RECOMMEND_TRAIN, (*HEAVY, *FOR_OTHER_TASKS)),
    (["recommend", "finetune", "--params", "7B"], (*HEAVY, *FOR_OTHER_TASKS)),
])
def test_a_command_imports_only_what_it_needs(argv, absent):
    names = imported(argv)
    assert sorted(m for m in absent if any(k == m or k.startswith(m + ".") for k in names)) == []


def test_serve_imports_its_model_and_not_the_training_options():
    names = imported(["recommend", "serve", "--params", "7B", "--qps", "1", "--tpot-ms", "50"])
    assert "gpuaudit.cost.recommend.serving" in names
    assert not {"gpuaudit.cost.recommend.feed", "gpuaudit.cost.recommend.measured"} & names


@pytest.mark.parametrize("collecting", [True, False])
def test_a_command_loads_with_the_collector_off_and_its_objects_frozen(collecting):
    from gpuaudit.cli import group

    was = gc.isenabled()
    (gc.enable if collecting else gc.disable)()
    before = gc.get_freeze_count()
    try:
        with group.loading():
            assert not gc.isenabled()
            made = [{"a": [i]} for i in range(100)]  # what loading a module makes
        assert gc.isenabled() == collecting  # as it was
        assert gc.get_freeze_count() >= before + len(made)  # left out of later collections
    finally:
        gc.unfreeze()
        (gc.enable if was else gc.disable)()
