"""The app class of every gpuaudit command group (`new_app`): our errors, usage errors and an
unwritable stdout become one line and the exit code (`common.exit_code_for`) in one place;
plain help that fits 80 columns, whole words, deprecated option names hidden; options coerced
without typer's heavy machinery where a command must start fast."""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import typer

from gpuaudit.cli.common import GRAMMAR, _say, exit_code_for

try:  # typer ≥ 0.2x carries its own copy of click
    from typer import _click as _click
    from typer._click import _textwrap
except ImportError:  # pragma: no cover - older typer on click
    import click as _click  # type: ignore[no-redef]
    from click import _textwrap  # type: ignore[no-redef]

EPILOG = ("Durations (90s, 1h30m), counts (7B), sizes (4GiB), percentages, amounts and times "
          f"are written as `{GRAMMAR}` describes.")


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
    return {int: "N", float: "NUMBER"}.get(annotation, "TEXT")


class _WholeWords(_textwrap.TextWrapper):
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
    "--save",  # doctor, tune: --json-file FILE (elsewhere --save/--no-save: keep in the store)
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

    class _Plain(RuntimeParam):
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


@contextlib.contextmanager
def loading() -> Iterator[None]:
    """Modules of the command line loaded when a command is first asked for, as the root's
    are (`gpuaudit.cli.entry`): the collector off meanwhile (loading makes only objects that
    live as long as the process: its runs every 700 of them are a couple of milliseconds of
    `recommend`), then those objects frozen (left out of later collections)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if collecting:
            gc.enable()


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
            with loading():
                command = click_command(name, getattr(importlib.import_module(module), attr))
            self.add_command(command, name)
        return command


def new_app(help: str, cls: type[Group] = Group, **kwargs: Any) -> typer.Typer:
    """A typer app with plain help (no boxes, no markup eating '[default: …]', paragraphs
    re-wrapped to the terminal), -h, and the Group above (or a subclass of it)."""
    settings = {"help_option_names": ["-h", "--help"], **kwargs.pop("context_settings", {})}
    return typer.Typer(cls=cls, help=help, rich_markup_mode=None, add_completion=False,
                       pretty_exceptions_enable=False, context_settings=settings, **kwargs)
