"""`gpuaudit report` (HTML and Markdown pages of a run) and `gpuaudit compare` (two runs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuaudit.errors import BadInputError

if TYPE_CHECKING:
    from gpuaudit.model import Run
    from gpuaudit.model.history import HistoryPoint
    from gpuaudit.model.pricing import PricePerformance

RunArg = Annotated[str, typer.Argument(
    metavar="RUN", help="A stored run id (or a unique prefix), or a run's JSON file "
                        "(`gpuaudit run --json` output).")]
HtmlOpt = Annotated[Path | None, typer.Option(
    "--html", metavar="FILE", help="Write a self-contained HTML page (opens offline).",
    dir_okay=False)]
MdOpt = Annotated[Path | None, typer.Option(
    "--md", metavar="FILE", help="Write Markdown ('-': on stdout).", dir_okay=False)]
DbOpt = Annotated[str | None, typer.Option(
    "--db", envvar="GPUAUDIT_DB", show_envvar=True,
    help="Store URL: a SQLite path or sqlite:///…, postgresql://… "
         "[default: a SQLite file in the user data directory]")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]


def _is_file_ref(ref: str) -> bool:
    return ref.endswith(".json") or "/" in ref or Path(ref).is_file()


def load_runs(refs: list[str], db: str | None) -> tuple[list[Run], bool]:
    """The runs named by id/prefix (from the store) or by JSON file; and whether the store
    was read (so its telemetry can be). Only reads: nothing is saved or changed."""
    from gpuaudit.model import load_run

    runs: list[Run | None] = [None] * len(refs)
    stored = [i for i, r in enumerate(refs) if not _is_file_ref(r)]
    for i, ref in enumerate(refs):
        if i in stored:
            continue
        path = Path(ref).expanduser()
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            raise BadInputError(f"no run file {ref}") from None
        except OSError as exc:
            raise BadInputError(f"cannot read {ref}: {exc.strerror or exc}") from None
        runs[i] = load_run(text, origin=str(ref))
    if stored:
        from gpuaudit.store import Store

        with Store(db) as store:
            for i in stored:
                runs[i] = store.get(refs[i])
    return [r for r in runs if r is not None], bool(stored)


def run_telemetry(run: Run, db: str | None) -> list[HistoryPoint]:
    """What the monitor kept for this run's host between its start and end."""
    from gpuaudit.report.html import run_telemetry as from_store
    from gpuaudit.store import Store

    with Store(db) as store:
        return from_store(store, run)


def _price(run: Run, instance: str | None, catalog: Path | None, price_kind: str,
           price_per_gpu_hour: float | None, currency: str) -> PricePerformance | None:
    if instance is None and price_per_gpu_hour is None:
        return None
    from gpuaudit.cli.cost import _currency, _manual_offer, find_offer
    from gpuaudit.cost.work import price_performance
    from gpuaudit.model.pricing import PriceKind

    try:
        kind = PriceKind(price_kind)
    except ValueError:
        choices = ", ".join(k.value for k in PriceKind)
        raise BadInputError(f"--price-kind {price_kind!r}: choose {choices}") from None
    if instance is not None:
        offer = find_offer(instance, catalog)
    else:
        gpus = len(run.machine.gpus) if run.machine and run.machine.gpus else 1
        offer = _manual_offer(price_per_gpu_hour * gpus, gpus,  # type: ignore[operator]
                              _currency(currency))
        if run.machine and run.machine.gpus:
            from gpuaudit.specs import lookup

            g = run.machine.gpus[0]
            spec = lookup(nvml_name=g.name, pci_device_id=g.pci_device_id)
            offer = offer.model_copy(update={"gpu_model": spec.id if spec else g.name})
    return price_performance(offer, kind=kind, run=run)


def _emit(path: Path, text: str) -> str:
    from gpuaudit.report.html import write_text

    if str(path) == "-":
        sys.stdout.write(text)
        return "-"
    write_text(path, text)
    return str(path)


def _check_outputs(html: Path | None, md: Path | None, json_: bool) -> None:
    from gpuaudit.report.html import check_writable

    if html is None and md is None:
        raise BadInputError("say where to write the report: --html FILE and/or --md FILE")
    if (str(html) == "-" and (str(md) == "-" or json_)) or (str(md) == "-" and json_):
        raise BadInputError("only one of --html -, --md - and --json can use stdout")
    for p in (html, md):
        if p is not None and str(p) != "-":
            check_writable(p)


