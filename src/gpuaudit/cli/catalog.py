"""`gpuaudit catalog list|show|validate|import`: the price catalog on the command line."""

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuaudit.cli import common, group
from gpuaudit.cli.common import JsonOpt, consoles, print_json
from gpuaudit.errors import BadInputError

if TYPE_CHECKING:
    from rich.console import Console

catalog_app = group.new_app(
    "The price catalog: GPU instances with on-demand, spot and reserved prices, each with its "
    "source and date. List, show, validate, import your own (ours or SkyPilot's CSV).",
    no_args_is_help=True)

FileOpt = common.CatalogOpt
LocalZonesOpt = Annotated[bool, typer.Option(
    "--local-zones", help="Keep the AWS Local and Wavelength Zone rows of a SkyPilot vms.csv, "
                          "each as an offer of its own location (us-east-1-atl-2); by default "
                          "they are left out, because they are not the region's prices.")]


def _load(path: Path | None):
    return common.load_catalog(path)


def _refuse_bad_numbers(catalog) -> None:
    """list/show compute with the prices, so a negative price or an unknown currency is bad
    input (exit 2) there; `validate` is the command that reports them as findings. (Zero
    prices never get this far: their rows are skipped as data errors when read.)"""
    for prob in catalog.problems:
        if prob.code == "bad-price":
            raise BadInputError(str(prob))
    known = common.parse.ISO_CURRENCIES
    for i, offer in enumerate(catalog.offers):
        if offer.currency not in known:
            loc = catalog.locations[i]
            where = f"{loc.file}:{loc.line}" if loc.line else loc.file
            raise BadInputError(f"{where}: {offer.key}: unknown currency {offer.currency!r}")


def _warn_problems(catalog, console: "Console | None" = None) -> None:
    """The skipped rows (one line per file) and the rows left out, on stderr (`console`, or
    plain text when the command prints no rich output)."""
    if console is None:
        from gpuaudit.cost.catalog import problem_summary

        lines = [*problem_summary(catalog.problems),
                 *(left.message("--local-zones") for left in catalog.left_out)]
        if lines:
            sys.stderr.write("\n".join(lines) + "\n")
        return
    warn_skipped(catalog.problems, console)
    _note_left_out(catalog.left_out, console)


def warn_skipped(problems, console: "Console") -> None:
    """One line per file for the rows that did not load, however many."""
    from gpuaudit.cost.catalog import problem_summary

    for line in problem_summary(problems):
        console.print(line, style="yellow", markup=False, highlight=False, soft_wrap=True)


def _note_left_out(left_out, console: "Console") -> None:
    for left in left_out:
        console.print(left.message("--local-zones"), markup=False, highlight=False,
                      soft_wrap=True)


@catalog_app.command("list")
def list_(
    gpu: Annotated[str | None, typer.Option(help="Only this GPU (specs id, e.g. h200-sxm).")
                   ] = None,
    provider: Annotated[str | None, typer.Option(help="Only this provider (aws, gcp, ...).")
                        ] = None,
    max_price: Annotated[float | None, common.money(
        "--max-price", help="Only instances whose on-demand price per hour (whole instance, "
                            "in its own currency) is at most this.")] = None,
    sort: Annotated[str, common.choice(
        "--sort", choices=("per-gpu", "price"),
        help="per-gpu: on-demand per GPU-hour; price: per instance-hour.")] = "per-gpu",
    catalog_file: FileOpt = None,
    json_: JsonOpt = False,
) -> None:
    """GPU instances with their prices (currency always shown), cheapest first."""
    from gpuaudit.report.offers_view import offers_doc, offers_table
    from gpuaudit.report.plain import terminal_width

    catalog = _load(catalog_file)
    _refuse_bad_numbers(catalog)
    common.check_known("--gpu", gpu, {o.gpu_model for o in catalog.offers},
                       "GPU in the catalog")
    common.check_known("--provider", provider, {o.provider for o in catalog.offers},
                       "provider in the catalog")
    offers = catalog.select(gpu=gpu, provider=provider, max_price_per_hour=max_price)

    def order(o):
        od = o.on_demand_price_per_hour
        value = None if od is None else (od / o.gpu_count if sort == "per-gpu" else od)
        # Unpriced offers last; then cheapest; ties in a stable, readable order.
        return (value is None, o.currency, value or 0.0, o.key)

    offers.sort(key=order)
    _warn_problems(catalog)
    if json_:
        print_json(offers_doc(offers))
        return
    if not offers:
        sys.stdout.write("no offer matches those filters\n")
        return
    listing = offers_table(offers, title=f"{len(offers)} offers (prices per hour)")
    sys.stdout.write(listing.text(terminal_width()) + "\n")


