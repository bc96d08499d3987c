"""`gpuaudit report` (HTML and Markdown pages of a run) and `gpuaudit compare` (two runs).
Both only read: the store is opened read-only, so a mistyped --db creates nothing."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuaudit.cli import common
from gpuaudit.cli.common import CatalogOpt, DbOpt, InstanceOpt, JsonOpt
from gpuaudit.compare import MAX_THRESHOLD_PCT
from gpuaudit.errors import BadInputError
from gpuaudit.model.pricing import PriceKind

if TYPE_CHECKING:
    from gpuaudit.model import Offer, Run
    from gpuaudit.store import Store

RunArg = Annotated[str, typer.Argument(
    metavar="RUN", help="A stored run id (or a unique prefix), or a run's JSON file "
                        "(`gpuaudit run --json` output).")]
HtmlOpt = Annotated[Path | None, typer.Option(
    "--html", metavar="FILE", help="Write a self-contained HTML page (opens offline).",
    dir_okay=False)]
MdOpt = Annotated[Path | None, typer.Option(
    "--md", metavar="FILE", help="Write Markdown ('-': on stdout).", dir_okay=False)]

# A GPU-hour dearer than this is a typo, not a price.
MAX_GPU_HOUR = 1e5


def is_file_ref(ref: str) -> bool:
    """Whether RUN names a file (a path, a .json name, or anything there is: a FIFO or a
    folder of that name is then refused by the reader) rather than a stored run id."""
    return (ref.endswith((".json", ".json.gz")) or "/" in ref
            or os.path.lexists(Path(ref).expanduser()))


def read_run_file(ref: str) -> Run:
    from gpuaudit.model.schema import read_run

    return read_run(Path(ref).expanduser())


def load_runs(refs: list[str], store: Store | None) -> list[Run]:
    """The runs named by id/prefix (from `store`) or by JSON file. Only reads."""
    runs = []
    for ref in refs:
        if is_file_ref(ref):
            runs.append(read_run_file(ref))
        else:
            assert store is not None, "a stored run needs the store"
            runs.append(store.get(ref))
    return runs


def _open_store(db: str | None, needed: bool) -> Store | None:
    """The store, read-only (a mistyped path is an error, never a new empty store), when a
    run or its telemetry is to come from it."""
    if not needed:
        return None
    from gpuaudit.store import Store

    return Store(db, read_only=True)


def _price_offer(ctx: typer.Context, instance: str | None, catalog: Path | None,
                 price_per_gpu_hour: float | None) -> Offer | None:
    """The offer named by --instance (looked up before any run is read), else None."""
    common.refuse_together(ctx, ("instance", "price_per_gpu_hour"))
    common.needs(ctx, "catalog", on="--instance", present=instance is not None)
    common.needs(ctx, "price_kind", on="--instance", present=instance is not None)
    common.needs(ctx, "currency", on="--price-per-gpu-hour",
                 present=price_per_gpu_hour is not None)
    if instance is None:
        return None
    from gpuaudit.cost.offers import pick_offer

    return pick_offer(common.load_catalog(catalog), instance, str(catalog) if catalog else "")


def _emit(path: Path, text: str) -> str:
    from gpuaudit.report.html import write_text

    if str(path) == "-":
        sys.stdout.write(text)
        return "-"
    write_text(path, text)
    return str(path)


def _check_outputs(html: Path | None, md: Path | None, json_: bool) -> None:
    """Before any work: an output is named, stdout has one use, and each file can be
    written (its folder exists and takes files)."""
    if html is None and md is None:
        raise BadInputError("say where to write the report: --html FILE and/or --md FILE")
    if (str(html) == "-" and (str(md) == "-" or json_)) or (str(md) == "-" and json_):
        raise BadInputError("only one of --html -, --md - and --json can use stdout")
    for path, option in ((html, "--html"), (md, "--md")):
        if path is not None and str(path) != "-":
            common.writable(path.expanduser(), option)


def report_cmd(
    ctx: typer.Context,
    run_ref: RunArg,
    html: HtmlOpt = None,
    md: MdOpt = None,
    instance: InstanceOpt = None,
    catalog: CatalogOpt = None,
    price_kind: Annotated[PriceKind, typer.Option(
        "--price-kind", help="With --instance: which of the offer's prices.")
    ] = PriceKind.ON_DEMAND,
    price_per_gpu_hour: Annotated[float | None, common.money(
        "--price-per-gpu-hour", help="Or: the price of one GPU-hour (× the run's GPUs).",
        hi=MAX_GPU_HOUR)] = None,
    currency: Annotated[str, common.currency(help="The currency of --price-per-gpu-hour.")
                        ] = "USD",
    doctor: Annotated[Path | None, typer.Option(
        "--doctor", metavar="FILE", help="Add a diagnosis (`gpuaudit doctor --json-file FILE`).",
        dir_okay=False)] = None,
    telemetry: Annotated[bool, typer.Option(
        "--telemetry/--no-telemetry", help="Show the telemetry the monitor stored during "
                                           "the run.")] = True,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """A page people look at: machine, findings, benchmarks with % of spec, roofline,
    transfers, collectives, workloads, telemetry, cost and a diagnosis where there are some.

    The HTML file is self-contained (charts included) and opens offline. Reading only: the
    store is not changed.
    """
    from gpuaudit.cost.offers import run_machine_offer
    from gpuaudit.cost.work import price_performance
    from gpuaudit.model import SCHEMA_VERSION
    from gpuaudit.report.html import (
        load_diagnosis,
        render_run_html,
        render_run_markdown,
        run_telemetry,
    )

    _check_outputs(html, md, json_)
    offer = _price_offer(ctx, instance, catalog, price_per_gpu_hour)
    diagnosis = load_diagnosis(doctor) if doctor is not None else None
    from_store = not is_file_ref(run_ref)
    # A run read from a file has telemetry only in a store named for it.
    look = telemetry and (from_store or db is not None)
    store = _open_store(db, from_store or look)
    try:
        (run,) = load_runs([run_ref], store)
        points = run_telemetry(store, run) if look and store is not None else []
    finally:
        if store is not None:
            store.close()
    if price_per_gpu_hour is not None:
        offer = run_machine_offer(run, price_per_gpu_hour, currency)
    cost = price_performance(offer, kind=price_kind, run=run) if offer is not None else None
    written = []
    if html is not None:
        written.append(_emit(html, render_run_html(run, telemetry=points, cost=cost,
                                                   diagnosis=diagnosis,
                                                   telemetry_checked=look)))
    if md is not None:
        written.append(_emit(md, render_run_markdown(run, telemetry=points, cost=cost,
                                                       diagnosis=diagnosis)))
    if json_:
        common.print_json({"schema_version": SCHEMA_VERSION, "kind": "report", "run": run.id,
                           "files": written, "telemetry_points": len(points)})
    else:
        for path in written:
            if path != "-":
                common.err.print(f"wrote {path} (run {run.id})", markup=False)


def compare_cmd(
    a_ref: Annotated[str, typer.Argument(metavar="A", help="The baseline run (id, prefix or "
                                                           "JSON file).")],
    b_ref: Annotated[str, typer.Argument(metavar="B", help="The run to judge against it.")],
    threshold: Annotated[float, common.percent(
        "--threshold", help="Exit 1 when a figure got worse by more than this (and more than "
                            "its noise).", hi=MAX_THRESHOLD_PCT)] = "5%",
    html: HtmlOpt = None,
    md: MdOpt = None,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """What changed from run A to run B: each figure against its noise, regressions and
    improvements ranked, findings that appeared or cleared, machine and software differences.

    Exit code 1 on a regression beyond --threshold (for CI and fleet scripts), else 0.
    """
    from gpuaudit.compare import compare_runs
    from gpuaudit.report.compare_view import compare_view
    from gpuaudit.report.html import render_compare_html, render_compare_markdown

    if html is not None or md is not None:
        _check_outputs(html, md, json_)
    refs = [a_ref, b_ref]
    store = _open_store(db, any(not is_file_ref(r) for r in refs))
    try:
        a, b = load_runs(refs, store)
    finally:
        if store is not None:
            store.close()
    comparison = compare_runs(a, b, threshold)
    written = []
    if html is not None:
        written.append(_emit(html, render_compare_html(comparison)))
    if md is not None:
        written.append(_emit(md, render_compare_markdown(comparison)))
    for path in written:
        if path != "-":
            common.err.print(f"wrote {path} (compare {a.id} → {b.id})", markup=False)
    if json_:
        doc = comparison.model_dump(mode="json")
        doc["regressions"] = [f.key for f in comparison.regressions]
        doc["improvements"] = [f.key for f in comparison.improvements]
        doc["failed"] = comparison.failed
        common.print_json(doc)
    elif str(html) != "-" and str(md) != "-":
        common.out.print(compare_view(comparison))
    raise typer.Exit(1 if comparison.failed else 0)
