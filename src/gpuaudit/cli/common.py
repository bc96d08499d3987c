"""What every command shares: one error-to-exit-code mapping, the consoles, JSON output, the
options declared once (--json, --db, --catalog, …), options read through the one input
grammar (`gpuaudit.parse`, docs/input.md), conflicting options refused, output paths checked
before the work starts. The app class every command group is made with is in `cli.group`."""

from __future__ import annotations

import contextlib
import errno
import gc
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from gpuaudit import parse
from gpuaudit.errors import BadInputError, GpuauditError

try:  # typer ≥ 0.2x carries its own copy of click
    from typer import _click as _click
except ImportError:  # pragma: no cover - older typer on click
    import click as _click  # type: ignore[no-redef]

GRAMMAR = "gpuaudit help input"
_EXITS = (typer.Exit, *(c for c in (getattr(_click.exceptions, "Exit", None),) if c))
_ABORTS = (typer.Abort, *(c for c in (getattr(_click.exceptions, "Abort", None),) if c))
_NO_ARGS_HELP = getattr(_click.exceptions, "NoArgsIsHelpError", ())
# What writing to a full disk, a closed or a broken stdout raises (no file name: not a file
# the command opened itself).
_WRITE_ERRORS = {errno.ENOSPC, errno.EIO, errno.EFBIG, errno.EDQUOT, errno.EBADF}

# Human text goes to stdout unless JSON does; then it goes to stderr. Consoles look up
# sys.stdout at each print, so tests that swap it see the output. `out` and `err` are made
# on first use (module __getattr__): rich costs a command that prints plain text (recommend,
# catalog list) a quarter of its time budget to import.
if TYPE_CHECKING:
    from rich.console import Console

    out: Console
    err: Console


def __getattr__(name: str) -> Any:
    if name not in ("out", "err"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from rich.console import Console

    globals().setdefault("out", Console(highlight=False))
    globals().setdefault("err", Console(stderr=True, highlight=False))
    return globals()[name]


def consoles(json_: bool) -> tuple[Console, Console]:
    """(where tables and notes go, where warnings go): with --json, stdout is JSON only."""
    return (__getattr__("err") if json_ else __getattr__("out")), __getattr__("err")


def print_json(doc: object) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


# -- errors: one line, one exit code -------------------------------------------------------------

def error_line(message: str) -> None:
    """One line on stderr whatever the terminal width, for people and scripts alike."""
    text = " ".join(str(message).split())
    try:
        sys.stderr.write(f"gpuaudit: error: {text}\n")
        sys.stderr.flush()
    except OSError:
        pass


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except OSError:
        pass


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush of what could not be
    written does not print 'Exception ignored … BrokenPipeError' after our one line."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass  # not a real file (a test's capture): nothing will flush at exit


def _stdout_broken() -> bool:
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        return True
    return False


def exit_code_for(exc: BaseException) -> int:
    """Report an exception the way every command does and return its exit code: our errors
    and usage errors as one line (2 for bad usage or input), an unwritable stdout as one line
    (exit 1), typer.Exit as its code. Anything else is a bug: re-raised, with its traceback."""
    if isinstance(exc, _EXITS):
        return exc.exit_code
    if isinstance(exc, _NO_ARGS_HELP):
        sys.stdout.write(exc.ctx.get_help() + "\n")
        return 0
    if isinstance(exc, _click.exceptions.ClickException):
        ctx = getattr(exc, "ctx", None)
        hint = f" (`{ctx.command_path} --help`)" if ctx is not None else ""
        error_line(exc.format_message() + hint)
        return exc.exit_code
    if isinstance(exc, _ABORTS):
        error_line("aborted")
        return 1
    if isinstance(exc, GpuauditError):
        error_line(str(exc))
        return exc.exit_code
    if isinstance(exc, RecursionError):
        error_line("the input is nested too deeply to read")
        return 2
    if isinstance(exc, KeyboardInterrupt):
        from gpuaudit import interrupt

        interrupt.clear()
        _say("gpuaudit: interrupted (Ctrl-C)")
        return 130
    if isinstance(exc, OSError):
        if exc.errno == errno.EPIPE:  # the reader went away (`| head`): nothing to say
            _quiet_stdout()
            return 1
        if (exc.filename is None and exc.errno in _WRITE_ERRORS) or _stdout_broken():
            error_line(f"cannot write the output: {exc.strerror or exc}")
            _quiet_stdout()
            return 1
        where = f" ({exc.filename})" if exc.filename else ""
        error_line(f"{exc.strerror or exc}{where}")
        return 1
    raise exc


def fail(message: str) -> NoReturn:
    raise BadInputError(message)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off around a short command's work that makes tens of
    thousands of plain tuples (ranking 10,000 offers): run every 700 new objects, it would go
    over them again and again for cycles they cannot have (a twentieth of the command). On
    again after, as it was."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


# -- options declared once -----------------------------------------------------------------------

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout (human text on "
                                                      "stderr).")]
DbOpt = Annotated[str | None, typer.Option(
    "--db", envvar="GPUAUDIT_DB", show_envvar=True, metavar="URL",
    help="Store URL: a SQLite path or sqlite:///…, postgresql://… [default: a SQLite file in "
         "the user data directory]")]
CatalogOpt = Annotated[Path | None, typer.Option(
    "--catalog", dir_okay=False, metavar="FILE",
    help="Read prices from this catalog file (ours or SkyPilot's vms.csv) instead of the "
         "shipped one plus your imported rows.")]
