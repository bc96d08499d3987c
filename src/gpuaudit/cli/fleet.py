"""`gpuaudit fleet run|report`: audit the GPU nodes of a Ray cluster, judge them as a fleet."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuaudit.cli import common, group
from gpuaudit.errors import BadInputError, GpuauditError
from gpuaudit.fleet.actions import ActionKind

fleet_app = group.new_app("Audit every GPU node of a Ray cluster into one store, and find the "
                           "bad nodes.", no_args_is_help=True)

ExpectOpt = Annotated[Path | None, typer.Option(
    "--expect", dir_okay=False, metavar="FILE",
    help="What every node must have (YAML: gpu_count, gpu_model, driver_version, "
         "cuda_version, nvml) [default: what most of the fleet's nodes have].")]
ActionOpt = Annotated[list[ActionKind] | None, typer.Option(
    "--action", help="What to do about each bad node (repeatable): slurm-drain, k8s-cordon, "
                     "k8s-taint, webhook. A dry run unless --apply.")]
ApplyOpt = Annotated[bool, typer.Option(
    "--apply", help="Carry the actions out (without it they are only shown and logged).")]
WebhookOpt = Annotated[str | None, typer.Option(
    "--webhook", metavar="URL", help="Where --action webhook POSTs each bad node (JSON).")]
ActionLogOpt = Annotated[Path | None, typer.Option(
    "--action-log", dir_okay=False, metavar="FILE",
    help="Append every action, planned or done, as a JSON line [default: actions.jsonl in "
         "gpuaudit's data directory].")]


class FleetProfile(str, Enum):
    quick = "quick"
    standard = "standard"


class _Saver:
    """Saves each node's run as it arrives, through one open store (a thousand nodes finish
    within minutes of each other). A store that refuses a run gets it kept in a file
    (store.keep) and the fleet run goes on: the other nodes' results still matter. After a
    failure the next run tries a fresh connection."""

    def __init__(self, db: str | None) -> None:
        self.db = db
        self.store: Any = None
        self.unsaved: list[str] = []
        self.problem: str | None = None

    def _open(self) -> Any:
        from gpuaudit.store import Store

        if self.store is None:
            self.store = Store(self.db)
        return self.store

    def _drop(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    def __call__(self, run: Any) -> tuple[bool, str | None]:
        from gpuaudit.store import keep_run

        try:
            self._open().save(run)
            return True, None
        except GpuauditError as exc:
            self._drop()
            kept = keep_run(run)
            where = f"kept in {kept}" if kept else "not kept in a file either"
            self.problem = self.problem or f"run {run.id} was not saved ({exc}); {where}"
            self.unsaved.append(run.id)
            return False, str(kept) if kept else None

    def save_fleet(self, fleet_run: Any) -> None:
        try:
            self._open().save_fleet_run(fleet_run.id, fleet_run.started_at,
                                        fleet_run.finished_at, fleet_run.model_dump_json())
        except GpuauditError as exc:
            self._drop()
            self.problem = self.problem or f"fleet run {fleet_run.id} was not saved ({exc})"
        finally:
            self._drop()


@contextlib.contextmanager
def _progress(console: Any) -> Iterator[Any]:
    """Live lines on a terminal, plain lines elsewhere (a Job's log is read as it grows)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

    from .fleet_progress import LiveLines, PlainLines

    if not console.is_terminal:
        yield PlainLines(console)
        return
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=12),
                  MofNCompleteColumn(), console=console, transient=True) as progress:
        yield LiveLines(progress)


def _is_sqlite(db: str | None) -> bool:
    from gpuaudit.store import default_db_url

    url = db or default_db_url()
    return "://" not in url or url.startswith("sqlite")


def _local(address: str) -> bool:
    """The cluster's head is this machine (an address of ours: we can bind to it)."""
    import socket

    host = address.removeprefix("ray://").rpartition(":")[0].strip("[]")
    if address in ("auto", "local") or host in ("127.0.0.1", "localhost", "::1"):
        return True
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, 0))
    except OSError:
        return False
    return True


