"""What every command shares: the app class (one error-to-exit-code mapping, usage errors on
one line, plain help that fits 80 columns), the consoles, JSON output, the options declared
once (--json, --db, --catalog, …), options read through the one input grammar
(`gpuaudit.parse`, docs/input.md), conflicting options refused, output paths checked before
the work starts."""

from __future__ import annotations

import contextlib
import errno
import gc
import importlib
import json
import os
import sys
import textwrap
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, NoReturn

import typer

from gpuaudit import parse
from gpuaudit.errors import BadInputError, GpuauditError

try:  # typer ≥ 0.2x carries its own copy of click
    from typer import _click as _click  # type: ignore[attr-defined]
    from typer._click import _textwrap  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - older typer on click
    import click as _click  # type: ignore[no-redef]
    from click import _textwrap  # type: ignore[no-redef]

GRAMMAR = "gpuaudit help input"
EPILOG = ("Durations (90s, 1h30m), counts (7B), sizes (4GiB), percentages, amounts and times "
          f"are written as `{GRAMMAR}` describes.")
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


# -- the app class ---------------------------------------------------------------------------------

def _metavar(param: Any) -> str | None:
    """A plain name for what an option takes (TEXT, N, FILE, a|b|c) instead of typer's
    '<str>', '<int range>', '<list[str]>'."""
    desc = getattr(param, "type_descriptor", None)
    if desc is None:
        return None
    if getattr(desc, "is_choice", False):
        values = [str(getattr(c, "value", c)) for c in desc.choices or ()]
        return "|".join(values)
    annotation = getattr(desc, "annotation", None)
    inner = getattr(annotation, "__args__", None)
    if getattr(desc, "is_list", False) and inner:
        annotation = inner[0]
    if getattr(desc, "is_path", False) or annotation is Path:
        return {"dir": "DIR", "file": "FILE"}.get(getattr(desc, "path_type", ""), "PATH")
    return {int: "N", float: "NUMBER"}.get(annotation, "TEXT")  # type: ignore[call-overload]


