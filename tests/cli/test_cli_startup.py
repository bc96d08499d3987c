"""The root command loads its commands by name: `--help` and the cost commands import only
what they need, and the root help's one-liners are the commands' own."""

from __future__ import annotations

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


@pytest.mark.parametrize("argv, absent", [
    (["--help"], (*HEAVY, "pydantic", "gpuaudit.cost", "gpuaudit.cli.machine")),
    (["catalog", "list", "--provider", "aws"], HEAVY),
    (["recommend", "train", "--params", "1B", "--tokens", "10B"], HEAVY),
])
def test_a_command_imports_only_what_it_needs(argv, absent):
    code = (f"import sys, runpy; sys.argv = ['gpuaudit', *{argv!r}]\n"
            "try:\n    runpy.run_module('gpuaudit', run_name='__main__')\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            f"print(sorted(m for m in {absent!r} if any(k == m or k.startswith(m + '.') "
            "for k in sys.modules)), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "[]", proc.stderr