InstanceOpt = Annotated[str | None, typer.Option(
    "--instance", metavar="PROVIDER/TYPE[@REGION]",
    help="An instance from the price catalog, e.g. aws/p5.48xlarge@us-east-1 (without a "
         "region: the cheapest region).")]


def _opt(decls: tuple[str, ...], fn: Callable[..., Any], metavar: str, help: str,
         **bounds: Any) -> Any:
    option = decls[0]
    return typer.Option(*decls, parser=lambda text: fn(text, option, **bounds),
                        metavar=metavar, help=help)


def duration(*decls: str, help: str, **bounds: Any) -> Any:
    """An option read as a duration (seconds): 90s, 10m, 1.5h, 2d, 1h30m."""
    return _opt(decls, parse.duration_s, "DURATION", help, **bounds)


def count(*decls: str, help: str, **bounds: Any) -> Any:
    """An option read as a count: 7B, 1.3B, 500k, 2e9."""
    return _opt(decls, parse.count, "COUNT", help, **bounds)


def integer(*decls: str, help: str, metavar: str = "N", **bounds: Any) -> Any:
    return _opt(decls, parse.integer, metavar, help, **bounds)


def number(*decls: str, help: str, metavar: str = "NUMBER", **bounds: Any) -> Any:
    return _opt(decls, parse.number, metavar, help, **bounds)


def money(*decls: str, help: str, **bounds: Any) -> Any:
    return _opt(decls, parse.money, "AMOUNT", help, **bounds)


def percent(*decls: str, help: str, **bounds: Any) -> Any:
    return _opt(decls, parse.percent, "PCT", help, **bounds)


def fraction(*decls: str, help: str, **bounds: Any) -> Any:
    return _opt(decls, parse.fraction, "FRACTION", help, **bounds)


def currency(*decls: str, help: str) -> Any:
    return _opt(decls or ("--currency",), parse.currency, "CODE", help)


def gpus(*decls: str, help: str) -> Any:
    return _opt(decls or ("--gpus",), parse.gpu_indices, "0,1,…", help)


def choice(*decls: str, choices: tuple[str, ...], help: str) -> Any:
    return _opt(decls, parse.choice, "|".join(choices), help, choices=choices)


def time_point(*decls: str, help: str) -> Any:
    return _opt(decls, parse.time_point, "TIME", help)


# -- options that go together, and those that do not ---------------------------------------------

def given(ctx: typer.Context, name: str) -> bool:
    """Whether the option was typed (not a default, not an environment variable). By name:
    recent typer carries its own copy of click, whose enum is not click's."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def refuse_together(ctx: typer.Context, *pairs: tuple[str, str]) -> None:
    """Refuse (exit 2) when both options of a pair were given: '--once' and '--count'."""
    for a, b in pairs:
        if given(ctx, a) and given(ctx, b):
            raise BadInputError(f"give {_flag(ctx, a)} or {_flag(ctx, b)}, not both")


def needs(ctx: typer.Context, option: str, *, on: str, present: bool) -> None:
    """Refuse `option` when `on` is missing: '--speed goes with --replay'."""
    if given(ctx, option) and not present:
        raise BadInputError(f"{_flag(ctx, option)} goes with {on}")


def _flag(ctx: typer.Context, name: str) -> str:
    for p in ctx.command.params:
        if p.name == name and p.opts:
            return max(p.opts, key=len)
    return "--" + name.replace("_", "-")


# -- output paths ----------------------------------------------------------------------------------

def writable(path: Path | None, option: str) -> None:
    """Check before any work that `path` can be written (see `parse.writable_file`)."""
    parse.writable_file(path, option)


def save_json(path: Path | None, doc: Any, option: str = "--json-file") -> None:
    """Write `doc` as indented JSON to the file the user named (nothing when None); a write
    that fails is bad input naming the option."""
    if path is None:
        return
    try:
        path.write_text(json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        raise BadInputError(f"{option} {path}: {exc.strerror or exc}") from None


def check_known(option: str, value: str | None, known: Iterable[str], what: str) -> None:
    """Refuse a filter value that matches nothing, naming the known ids and close matches."""
    if value is None:
        return
    pool = set(known)
    if value not in pool and value.lower() not in {k.lower() for k in pool}:
        raise parse.unknown(option, value, pool, what)


def load_catalog(path: Path | None) -> Any:
    """The price catalog for a command that computes with it: a file with rows but not one
    usable is bad input, with the first reason (not '0 offers considered')."""
    from gpuaudit.cost.catalog import load_catalog as load

    catalog = load(path)
    if not catalog.offers and catalog.problems:
        first = catalog.problems[0]
        more = len(catalog.problems) - 1
        raise BadInputError(f"no usable offer in the catalog: {first}"
                            + (f" (and {more} more problems: `gpuaudit catalog validate`)"
                               if more else ""))
    return catalog


class LogLines(logging.Handler):
    """gpuaudit's log records as lines on a console (stderr's for progress), above a live
    view if there is one."""

    def __init__(self, console: Any) -> None:
        super().__init__()
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        style = {logging.ERROR: "red", logging.WARNING: "yellow"}.get(record.levelno, "dim")
        self.console.print(f"{record.name.removeprefix('gpuaudit.')}: {record.getMessage()}",
                           style=style, markup=False, highlight=False, soft_wrap=True)


@contextlib.contextmanager
def logs_to(console: Any, name: str = "gpuaudit") -> Iterator[None]:
    """`name`'s records of level INFO and above shown on `console` while the block runs."""
    logger = logging.getLogger(name)
    handler, level = LogLines(console), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
