"""The `gpuaudit` command line: parses options, calls the capabilities, formats the result."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gpuaudit._version import __version__
from gpuaudit.errors import GpuauditError
from gpuaudit.model import Run, Severity

app = typer.Typer(
    name="gpuaudit",
    help="What a GPU server really delivers, why a job does not get it, and what it costs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# Human text goes to stdout unless JSON does; then it goes to stderr.
out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout (human text on "
                                                      "stderr).")]
DbOpt = Annotated[str | None, typer.Option(
    "--db", envvar="GPUAUDIT_DB", show_envvar=True,
    help="Store URL: a SQLite path or sqlite:///…, postgresql://… "
         "[default: a SQLite file in the user data directory]")]


def _version(value: bool) -> None:
    if value:
        out.print(f"gpuaudit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Show the version and exit.")] = False,
) -> None:
    """What a GPU server really delivers, why a job does not get it, and what it costs."""


def exit_code(run: Run) -> int:
    return 1 if run.verdict is Severity.FAIL else 0


def _print_json(doc: object) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


def _save(run: Run, db: str | None) -> str:
    from gpuaudit.store import Store

    with Store(db) as store:
        return store.save(run)


@app.command()
def inspect(
    json_: JsonOpt = False,
    from_: Annotated[Path | None, typer.Option(
        "--from", help="Analyse a saved snapshot (the JSON of `inspect --json`) instead of "
                       "this machine.", dir_okay=False)] = None,
    save: Annotated[bool, typer.Option("--save", help="Keep the run in the store.")] = False,
    show_pass: Annotated[bool, typer.Option("--all", help="Show passed checks too.")] = False,
    db: DbOpt = None,
) -> None:
    """What is this GPU server, and is it healthy? Inventory, topology, health findings.

    Exit code 1 when a finding is FAIL.
    """
    from gpuaudit.inspect import inspect_machine, read_snapshot
    from gpuaudit.report.terminal import inspect_view

    if from_ is not None:
        run = inspect_machine(read_snapshot(from_), source=str(from_))
    else:
        run = inspect_machine()
    saved = _save(run, db) if save else None
    if json_:
        sys.stdout.write(run.model_dump_json(indent=2) + "\n")
    else:
        out.print(inspect_view(run, show_pass=show_pass))
    if saved:
        (err if json_ else out).print(f"saved as run {saved}")
    raise typer.Exit(exit_code(run))


@app.command()
def run(
    json_: JsonOpt = False,
    save: Annotated[bool, typer.Option("--save/--no-save", help="Keep the run in the store.")
                    ] = True,
    db: DbOpt = None,
) -> None:
    """The main job: inspect this machine, judge it, save the run, print a summary.

    Exit code 1 when a finding is FAIL.
    """
    from gpuaudit.inspect import inspect_machine
    from gpuaudit.report.terminal import inspect_view

    console = err if json_ else out
    with console.status("inspecting the machine…"):
        inspected = inspect_machine()
    result = inspected.model_copy(update={"kind": "run"})
    saved = _save(result, db) if save else None
    if json_:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    else:
        out.print(inspect_view(result))
    if saved:
        console.print(f"saved as run {saved}: `gpuaudit show {saved}` prints it again")
    raise typer.Exit(exit_code(result))


@app.command()
def runs(
    json_: JsonOpt = False,
    limit: Annotated[int, typer.Option(min=1, help="How many, newest first.")] = 20,
    kind: Annotated[str | None, typer.Option(help="Only runs of this kind (inspect, run…).")
                    ] = None,
    db: DbOpt = None,
) -> None:
    """List the stored runs, newest first."""
    from gpuaudit.report.terminal import runs_table
    from gpuaudit.store import Store

    with Store(db) as store:
        summaries = store.list_runs(limit=limit, kind=kind)
    if json_:
        _print_json([s.model_dump(mode="json") for s in summaries])
    elif summaries:
        out.print(runs_table(summaries))
    else:
        out.print("no runs stored yet: `gpuaudit run` makes one")


@app.command()
def show(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="A run id or a unique prefix.")],
    json_: JsonOpt = False,
    show_pass: Annotated[bool, typer.Option("--all", help="Show passed checks too.")] = False,
    db: DbOpt = None,
) -> None:
    """Print a stored run. Exit code 1 when it holds a FAIL finding."""
    from gpuaudit.report.terminal import inspect_view
    from gpuaudit.store import Store

    with Store(db) as store:
        stored = store.get(run_id)
    if json_:
        sys.stdout.write(stored.model_dump_json(indent=2) + "\n")
    else:
        out.print(f"run {stored.id} ({stored.kind}, {stored.started_at:%Y-%m-%d %H:%M:%S %Z})")
        out.print(inspect_view(stored, show_pass=show_pass))
    raise typer.Exit(exit_code(stored))


@app.command()
def schema() -> None:
    """Print the JSON Schema of the documents gpuaudit writes (--json output, stored runs)."""
    from gpuaudit.model import json_schema

    _print_json(json_schema())


def main() -> None:
    """Entry point. Typer handles usage errors (exit 2); our errors become one line on stderr
    and their exit code, never a traceback."""
    try:
        app()
    except GpuauditError as exc:
        # Plain write: one line whatever the terminal width, for people and scripts alike.
        sys.stderr.write(f"gpuaudit: error: {exc}\n")
        sys.exit(exc.exit_code)