@fleet_app.command("run")
def run(
    ctx: typer.Context,
    address: Annotated[str, typer.Option(
        "--address", envvar="RAY_ADDRESS", show_envvar=True, metavar="ADDR",
        help="The Ray cluster: HOST:PORT of its head (GCS), ray://HOST:10001, or auto.")],
    profile: Annotated[FleetProfile, typer.Option(
        help="The bench profile each node runs (quick: about a minute per GPU).")
    ] = FleetProfile.quick,
    nodes: Annotated[int | None, common.integer(
        "--nodes", help="Audit only the first N GPU nodes (by host name).")] = None,
    all_nodes: Annotated[bool, typer.Option("--all", help="Audit every GPU node (the default)."
                                            )] = False,
    timeout: Annotated[float, common.duration(
        "--timeout", help="Per-node time limit (from submission): a node past it is reported "
                          "and cancelled.", lo_s=1.0)] = "30m",
    no_bench: Annotated[bool, typer.Option("--no-bench", help="Inspect only.")] = False,
    collectives: Annotated[bool, typer.Option(
        "--collectives/--no-collectives",
        help="All-reduce across the audited nodes afterwards.")] = True,
    expect: ExpectOpt = None,
    db: common.DbOpt = None,
    json_: common.JsonOpt = False,
) -> None:
    """Audit every GPU node of a Ray cluster (inspect + bench), one task per node.

    Each node's run is saved as it arrives, tagged with the node (its name in the fleet,
    Ray node id, GPU UUIDs and serials); every audited node is judged against what the fleet
    expects. Exit 1 when a node failed, timed out, was lost, has a FAIL finding or is not
    what the fleet expects; 2 on bad input or a store that refused results (kept in files);
    130 on Ctrl-C.
    """
    from gpuaudit.fleet.expect import load_expectation
    from gpuaudit.fleet.runner import run_fleet
    from gpuaudit.model import RunStatus
    from gpuaudit.report.fleet_view import fleet_run_view
    from gpuaudit.store import check_store

    from .fleet_progress import stdout_kept_for_json

    common.refuse_together(ctx, ("nodes", "all_nodes"))
    limit_s = float(timeout)
    console, _ = common.consoles(json_)
    expected = load_expectation(expect) if expect is not None else None
    where = check_store(db)  # before any work: results need somewhere to go
    if _is_sqlite(db) and not _local(address):
        console.print(f"note: results go to {where}, a file on this machine; use --db "
                      "postgresql://… to keep a fleet's audits where everyone can read them",
                      style="dim")
    saver = _Saver(db)
    with _progress(console) as lines, stdout_kept_for_json():
        result = run_fleet(address, profile=profile.value, nodes=nodes, timeout_s=limit_s,
                           bench=not no_bench, collectives=collectives, save=saver,
                           save_fleet=saver.save_fleet, on_progress=lines,
                           on_stage=lines.stage, expect=expected)
    if json_:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    else:
        console.print(fleet_run_view(result))
    if saver.problem:  # bad input: the store given cannot take what it is for
        raise BadInputError(f"{saver.problem}"
                            + (f" ({len(saver.unsaved)} run(s) in all)"
                               if len(saver.unsaved) > 1 else ""))
    if result.status is RunStatus.PARTIAL:
        console.print("interrupted: the nodes' runs saved before Ctrl-C are kept")
        raise typer.Exit(130)
    raise typer.Exit(1 if result.bad() else 0)


def _actions_log(path: Path | None) -> Path:
    """The action log, made writable before anything is done (an action that ran must be
    logged)."""
    import platformdirs

    log = path or Path(platformdirs.user_data_dir("gpuaudit")) / "actions.jsonl"
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.open("a").close()
    except OSError as exc:
        raise BadInputError(f"cannot write the action log {log}: {exc.strerror or exc}"
                            ) from None
    return log


def _act(kinds: list[ActionKind] | None, bad: list[tuple[str, tuple[str, ...]]], *,
         webhook: str | None, apply: bool, log: Path | None, console: Any) -> tuple[Any, ...]:
    """The actions on the bad nodes: planned (dry run) or carried out, logged, shown."""
    from gpuaudit.fleet.actions import carry_out, plan

    if not kinds:
        return ()
    planned = plan(kinds, bad, webhook=webhook)
    done = carry_out(planned, dry_run=not apply, log=_actions_log(log))
    for a in done:
        what = " ".join(a.argv) if a.argv else f"POST {a.url}"
        status = ("dry run (--apply to carry out)" if not a.applied
                  else "ok" if a.ok else f"FAILED: {a.detail}")
        console.print(f"{a.kind.value} {a.node}: {what} — {status}", markup=False,
                      highlight=False, soft_wrap=True)
    return tuple(done)


