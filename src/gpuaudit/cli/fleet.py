"""`gpuaudit fleet run|report`: audit the GPU nodes of a Ray cluster, judge them as a fleet."""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Any

import typer

from gpuaudit.cli import common
from gpuaudit.errors import BadInputError, GpuauditError

fleet_app = common.new_app("Audit every GPU node of a Ray cluster into one store, and find the "
                           "bad nodes.", no_args_is_help=True)

# Above this many nodes the progress shows counts, not a line per node.
MAX_NODE_LINES = 24


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


class _NodeLines:
    """Progress: a line per node (a bar of nodes done for big fleets)."""

    def __init__(self, progress: Any) -> None:
        self.progress = progress
        self.tasks: dict[str, Any] = {}
        self.total = self.progress.add_task("nodes", total=None)
        self.done = 0
        self.count = 0

    def stage(self, text: str) -> None:
        self.progress.update(self.total, description=text)

    def __call__(self, p: Any) -> None:
        key = p.node.node_id
        finished = p.state not in ("waiting", "running")
        if key not in self.tasks:
            self.count += 1
            self.progress.update(self.total, total=self.count)
            self.tasks[key] = (self.progress.add_task("", total=None)
                               if self.count <= MAX_NODE_LINES else None)
        if finished:
            self.done += 1
            self.progress.update(self.total, completed=self.done)
        task = self.tasks[key]
        if task is not None:
            from rich.markup import escape

            style = "" if p.state in ("waiting", "running", "done") else "[red]"
            self.progress.update(task, description=style + escape(
                f"{p.hostname}: {p.state} {p.text}"), completed=1 if finished else 0, total=1)


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
    db: common.DbOpt = None,
    json_: common.JsonOpt = False,
) -> None:
    """Audit every GPU node of a Ray cluster (inspect + bench), one task per node.

    Each node's run is saved as it arrives, tagged with the node (host name, Ray node id,
    GPU UUIDs and serials). Exit 1 when a node failed, timed out, was lost or has a FAIL
    finding; 2 on bad input or a store that refused results (kept in files); 130 on Ctrl-C.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

    from gpuaudit.fleet.runner import run_fleet
    from gpuaudit.model import RunStatus, Severity
    from gpuaudit.report.fleet_view import fleet_run_view
    from gpuaudit.store import check_store

    common.refuse_together(ctx, ("nodes", "all_nodes"))
    limit_s = float(timeout)
    console, _ = common.consoles(json_)
    where = check_store(db)  # before any work: results need somewhere to go
    if _is_sqlite(db) and not _local(address):
        console.print(f"note: results go to {where}, a file on this machine; use --db "
                      "postgresql://… to keep a fleet's audits where everyone can read them",
                      style="dim")
    saver = _Saver(db)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=12),
                  MofNCompleteColumn(), console=console, transient=True) as progress:
        lines = _NodeLines(progress)
        result = run_fleet(address, profile=profile.value, nodes=nodes, timeout_s=limit_s,
                           bench=not no_bench, collectives=collectives, save=saver,
                           save_fleet=saver.save_fleet, on_progress=lines,
                           on_stage=lines.stage)
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
    bad = result.failed() or any(n.verdict is Severity.FAIL for n in result.nodes)
    raise typer.Exit(1 if bad else 0)


@fleet_app.command("report")
def report(
    since: Annotated[Any, common.time_point(
        "--since", help="Only nodes audited since: 7d, 24h back, or an ISO time [default: "
                        "every node's latest audit].")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="Every figure's spread, not only "
                                                         "those with nodes outside it.")
                        ] = False,
    db: common.DbOpt = None,
    json_: common.JsonOpt = False,
) -> None:
    """Judge each node's latest audit against the fleet: per GPU model, each figure's median
    and robust spread (MAD), the GPUs outside it, FAIL findings, what changed since a node's
    previous audit, and the bad nodes with reasons. Exit 1 when a node is bad."""
    from gpuaudit.report.fleet_view import fleet_report, fleet_report_view
    from gpuaudit.store import Store

    with Store(db, read_only=True) as store:
        result = fleet_report(store, since=since)
    if json_:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    else:
        common.out.print(fleet_report_view(result, show_all=show_all))
    raise typer.Exit(1 if result.bad else 0)
