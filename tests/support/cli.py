"""Running `gpuaudit` the way users do, in a child process with this checkout's src first on
its path; and the checks every refusal must pass (exit 2, one line, no traceback)."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import cli_env

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"


def gpuaudit(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
             timeout: float = 120, columns: int | None = 160, **run: Any
             ) -> subprocess.CompletedProcess[str]:
    """`python -m gpuaudit ARGS` with `env` on top of this environment; `columns` sets the
    width rich and typer wrap to (None: theirs, 80 off a terminal); `run` goes to
    subprocess.run (stdin, input)."""
    extra = {"COLUMNS": str(columns)} if columns is not None else {}
    return subprocess.run([sys.executable, "-m", "gpuaudit", *args], capture_output=True,
                          text=True, env=cli_env(**{**extra, **(env or {})}), cwd=cwd,
                          timeout=timeout, **run)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Bad input as users must see it: exit 2, one line on stderr naming each of `needles`,
    no traceback."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def error_line(result: Any, code: int = 2) -> str:
    """The one stderr line of a CliRunner result that failed with `code`, its
    "gpuaudit: error: " prefix taken off."""
    assert result.exit_code == code, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("gpuaudit: error: "), result.stderr
    return lines[0].removeprefix("gpuaudit: error: ")


def monitor_accepts(args: list[str]) -> None:
    """`gpuaudit monitor` with these options (a deployment's command line) runs one replayed
    tick of a real idle H200: the same parser as on a node."""
    from typer.testing import CliRunner

    from gpuaudit.cli.app import app

    trace = FIX / "telemetry" / "h200-1gpu-idle.json"
    result = CliRunner().invoke(app, [*args, "--replay", str(trace), "--count", "1",
                                      "--no-export", "--no-history", "--json"])
    assert result.exit_code == 0, result.output


@functools.cache
def _run_validator() -> Any:
    from jsonschema.validators import validator_for

    from gpuaudit.model import json_schema

    schema = json_schema()
    cls = validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate_run(doc: Any) -> None:
    """`jsonschema.validate(doc, json_schema())`, with the published run schema checked and its
    validator built once for the session instead of once per document (a tenth of a second
    each, for every one of the tests that read a run as a user's program would)."""
    from jsonschema.exceptions import best_match

    error = best_match(_run_validator().iter_errors(doc))
    if error is not None:
        raise error