def _action_input(kinds: list[ActionKind] | None, webhook: str | None) -> None:
    """Action options checked before any work."""
    from gpuaudit.fleet.actions import plan

    plan(kinds or [], [], webhook=webhook)


@fleet_app.command("report")
def report(
    since: Annotated[Any, common.time_point(
        "--since", help="Only nodes audited since: 7d, 24h back, or an ISO time [default: "
                        "every node's latest audit].")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="Every figure's spread, not only "
                                                         "those with nodes outside it.")
                        ] = False,
    expect: ExpectOpt = None,
    action: ActionOpt = None,
    webhook: WebhookOpt = None,
    apply: ApplyOpt = False,
    action_log: ActionLogOpt = None,
    db: common.DbOpt = None,
    json_: common.JsonOpt = False,
) -> None:
    """Judge each node's latest audit against the fleet: per GPU model, each figure's median
    and robust spread (MAD), the GPUs outside it, FAIL findings, GPU count, model and driver
    against what the fleet expects, what changed since a node's previous audit, and the bad
    nodes with reasons; act on them if asked. Exit 1 when a node is bad."""
    from gpuaudit.fleet.expect import load_expectation
    from gpuaudit.report.fleet_view import fleet_report, fleet_report_view
    from gpuaudit.store import Store

    _action_input(action, webhook)
    expected = load_expectation(expect) if expect is not None else None
    console, _ = common.consoles(json_)
    with Store(db, read_only=True) as store:
        result = fleet_report(store, since=since, expect=expected)
    if not json_:
        common.out.print(fleet_report_view(result, show_all=show_all))
    done = _act(action, [(b.hostname, b.reasons) for b in result.bad_nodes], webhook=webhook,
                apply=apply, log=action_log, console=console)
    if json_:
        result = result.model_copy(update={"actions": done})
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    raise typer.Exit(1 if result.bad else 0)


@fleet_app.command("check")
def check(
    expect: Annotated[Path, typer.Option(
        "--expect", dir_okay=False, metavar="FILE",
        help="What this node must have (YAML: gpu_count, gpu_model, driver_version, "
             "cuda_version, nvml).")],
    from_: Annotated[Path | None, typer.Option(
        "--from", dir_okay=False, help="Judge a saved snapshot (`inspect --json`) instead of "
                                       "this machine.")] = None,
    node: Annotated[str | None, typer.Option(
        "--node", envvar="SLURMD_NODENAME", metavar="NAME",
        help="This node's name for the actions [default: the short host name].")] = None,
    action: ActionOpt = None,
    webhook: WebhookOpt = None,
    apply: ApplyOpt = False,
    action_log: ActionLogOpt = None,
    json_: common.JsonOpt = False,
) -> None:
    """Check this node against an expectation file, as a scheduler's health check (Slurm's
    HealthCheckProgram or prolog, a readiness gate): NVML answering, GPU count, model,
    driver and CUDA version, and inspect's FAIL findings. Exit 1 when the node is bad, after
    the actions asked for (e.g. --action slurm-drain --apply)."""
    import socket

    from gpuaudit.fleet.expect import load_expectation, node_check
    from gpuaudit.fleet.records import FleetCheck
    from gpuaudit.inspect import inspect_machine, read_snapshot
    from gpuaudit.model import utc_now

    _action_input(action, webhook)
    expected = load_expectation(expect)
    console, _ = common.consoles(json_)
    name = node or socket.gethostname().split(".")[0]
    run = (inspect_machine(read_snapshot(from_), source=str(from_)) if from_ is not None
           else inspect_machine())
    reasons = node_check(name, run, expected)
    done = _act(action, [(name, reasons)] if reasons else [], webhook=webhook, apply=apply,
                log=action_log, console=console)
    result = FleetCheck(node=name, checked_at=utc_now(), source=run.source or "live",
                        expectation=expected, reasons=reasons, actions=done)
    if json_:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    else:
        console.print(f"{name}: " + ("bad\n  " + "\n  ".join(reasons) if reasons else
                                     f"good (against {expected.source})"),
                      markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(1 if reasons else 0)