@catalog_app.command()
def show(
    key: Annotated[str, typer.Argument(metavar="PROVIDER/INSTANCE[@REGION]",
                                       help="e.g. aws/p5.48xlarge@us-east-1")],
    catalog_file: FileOpt = None,
    json_: JsonOpt = False,
) -> None:
    """One instance: every price with its source and date (all its regions if none given)."""
    from gpuaudit.cost.catalog import parse_key
    from gpuaudit.report.cost_view import offer_doc, offer_view

    provider, instance, region = parse_key(key)
    out, _err = consoles(json_)
    catalog = _load(catalog_file)
    _refuse_bad_numbers(catalog)
    found = catalog.find(provider, instance, region)
    if not found:
        common.check_known("provider", provider, {o.provider for o in catalog.offers},
                           "provider in the catalog")
        types = {o.instance_type for o in catalog.offers
                 if o.provider.casefold() == provider.casefold()}
        if instance.casefold() not in {t.casefold() for t in types}:
            raise BadInputError(f"{key}: not in the catalog: no {provider} instance type "
                                f"{instance!r}{common.parse.known_hint(instance, types)}")
        raise BadInputError(f"{key}: no such region (`gpuaudit catalog show "
                            f"{provider}/{instance}` shows its regions)")

    def where(o, loc=None):
        loc = loc or catalog.location(o)
        return None if loc is None else (f"{loc.file}:{loc.line}" if loc.line else loc.file)

    def replaced(o):
        return [(s.offer, where(s.offer, s.location), s.why) for s in catalog.superseded_by(o.key)]

    if json_:
        print_json({"offers": [offer_doc(o, where(o), replaced(o)) for o in found]})
        return
    for i, o in enumerate(found):
        if i:
            out.print()
        out.print(offer_view(o, where(o), replaced(o)))


@catalog_app.command()
def validate(
    file: Annotated[Path | None, typer.Argument(
        help="A catalog file (ours or SkyPilot's) [default: the shipped catalog plus your "
             "imported rows]", dir_okay=False)] = None,
    today: Annotated[Any, typer.Option(
        "--today", metavar="DATE", parser=lambda t: common.parse.day(t, "--today"),
        help="Judge staleness as of this date (YYYY-MM-DD) [default: today].")] = None,
    stale_days: Annotated[int, common.integer(
        "--stale-days", help="Prices older than this many days are stale.", hi=36500)
    ] = "365",
    local_zones: LocalZonesOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Check a catalog: bad rows, spot ≥ on-demand, placeholders, wrong GPU counts, outliers.

    Also stale dates, unknown currencies and GPU models.

    Exit code 1 when an error-level finding exists.
    """
    from gpuaudit.cost.catalog import validate as run_validate
    from gpuaudit.model.finding import Severity
    from gpuaudit.report.cost_view import findings_doc, findings_summary, findings_table

    as_of = today
    out, _err = consoles(json_)
    from gpuaudit.cost.catalog import load_catalog

    catalog = load_catalog(file, include_local_zones=local_zones)
    findings = run_validate(catalog, today=as_of, stale_days=stale_days)
    if json_:
        print_json(findings_doc(findings, len(catalog)))
    else:
        if findings:
            out.print(findings_table(findings))
        out.print(findings_summary(findings, len(catalog)))
    if any(f.severity is Severity.FAIL for f in findings):
        raise typer.Exit(1)


@catalog_app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(help="A catalog file: ours or SkyPilot's vms.csv.",
                                         dir_okay=False)],
    provider: Annotated[str | None, typer.Option(
        help="The provider of a SkyPilot vms.csv whose folder name does not say it.")] = None,
    local_zones: LocalZonesOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Merge a catalog into your user catalog; its rows override shipped rows with the same
    provider/instance/region. Refused (exit 2) for zero or negative prices or an unknown
    currency; other bad rows are skipped and listed."""
    from gpuaudit.cost.catalog import import_catalog

    out, err = consoles(json_)
    result = import_catalog(file, provider=provider, include_local_zones=local_zones)
    warn_skipped(result.skipped, err)
    _note_left_out(result.left_out, err)
    for old in result.kept_older:
        err.print(f"kept {old.by}: the user catalog's row has {old.why}; the imported row "
                  "is older", markup=False, highlight=False, soft_wrap=True)
    if json_:
        print_json({"dest": str(result.dest), "added": list(result.added),
                    "replaced": list(result.replaced),
                    "skipped": [str(p) for p in result.skipped],
                    "kept_older": [s.by for s in result.kept_older],
                    "left_out": [{"file": x.file, "kind": x.kind, "rows": x.rows,
                                  "zones": list(x.zones)} for x in result.left_out],
                    "total": result.total})
        return
    out.print(f"imported {len(result.added) + len(result.replaced)} offers into {result.dest}"
              f" ({len(result.added)} new, {len(result.replaced)} replaced, "
              f"{len(result.skipped)} rows skipped); it now holds {result.total}",
              markup=False, highlight=False, soft_wrap=True)