class _WholeWords(_textwrap.TextWrapper):  # type: ignore[misc,name-defined]
    """click's wrapper without breaking a word: an option name (`--op-profile`) or a value
    (`RATE:BYTES[:jpeg|raw]`) longer than the line goes on a line of its own, whole."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.update(break_long_words=False, break_on_hyphens=False)
        super().__init__(*args, **kwargs)

    def _handle_long_word(self, reversed_chunks: list[str], cur_line: list[str],
                          cur_len: int, width: int) -> None:
        # click's wrapper cuts the word here whatever break_long_words says; textwrap's own
        # method honours it (the word goes whole onto a line of its own).
        textwrap.TextWrapper._handle_long_word(self, reversed_chunks, cur_line, cur_len, width)


class HelpFormatter(_click.HelpFormatter):
    """click's help layout, with whole words (see `_WholeWords`)."""

    def _whole(self, method: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        plain = _textwrap.TextWrapper
        _textwrap.TextWrapper = _WholeWords  # click's wrap_text looks it up at each call
        try:
            method(*args, **kwargs)
        finally:
            _textwrap.TextWrapper = plain

    def write_text(self, text: str) -> None:
        self._whole(super().write_text, text)

    def write_dl(self, rows: Any, col_max: int = 30, col_spacing: int = 2) -> None:
        self._whole(super().write_dl, rows, col_max, col_spacing)

    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        self._whole(super().write_usage, prog, args, prefix)


class Context(typer.Context):
    formatter_class = HelpFormatter


# Old option names kept working for the scripts that use them, left out of the help.
DEPRECATED_NAMES = frozenset({
    "--price-usd-per-gpu-hour",  # --price-per-gpu-hour (with --currency, USD by default)
    "--price",  # cost job: --price-per-hour
    "--price-usd",  # cost tco: --capex
    "--budget-usd",  # recommend: --budget (in --currency)
    "--from-run",  # recommend: --run
    "--profile",  # doctor: --profiler-trace (elsewhere --profile is quick|standard|full)
})


def _hide_deprecated(param: Any) -> None:
    """Show an option under its current names only; the deprecated ones still parse."""
    hidden = [o for o in getattr(param, "opts", ()) if o in DEPRECATED_NAMES]
    if not hidden or len(hidden) == len(param.opts) or getattr(param, "_hides", False):
        return
    record = param.get_help_record

    def help_record(ctx: Any) -> Any:
        opts = param.opts
        param.opts = [o for o in opts if o not in DEPRECATED_NAMES]
        try:
            return record(ctx)
        finally:
            param.opts = opts

    param.get_help_record = help_record
    param._hides = True


def tidy_help(command: Any) -> None:
    """Name what each option takes, and where the grammar of values is written, for every
    command under `command`."""
    if getattr(command, "epilog", "") is None and any(
            getattr(p, "param_type_name", "") == "option" and not getattr(p, "is_flag", True)
            for p in getattr(command, "params", ())):
        command.epilog = EPILOG
    command.context_class = Context
    _light_help_option(command)
    for param in getattr(command, "params", ()):
        _hide_deprecated(param)
        _light_coercion(param)
        if getattr(param, "param_type_name", "") == "argument":
            # 'FILE', not 'file <file>': the name says what it takes.
            if param.metavar is None and param.name:
                param.metavar = param.name.upper()
            if hasattr(param, "display_type_rich"):
                param.display_type_rich = lambda ctx=None: None
            continue
        if (param.metavar is None and not getattr(param, "is_flag", False)
                and not getattr(param, "count", False)
                and getattr(param, "param_type_name", "") == "option"):
            name = _metavar(param)
            if name is not None:
                param.metavar = name
    for sub in getattr(command, "commands", {}).values():
        tidy_help(sub)


# What pydantic reads as a boolean (typer's flags given a value, e.g. from the environment).
_BOOLS = {"": False, "0": False, "false": False, "f": False, "no": False, "n": False,
          "off": False, "1": True, "true": True, "t": True, "yes": True, "y": True,
          "on": True}


def _light_help_option(command: Any) -> None:
    """The help option is made by typer when a command parses its arguments: give it the
    plain coercion too (once per command)."""
    made = getattr(command, "get_help_option", None)
    if made is None or getattr(made, "_light", False):
        return

    def get_help_option(ctx: Any) -> Any:
        option = made(ctx)
        if option is not None:
            _light_coercion(option)
        return option

    get_help_option._light = True  # type: ignore[attr-defined]
    command.get_help_option = get_help_option


def _light_coercion(param: Any) -> None:
    """Coerce an option's value without pydantic where that is plain: typer (0.2x) builds a
    pydantic TypeAdapter for every parameter it parses, which costs a command ~100 ms of
    imports, while our options parse their own text (`parser=`, the one grammar) and the rest
    are text, flags and file paths. Other parameters (choices, numbers with bounds, lists)
    keep typer's coercion, as does everything when typer's internals differ."""
    if getattr(param, "_runtime_param", False) is not None:
        return
    try:
        from typer._coercion import RuntimeParam
        from typer._param_types import coerce_cli_path, routes_to_path
    except ImportError:  # pragma: no cover - another typer: its own coercion stays
        return
    desc = getattr(param, "type_descriptor", None)
    info = getattr(desc, "parameter_info", None)
    if desc is None or info is None or desc.file_annotation is not None:
        return
    ann = desc.annotation
    if info.parser is not None:
        parser = info.parser

        def coerce(value: Any, _param: Any, _ctx: Any) -> Any:
            return parser(value)
    elif ann is str:
        def coerce(value: Any, _param: Any, _ctx: Any) -> Any:
            return value.decode() if isinstance(value, bytes) else str(value)
    elif ann is bool:
        def coerce(value: Any, param: Any, ctx: Any) -> Any:
            if isinstance(value, bool) or value is None:
                return value
            text = str(value).strip().lower()
            if text in _BOOLS:
                return _BOOLS[text]
            raise typer.BadParameter(f"{value!r} is not a valid boolean", ctx=ctx,
                                     param=param)
    elif isinstance(ann, type) and issubclass(ann, Path) and routes_to_path(ann, info):
        def coerce(value: Any, param: Any, ctx: Any) -> Any:
            if isinstance(value, str):
                value = ann(value)  # typer would ask pydantic to make the Path
            return coerce_cli_path(value, info, path_type=ann, param=param, ctx=ctx)
    else:
        return

    class _Plain(RuntimeParam):  # type: ignore[misc]
        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            return coerce(value, param, ctx)

    param._runtime_param = _Plain(parameter_info=info, annotation=ann)


class Group(typer.core.TyperGroup):
    """Every gpuaudit app: our errors, usage errors and an unwritable stdout become one line
    and the exit code (DESIGN: 0 good, 1 FAIL or failed check, 2 bad usage or input) here, in
    one place, for the whole CLI and for each sub-app that tests run alone."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tidy_help(self)

    def main(self, args: Any = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        from gpuaudit import interrupt

        try:
            # Ctrl-C raises KeyboardInterrupt, and is remembered until handled
            with interrupt.installed():
                rv = super().main(args, prog_name, complete_var, standalone_mode=False,
                                  **extra)
                sys.stdout.flush()  # `> /dev/full` fails here, not at the interpreter's exit
            code = rv if isinstance(rv, int) else 0
        except SystemExit:
            raise
        except BaseException as exc:  # exit_code_for re-raises what is a bug
            # a Ctrl-C that a library turned into another error is still a Ctrl-C
            code = exit_code_for(KeyboardInterrupt() if interrupt.pending() else exc)
        if code == 130 and interrupt.pending():
            # typer turns a KeyboardInterrupt nobody handled into a silent Exit(130)
            interrupt.clear()
            _say("gpuaudit: interrupted (Ctrl-C)")
        interrupt.clear()  # a command that stops on Ctrl-C (serve, monitor) has handled it
        if not standalone_mode:
            return code
        sys.exit(code)


def click_command(name: str, target: Any, context_settings: dict[str, Any] | None = None
                  ) -> Any:
    """A typer app (a group) or a command function as the click command `name`, its help
    tidied (`tidy_help`)."""
    if isinstance(target, typer.Typer):
        command = typer.main.get_command(target)
    else:
        single = typer.Typer(add_completion=False, rich_markup_mode=None,
                             pretty_exceptions_enable=False)
        single.command(name, context_settings=context_settings)(target)
        command = typer.main.get_command(single)
    command.name = name
    tidy_help(command)
    return command


class LazyGroup(Group):
    """A group whose subcommands are named in `SUBCOMMANDS` (name → module, function) and
    made into click commands when first asked for. Typer reads every option of a command
    function when it makes the command (~3 ms for twenty options), so `recommend train`
    makes `train` alone; the help's list makes them all."""

    SUBCOMMANDS: ClassVar[dict[str, tuple[str, str]]] = {}

    def list_commands(self, ctx: Any) -> list[str]:
        return [*super().list_commands(ctx),
                *(n for n in self.SUBCOMMANDS if n not in self.commands)]

    def get_command(self, ctx: Any, name: str) -> Any:
        command = super().get_command(ctx, name)
        if command is None and name in self.SUBCOMMANDS:
            module, attr = self.SUBCOMMANDS[name]
            command = click_command(name, getattr(importlib.import_module(module), attr))
            self.add_command(command, name)
        return command


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


def new_app(help: str, cls: type[Group] = Group, **kwargs: Any) -> typer.Typer:
    """A typer app with plain help (no boxes, no markup eating '[default: …]', paragraphs
    re-wrapped to the terminal), -h, and the Group above (or a subclass of it)."""
    settings = {"help_option_names": ["-h", "--help"], **kwargs.pop("context_settings", {})}
    return typer.Typer(cls=cls, help=help, rich_markup_mode=None, add_completion=False,
                       pretty_exceptions_enable=False, context_settings=settings, **kwargs)


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


def save_json(path: Path | None, doc: Any, option: str = "--save") -> None:
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
