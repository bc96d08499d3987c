"""The machine commands: `inspect`, `run`, `bench`, `runs`, `show`, `schema` (registered on
the root app by name in cli/app.py, and imported only when one of them runs)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from gpuaudit import parse
from gpuaudit.bench.context import Profile
from gpuaudit.bench.suites import OPT_IN, SUITES
from gpuaudit.cli import common
from gpuaudit.cli import feed as feed_cli
from gpuaudit.cli.common import DbOpt, JsonOpt, err, out, print_json
from gpuaudit.errors import BadInputError
from gpuaudit.model import Run, RunStatus, Severity

ProfileOpt = Annotated[Profile, typer.Option(
    help="quick: ≤ 60 s on one GPU; standard: ≤ 5 min; full: as long as it takes.")]
ExclusiveOpt = Annotated[bool, typer.Option(
    "--exclusive", help="Refuse to start (exit 2) when other processes use the GPUs; without "
                        "it, figures measured beside them are marked contended.")]


def exit_code(run: Run) -> int:
    return 1 if run.verdict is Severity.FAIL else 0


def _check_store(save: bool, db: str | None) -> None:
    """Before the work: a store that cannot take its results is an error now, not after."""
    if save:
        from gpuaudit import interrupt
        from gpuaudit.store import check_store

        # SQLAlchemy logs and swallows what interrupts a connection's close: a Ctrl-C meanwhile
        # waits for the check to end (well under a second) and stops the command after it
        with interrupt.shielded():
            check_store(db)
        interrupt.check()


def inspect(
    json_: JsonOpt = False,
    from_: Annotated[Path | None, typer.Option(
        "--from", help="Analyse a saved snapshot (the JSON of `inspect --json`) instead of "
                       "this machine.", dir_okay=False)] = None,
    save: Annotated[bool, typer.Option("--save/--no-save", help="Keep the run in the store "
                                       "(as run and bench do).")] = True,
    show_pass: Annotated[bool, typer.Option("--all", help="Show passed checks too.")] = False,
    expect_gpus: Annotated[int | None, common.integer(
        "--expect-gpus", help="The number of GPUs the machine should have (what you rented): "
                              "fewer answering is a FAIL.", lo=0, hi=1024)] = None,
    db: DbOpt = None,
) -> None:
    """What is this GPU server, and is it healthy? Inventory, topology, health findings.

    Exit code 1 when a finding is FAIL.
    """
    from gpuaudit.inspect import inspect_machine, read_snapshot

    _check_store(save, db)
    with _nothing_finished():
        if from_ is not None:
            run = inspect_machine(read_snapshot(from_), source=str(from_),
                                  expect_gpus=expect_gpus)
        else:
            run = inspect_machine(expect_gpus=expect_gpus)
    _finish(run, json_=json_, save=save, db=db, show_all=show_pass)


def run(
    json_: JsonOpt = False,
    profile: ProfileOpt = Profile.QUICK,
    no_bench: Annotated[bool, typer.Option("--no-bench", help="Inspect only, no benchmarks.")
                        ] = False,
    data: Annotated[list[str] | None, typer.Option(
        "--data", help="Also test the storage under this directory (where the training data "
                       "lives; a temporary file is written there).")] = None,
    job: Annotated[str | None, typer.Option(metavar="JOB", help=feed_cli.JOB_HELP)] = None,
    save: Annotated[bool, typer.Option("--save/--no-save", help="Keep the run in the store.")
                    ] = True,
    exclusive: ExclusiveOpt = False,
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Every table (the machine, each figure, each finding) instead "
                                "of the one-screen summary; `gpuaudit show RUN` prints them "
                                "later.")] = False,
    db: DbOpt = None,
) -> None:
    """The main job: inspect this machine, run the quick benchmarks, judge both, save the run.

    Prints one screen: the machine, the verdict, the figures that matter against the
    datasheet, the findings with their advice, and where the details are. Exit code 1 when a
    finding is FAIL. Ctrl-C keeps what finished (marked partial) and exits 130.
    """
    from gpuaudit.audit import audit

    _check_store(save, db)
    options = feed_cli.feed_options(paths=data or (), job=job)
    with _nothing_finished(), _progress(err if json_ else out) as bar:
        result = audit(profile=profile, bench=not no_bench, step=bar.step, on_suite=bar.suite,
                       exclusive=exclusive, options=options)
    _finish(result, json_=json_, save=save, db=db, summary=not verbose)


def bench(
    suites: Annotated[list[str] | None, typer.Argument(
        metavar="[SUITE]...", help=f"Suites to run (default: all but {' and '.join(OPT_IN)}): "
        + ", ".join(SUITES)
        + "; `storage PATH...` tests the storage under each PATH")] = None,
    profile: ProfileOpt = Profile.QUICK,
    gpus: Annotated[Any, common.gpus(
        help="GPUs to benchmark, as inspect numbers them: 0,1 [default: all]")] = None,
    sizes: Annotated[Any, typer.Option(
        "--sizes", metavar="MIN:MAX", parser=lambda t: parse.size_range(t, "--sizes"),
        help="Collective sizes in bytes, K/M/G/T binary (nccl-tests' -b/-e), e.g. 1M:8G; at "
             "most 1 TiB (`gpuaudit help input`)")] = None,
    timeout: Annotated[float, common.duration(
        "--timeout", help="Before a hung collective is killed (a bare number is seconds).",
        lo_s=1, hi_s=parse.DAY, bare_unit="s")] = "300s",
    with_native: Annotated[bool, typer.Option(
        "--with-native", help="Also run the reference tools where installed (nccl-tests, "
                              "nvbandwidth, dcgmi diag, fio, iperf3, ib_write_bw, glmark2, "
                              "vkmark) and show "
                              "their figures beside ours.")
    ] = False,
    model: Annotated[list[str] | None, typer.Option(
        "--model", metavar="MODEL",
        help="train/infer: a reference model (gpt-124m, gpt-1.3b, bert-base, resnet50, …) or "
             "your own, pkg.module:build; repeatable")] = None,
    precision: Annotated[list[str] | None, typer.Option(
        "--precision", metavar="PRECISION",
        help="train/infer: only these precisions (fp32 tf32 bf16 fp16 fp8 int8); repeatable")
    ] = None,
    batch_size: Annotated[int | None, common.integer(
        "--batch-size", help="train/infer: batch size instead of the model's default",
        hi=1_000_000)] = None,
    slo_ms: Annotated[float | None, common.number(
        "--slo-ms", help="infer: p99 latency bound for the max-QPS search (default 15 ms)",
        lo=0.01, hi=1e6)] = None,
    target_qps: Annotated[float | None, common.number(
        "--target-qps", help="infer: the load to size a fleet for (default 100,000 QPS)", lo=1,
        hi=1e12)] = None,
    file_size: Annotated[str | None, typer.Option(help=feed_cli.FILE_SIZE_HELP)] = None,
    peer: Annotated[str | None, typer.Option(help=feed_cli.PEER_HELP)] = None,
    serve: Annotated[bool, typer.Option(
        "--serve", help="Be the peer of `bench network --peer`: serve until Ctrl-C.")] = False,
    bind: Annotated[str, typer.Option(help="Address --serve listens on.")] = "127.0.0.1",
    port: Annotated[int | None, common.integer(
        "--port", help="Port of --serve / --peer [default: 5301]", metavar="PORT", lo=0,
        hi=65535)] = None,
    job: Annotated[str | None, typer.Option(metavar="JOB", help=feed_cli.JOB_HELP)] = None,
    op_profile: Annotated[bool, typer.Option(
        "--op-profile", help="train: also record each mode's per-operator profile (FLOPs, "
                             "bytes, kernel times) for `gpuaudit predict`")] = False,
    json_: JsonOpt = False,
    show_all: Annotated[bool, typer.Option("--all", help="Every figure, each collective size "
                                                         "too.")] = False,
    save: Annotated[bool, typer.Option("--save/--no-save", help="Keep the run in the store.")
                    ] = True,
    exclusive: ExclusiveOpt = False,
    db: DbOpt = None,
) -> None:
    """Micro benchmarks: is this server delivering what I pay for, part by part?

    Every figure with its spec, % of spec and spread; skipped ones with the reason. Exit code
    1 when a result check fails. Ctrl-C keeps what was measured (marked partial).
    """
    from gpuaudit.bench.runner import check_suites, run_bench

    words, paths = feed_cli.split_args(suites or [])
    names = check_suites(words)
    if serve:
        if words not in ([], ["network"]):
            raise BadInputError("--serve is for the network suite: `gpuaudit bench network "
                                "--serve`")
        feed_cli.serve(bind, port, json_=json_, console=err if json_ else out)
        raise typer.Exit(0)
    options = _workload_options(model, precision, batch_size, slo_ms, target_qps)
    options.update(feed_cli.feed_options(paths=paths, file_size=file_size, peer=peer, port=port,
                                         job=job))
    if op_profile:
        options["op_profile"] = True
    _check_store(save, db)
    with _nothing_finished(), _progress(err if json_ else out) as bar:
        result = run_bench(names, gpus=gpus, profile=profile, size_range=sizes,
                           timeout_s=timeout, with_native=with_native, step=bar.step,
                           on_suite=bar.suite, options=options, exclusive=exclusive)
    from gpuaudit.workloads.entry import failed_entry_points

    failure = failed_entry_points(model or [], result.measurements)
    try:
        _finish(result, json_=json_, save=save, db=db, show_all=show_all)
    except typer.Exit as done:  # shown and saved; the user's code failing is bad input
        if failure and done.exit_code in (0, 1):
            raise BadInputError(failure) from None
        raise


def _workload_options(models: list[str] | None, precisions: list[str] | None,
                      batch_size: int | None, slo_ms: float | None,
                      target_qps: float | None) -> dict[str, object]:
    """The train/infer options, checked now: a model that cannot be imported is bad input
    before anything runs."""
    from gpuaudit.workloads.models import check_model
    from gpuaudit.workloads.precision import check_precisions

    options: dict[str, object] = {}
    if models:
        for name in models:
            check_model(name)
        options["models"] = list(models)
    if precisions:
        options["precisions"] = check_precisions(precisions)
    for key, value in (("batch_size", batch_size), ("slo_ms", slo_ms),
                       ("target_qps", target_qps)):
        if value is not None:
            options[key] = value
    return options


class _Bar:
    """What the runner reports, shown: a bar of suites done and the step being measured."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task = progress.add_task("starting", total=None)

    def step(self, text: str) -> None:
        self.progress.update(self.task, description=text)

    def suite(self, done: int, total: int) -> None:
        self.progress.update(self.task, completed=done, total=total)


