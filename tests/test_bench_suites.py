"""The suite registry (bench/suites.py) is the one list of what `gpuaudit bench` runs: every
suite module is in it once, each entry's modules have what the runner calls, and the CLI, the
profiles and the user's manual name the same suites."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuaudit.bench import runner
from gpuaudit.bench.context import Profile
from gpuaudit.bench.suites import DEFAULT, HOST_SUITES, OPT_IN, SUITES, Suite

SRC = Path(__file__).resolve().parent.parent / "src" / "gpuaudit"
DOCS = Path(__file__).resolve().parent.parent / "docs"


def _suite_modules() -> dict[str, str]:
    """Every module in the tree with a top-level `def run(ctx)` (and its `SUITE = "name"`
    where it has one), read from the source (the suites import torch): dotted name → SUITE."""
    found = {}
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text())
        has_run = any(isinstance(n, ast.FunctionDef) and n.name == "run"
                      and [a.arg for a in n.args.args] == ["ctx"] for n in tree.body)
        names = [n.value.value for n in tree.body if isinstance(n, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "SUITE" for t in n.targets)
                 and isinstance(n.value, ast.Constant)]
        if has_run:
            dotted = ".".join(("gpuaudit", *path.relative_to(SRC).with_suffix("").parts))
            found[dotted] = names[0] if names else ""
    return found


def test_every_suite_module_is_registered_once_under_its_own_name():
    modules = _suite_modules()
    registered = [s.module for s in SUITES.values()]
    assert len(registered) == len(set(registered)), "a module registered twice"
    assert sorted(registered) == sorted(modules), "a suite module missing from the registry"
    for s in SUITES.values():
        assert modules[s.module] in ("", s.name), f"{s.module} says SUITE = {modules[s.module]}"


def test_the_registry_holds_one_entry_per_name():
    from gpuaudit.bench import suites

    names = [s.name for s in suites._ALL]
    assert len(names) == len(set(names)) == len(SUITES)
    assert all(isinstance(s, Suite) and s.description for s in SUITES.values())


@pytest.mark.parametrize("name", sorted(SUITES))
def test_each_entry_names_modules_with_what_the_runner_calls(name):
    s = SUITES[name]
    tree = ast.parse((SRC / Path(*s.module.split(".")[1:])).with_suffix(".py").read_text())
    assert "run" in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    for module in s.native:
        assert callable(importlib.import_module(module).run_native), module
    if s.preflight:
        assert callable(importlib.import_module(s.preflight).preflight)


def test_defaults_profiles_and_host_suites_follow_the_registry():
    assert set(DEFAULT) | set(OPT_IN) == set(SUITES) and not set(DEFAULT) & set(OPT_IN)
    assert OPT_IN == ("render", "science")
    assert runner.check_suites([]) == list(DEFAULT)  # bench with no names, and `gpuaudit run`
    assert {"host", "storage", "network"} == HOST_SUITES
    # every profile runs the same suites: the profile sets how long each one searches
    assert {p.value for p in Profile} == {"quick", "standard", "full"}


def test_the_cli_names_every_suite_and_the_opt_in_ones():
    from gpuaudit.cli.app import app

    result = CliRunner().invoke(app, ["bench", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    listed = re.search(r"Suites to run \(default: all but ([^)]*)\): ([^;]*);", text)
    assert listed, text
    assert listed.group(1) == " and ".join(OPT_IN)
    assert listed.group(2).split(", ") == list(SUITES)
    unknown = CliRunner().invoke(app, ["bench", "warp"])
    assert unknown.exit_code == 2


def test_the_manual_describes_every_suite():
    """Each suite has its place in docs/: a row of a suite table or a `gpuaudit bench NAME`."""
    text = "\n".join(p.read_text() for p in DOCS.glob("*.md"))
    missing = [n for n in SUITES if f"| `{n}` |" not in text
               and not re.search(rf"gpuaudit bench (\S+ )*{n}\b", text)]
    assert missing == []
