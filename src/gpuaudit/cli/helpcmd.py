"""`gpuaudit help [TOPIC|COMMAND...]`: the rules of what options take (`input`, shipped in the
package as data/input.md, the same text as docs/input.md), or a command's help."""

from __future__ import annotations

from importlib import resources
from typing import Annotated

import typer

from gpuaudit.cli import common
from gpuaudit.cli.common import JsonOpt, out, print_json

TOPICS = {"input": ("input.md", "How values are written: numbers, durations, times, counts, "
                                "sizes, percentages, amounts, currencies, GPUs, files.")}


def topic_text(name: str) -> str:
    return resources.files("gpuaudit.data").joinpath(TOPICS[name][0]).read_text("utf-8")


def help_cmd(
    ctx: typer.Context,
    words: Annotated[list[str] | None, typer.Argument(
        metavar="[TOPIC|COMMAND...]", help="A topic (input) or a command (e.g. `cost job`).")
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Help on a topic (input: how values are written) or a command."""
    words = words or []
    root = ctx.find_root().command
    if not words:
        if json_:
            print_json({"topics": {k: v[1] for k, v in TOPICS.items()},
                        "commands": sorted(root.list_commands(ctx))})
            return
        out.print(ctx.find_root().get_help(), markup=False, highlight=False)
        out.print("\nTopics: " + "; ".join(f"{k}: {v[1]}" for k, v in TOPICS.items()),
                  markup=False)
        return
    if len(words) == 1 and words[0] in TOPICS:
        text = topic_text(words[0])
        if json_:
            print_json({"topic": words[0], "markdown": text})
            return
        from rich.markdown import Markdown

        out.print(Markdown(text))
        return
    command, parent, path = root, ctx.find_root(), []
    for word in words:
        sub = command.get_command(parent, word) if hasattr(command, "get_command") else None
        if sub is None:
            known = sorted([*TOPICS, *root.list_commands(ctx)])
            common.fail(f"no help topic or command {' '.join(words)!r} (topics and commands: "
                        f"{', '.join(known)})")
        parent = sub.make_context(word, [], resilient_parsing=True, parent=parent)
        command, path = sub, [*path, word]
    text = command.get_help(parent)
    if json_:
        print_json({"command": " ".join(path), "help": text})
    else:
        out.print(text, markup=False, highlight=False)