class _Lines:
    """Not on a terminal (a log, a pipe, a CI job): one plain line on stderr per step, with
    the time so far and the suites done (`[   12s] 3/11 matmul bf16: ...`, the fleet's plain
    lines), so that a long run shows where it is and stdout keeps only the result."""

    def __init__(self) -> None:
        from gpuaudit.cli.fleet_progress import PlainLines

        self.lines = PlainLines(err)
        self.done = self.total = 0

    def step(self, text: str) -> None:
        self.lines.stage(f"{self.done}/{self.total} {text}" if self.total else text)

    def suite(self, done: int, total: int) -> None:
        self.done, self.total = done, total


@contextmanager
def _progress(console: Console) -> Iterator[_Bar | _Lines]:
    """Suites done of all, the step being measured and the time so far: a bar on a terminal,
    gone when done; plain lines on stderr elsewhere."""
    if not console.is_terminal:
        yield _Lines()
        return
    with Progress(SpinnerColumn(), BarColumn(bar_width=20), MofNCompleteColumn(),
                  TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        yield _Bar(progress)


@contextmanager
def _nothing_finished() -> Iterator[None]:
    """Ctrl-C before anything finished (the machine not yet read): one line, exit 130."""
    try:
        yield
    except KeyboardInterrupt:
        from gpuaudit import interrupt

        interrupt.clear()
        err.print("interrupted (Ctrl-C) before anything finished: nothing to save")
        raise typer.Exit(130) from None


def _finish(result: Run, *, json_: bool, save: bool, db: str | None,
            show_all: bool = False, summary: bool = False) -> None:
    """Save the run, print it (JSON on stdout, or the terminal view), exit with its code.
    A store that fails now still gets the run printed, and kept in the file its error names.
    A partial run (Ctrl-C) is saved whatever is pressed meanwhile, and one line says so."""
    from gpuaudit import interrupt

    partial = result.status is RunStatus.PARTIAL
    saved = unsaved = None
    with interrupt.shielded():
        if save:  # the store (SQLAlchemy) takes ~0.3 s to import: not for --no-save
            from gpuaudit.store import UnsavedRunError, save_or_keep

            try:
                saved = save_or_keep(result, db)
            except UnsavedRunError as exc:
                unsaved = exc
        console = err if json_ else out
        if json_:
            sys.stdout.write(result.model_dump_json(indent=2) + "\n")
        elif summary:
            from gpuaudit.report.summary import run_summary

            out.print(run_summary(result, run_id=saved, saved=save and unsaved is None,
                                  width=out.size.width))
        else:
            from gpuaudit.report.terminal import run_view

            out.print(run_view(result, show_all=show_all))
        if saved and not (summary and not json_) and not partial:
            console.print(f"saved as run {saved}: `gpuaudit show {saved}` prints it again")
        if partial:
            where = (f"saved as run {saved}" if saved else
                     f"kept in {unsaved.kept_at}" if unsaved is not None and unsaved.kept_at else
                     "not saved (--no-save)" if not save else "not saved")
            console.print(f"interrupted (Ctrl-C): what finished is {where}, marked partial")
        sys.stdout.flush()
    if partial:
        if unsaved is not None:
            common.error_line(str(unsaved))
        raise typer.Exit(130)
    if unsaved is not None:
        raise unsaved
    raise typer.Exit(exit_code(result))


def runs(
    json_: JsonOpt = False,
    limit: Annotated[int, common.integer("--limit", help="How many, newest first.", lo=1,
                                         hi=100_000)] = "20",
    kind: Annotated[str | None, typer.Option(help="Only runs of this kind (inspect, run…).")
                    ] = None,
    db: DbOpt = None,
) -> None:
    """List the stored runs, newest first."""
    from gpuaudit.report.terminal import runs_table
    from gpuaudit.store import Store

    with Store(db, read_only=True) as store:
        summaries = store.list_runs(limit=limit, kind=kind)
    if json_:
        print_json([s.model_dump(mode="json") for s in summaries])
    elif summaries:
        out.print(runs_table(summaries))
    else:
        out.print("no runs stored yet: `gpuaudit run` makes one")


def show(
    run_ref: Annotated[str, typer.Argument(
        metavar="RUN", help="A stored run id (or a unique prefix), or a run's JSON file "
                            "(`gpuaudit run --json` output).")],
    json_: JsonOpt = False,
    show_pass: Annotated[bool, typer.Option("--all", help="Show passed checks and every "
                                                          "figure too.")] = False,
    db: DbOpt = None,
) -> None:
    """Print a stored run (or a run's JSON file), every table. Exit code 1 when it holds a
    FAIL finding."""
    from gpuaudit.cli.report import is_file_ref, load_runs
    from gpuaudit.report.terminal import run_view

    if is_file_ref(run_ref):
        (stored,) = load_runs([run_ref], None)
    else:
        from gpuaudit.store import Store

        with Store(db, read_only=True) as store:
            stored = store.get(run_ref)
    if json_:
        sys.stdout.write(stored.model_dump_json(indent=2) + "\n")
    else:
        status = "" if stored.status is RunStatus.COMPLETE else f", {stored.status.value}"
        out.print(f"run {stored.id} ({stored.kind}{status}, "
                  f"{stored.started_at:%Y-%m-%d %H:%M:%S %Z})")
        out.print(run_view(stored, show_all=show_pass))
    raise typer.Exit(exit_code(stored))


def schema(
    json_: Annotated[bool, typer.Option(
        "--json", help="Accepted for the one grammar: the schema is JSON either way.")
    ] = False,
) -> None:
    """Print the JSON Schema of the documents gpuaudit writes (--json output, stored runs)."""
    from gpuaudit.model import json_schema

    print_json(json_schema())