def report_cmd(
    run_ref: RunArg,
    html: HtmlOpt = None,
    md: MdOpt = None,
    instance: Annotated[str | None, typer.Option(
        "--instance", metavar="PROVIDER/TYPE[@REGION]",
        help="Price the run's work at this catalog instance (cost per unit of work).")] = None,
    catalog: Annotated[Path | None, typer.Option(
        help="Price catalog file for --instance.", dir_okay=False)] = None,
    price_kind: Annotated[str, typer.Option(help="on_demand, spot, reserved_1y, reserved_3y."
                                            )] = "on_demand",
    price_per_gpu_hour: Annotated[float | None, typer.Option(
        min=0, help="Or: the price of one GPU-hour (× the run's GPUs).")] = None,
    currency: Annotated[str, typer.Option(help="Currency of --price-per-gpu-hour.")] = "USD",
    doctor: Annotated[Path | None, typer.Option(
        "--doctor", metavar="FILE", help="Add a diagnosis (`gpuaudit doctor --save FILE`).",
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
    from gpuaudit.model import SCHEMA_VERSION
    from gpuaudit.report.html import load_diagnosis, render_run_html, render_run_markdown

    _check_outputs(html, md, json_)
    diagnosis = load_diagnosis(doctor) if doctor is not None else None
    (run,), from_store = load_runs([run_ref], db)
    points = run_telemetry(run, db) if telemetry and (from_store or db) else []
    cost = _price(run, instance, catalog, price_kind, price_per_gpu_hour, currency)
    written = []
    if html is not None:
        written.append(_emit(html, render_run_html(run, telemetry=points, cost=cost,
                                                   diagnosis=diagnosis,
                                                   telemetry_checked=telemetry
                                                   and bool(from_store or db))))
    if md is not None:
        written.append(_emit(md, render_run_markdown(run, telemetry=points, cost=cost,
                                                       diagnosis=diagnosis)))
    if json_:
        sys.stdout.write(json.dumps({"schema_version": SCHEMA_VERSION, "kind": "report",
                                     "run": run.id, "files": written,
                                     "telemetry_points": len(points)}, indent=2) + "\n")
    else:
        for path in written:
            if path != "-":
                sys.stderr.write(f"wrote {path} (run {run.id})\n")


def parse_threshold(text: str) -> float:
    from gpuaudit.units import parse_percent

    try:
        return parse_percent(text)
    except ValueError:
        raise BadInputError(f"--threshold {text!r}: expected a percentage like 5%") from None


def compare_cmd(
    a_ref: Annotated[str, typer.Argument(metavar="A", help="The baseline run (id, prefix or "
                                                           "JSON file).")],
    b_ref: Annotated[str, typer.Argument(metavar="B", help="The run to judge against it.")],
    threshold: Annotated[str, typer.Option(
        help="Exit 1 when a figure got worse by more than this (and more than its noise).")
    ] = "5%",
    html: HtmlOpt = None,
    md: MdOpt = None,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """What changed from run A to run B: each figure against its noise, regressions and
    improvements ranked, findings that appeared or cleared, machine and software differences.

    Exit code 1 on a regression beyond --threshold (for CI and fleet scripts), else 0.
    """
    from rich.console import Console

    from gpuaudit.compare import compare_runs
    from gpuaudit.report.compare_view import compare_view
    from gpuaudit.report.html import render_compare_html, render_compare_markdown

    threshold_pct = parse_threshold(threshold)
    if html is not None or md is not None:
        _check_outputs(html, md, json_)
    (a, b), _ = load_runs([a_ref, b_ref], db)
    comparison = compare_runs(a, b, threshold_pct)
    if html is not None:
        _emit(html, render_compare_html(comparison))
    if md is not None:
        _emit(md, render_compare_markdown(comparison))
    if json_:
        doc = comparison.model_dump(mode="json")
        doc["regressions"] = [f.key for f in comparison.regressions]
        doc["improvements"] = [f.key for f in comparison.improvements]
        doc["failed"] = comparison.failed
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    elif str(html) != "-" and str(md) != "-":
        Console(highlight=False).print(compare_view(comparison))
    raise typer.Exit(1 if comparison.failed else 0)
