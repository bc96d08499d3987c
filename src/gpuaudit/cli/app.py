"""The `gpuaudit` command line: parses options, calls the capabilities, formats the result.

Every command lives in its own module and is imported only when it runs (or its help is
asked for): `gpuaudit --help` or `gpuaudit recommend ...` do not import the benchmark, NVML
or store stacks. `COMMANDS` names them, with the one-line help the root help lists (a test
checks it against each command's own)."""

import importlib
from typing import Annotated, Any

import typer

from gpuaudit._version import __version__
from gpuaudit.cli import group

# name → (module, attribute, its help's first paragraph, context settings attribute or "").
# The attribute is a typer app (a group) or a command function.
COMMANDS: dict[str, tuple[str, str, str, str]] = {
    "inspect": ("gpuaudit.cli.machine", "inspect", "What is this GPU server, and is it "
                "healthy? Inventory, topology, health findings.", ""),
    "run": ("gpuaudit.cli.machine", "run", "The main job: inspect this machine, run the "
            "quick benchmarks, judge both, save the run.", ""),
    "bench": ("gpuaudit.cli.machine", "bench", "Micro benchmarks: is this server delivering "
              "what I pay for, part by part?", ""),
    "runs": ("gpuaudit.cli.machine", "runs", "List the stored runs, newest first.", ""),
    "show": ("gpuaudit.cli.machine", "show", "Print a stored run (or a run's JSON file), every "
             "table. Exit code 1 when it holds a FAIL finding.", ""),
    "schema": ("gpuaudit.cli.machine", "schema", "Print the JSON Schema of the documents "
               "gpuaudit writes (--json output, stored runs).", ""),
    "doctor": ("gpuaudit.cli.doctor", "doctor", "Why is this job slow? Runs it unchanged and "
               "watches the GPUs (SM and tensor activity, memory bandwidth, PCIe/NVLink, "
               "clocks), the job's processes and data-loader workers.", "DOCTOR_CONTEXT"),
    "tune": ("gpuaudit.cli.tune", "tune", "The fastest settings for a training job, measured:"
             " the throughput-optimal batch size with a memory margin (out-of-memory caught, "
             "memory checked between trials), a precision comparison, the gradient "
             "accumulation for a target global batch, a loader workers sweep, and the exact "
             "settings to paste.", ""),
    "report": ("gpuaudit.cli.report", "report_cmd", "A page people look at: machine, findings,"
               " benchmarks with % of spec, roofline, transfers, collectives, workloads, "
               "telemetry, cost and a diagnosis where there are some.", ""),
    "compare": ("gpuaudit.cli.report", "compare_cmd", "What changed from run A to run B: each "
                "figure against its noise, regressions and improvements ranked, findings that "
                "appeared or cleared, machine and software differences.", ""),
    "serve": ("gpuaudit.cli.serve", "serve_cmd", "A local web UI over the store: runs with "
              "filters, each run's report, two runs compared, and a live page of the GPUs fed "
              "by the monitor.", ""),
    "predict": ("gpuaudit.cli.predict", "predict", "A recorded step's time and throughput on "
                "another GPU count, precision, model size or GPU model: per operator class, "
                "with its basis and an uncertainty band.", ""),
    "monitor": ("gpuaudit.cli.monitor", "monitor_app", "Watch the GPUs: telemetry, Prometheus "
                "exporter, alert rules, idle policy.", ""),
    "cost": ("gpuaudit.cli.cost", "cost_app", "What it costs: a job on-demand, reserved or on "
             "spot; buy vs rent; $ per unit of work; idle GPUs.", ""),
    "catalog": ("gpuaudit.cli.catalog", "catalog_app", "The price catalog: GPU instances with "
                "on-demand, spot and reserved prices, each with its source and date. List, "
                "show, validate, import your own (ours or SkyPilot's CSV).", ""),
    "recommend": ("gpuaudit.cli.recommend", "recommend_app", "Which instance to rent for a "
                  "task: train, fine-tune, serve, or a benchmarked workload (--run). "
                  "Estimates, with their basis and reasons.", ""),
    "fleet": ("gpuaudit.cli.fleet", "fleet_app", "Audit every GPU node of a Ray cluster into "
              "one store, and find the bad nodes.", ""),
    "help": ("gpuaudit.cli.helpcmd", "help_cmd", "Help on a topic (input: how values are "
             "written) or a command.", ""),
}


def load_command(name: str) -> Any:
    """The click command of one entry of `COMMANDS`, imported now."""
    module_name, attr, _, context = COMMANDS[name]
    with group.loading():
        module = importlib.import_module(module_name)
        return group.click_command(name, getattr(module, attr),
                                    getattr(module, context) if context else None)


class _Root(group.Group):
    """The root group: its commands are loaded by name when first needed."""

    def list_commands(self, ctx: Any) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in COMMANDS if n not in self.commands)]

    def get_command(self, ctx: Any, name: str) -> Any:
        command = super().get_command(ctx, name)
        if command is None and name in COMMANDS:
            command = load_command(name)
            self.add_command(command, name)
        return command

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """Each command with its whole one-line help, wrapped (never cut to '...')."""
        rows = [(name, COMMANDS[name][2] if name in COMMANDS else
                 " ".join((self.commands[name].help or "").split("\n\n")[0].split()))
                for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = group.new_app(
    "What a GPU server really delivers, why a job does not get it, and what it costs.",
    name="gpuaudit", no_args_is_help=True, cls=_Root)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpuaudit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Show the version and exit.")] = False,
) -> None:
    """What a GPU server really delivers, why a job does not get it, and what it costs."""


def main() -> None:
    """Entry point. Errors become one line and their exit code in `group.Group`."""
    app()
