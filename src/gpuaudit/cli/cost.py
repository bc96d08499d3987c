"""`gpuaudit cost job|tco|work|idle`: what a job costs, owning vs renting, price-performance,
idle GPUs' cost. All offline: prices come from the catalog (or the options), figures from the
store."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuaudit import parse
from gpuaudit.cli import common, group
from gpuaudit.cli.common import CatalogOpt, DbOpt, InstanceOpt, JsonOpt, out
from gpuaudit.errors import BadInputError
from gpuaudit.model import Offer
from gpuaudit.model.pricing import PriceKind
from gpuaudit.model.version import SCHEMA_VERSION

if TYPE_CHECKING:
    from gpuaudit.model.lite import Lite as Record

cost_app = group.new_app("What it costs: a job on-demand, reserved or on spot; buy vs rent; "
                          "$ per unit of work; idle GPUs.", no_args_is_help=True)

KindOpt = Annotated[PriceKind, typer.Option("--price-kind", help="Which of the offer's prices.")]
CurrencyOpt = Annotated[str, common.currency(help="The currency of the amounts (ISO 4217).")]

# Prices per hour of one instance, and per GPU-hour: a million a hour is no GPU's price.
MAX_HOURLY = 1e6


def find_offer(instance: str, catalog: Path | None) -> Offer:
    """The catalog's offer for PROVIDER/TYPE[@REGION] (the cheapest region without one)."""
    from gpuaudit.cost.offers import pick_offer

    return pick_offer(common.load_catalog(catalog), instance, str(catalog) if catalog else "")


def _emit(record: Record, kind: str, view: Any, json_: bool) -> None:
    if json_:
        doc = {"schema_version": SCHEMA_VERSION, "kind": kind, **record.model_dump(mode="json")}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        out.print(view(record))


# -- commands ----------------------------------------------------------------------------------


@cost_app.command()
def job(
    instance: InstanceOpt = None,
    catalog: CatalogOpt = None,
    gpu_hours: Annotated[float | None, common.number(
        "--gpu-hours", help="The job's size in GPU-hours.", lo=0, lo_open=True, hi=1e9)
    ] = None,
    wall_hours: Annotated[float | None, common.number(
        "--wall-hours", help="Or its size as hours on --instances instances.", lo=0,
        lo_open=True, hi=1e7)] = None,
    instances: Annotated[int, common.integer(
        "--instances", help="Instances running it at once.", hi=100_000)] = "1",
    interruption_rate: Annotated[float | None, common.fraction(
        "--interruption-rate", help="Spot: probability that an instance is interrupted within "
                                    "--interruption-period (0-1, or a %).")] = None,
    interruption_period: Annotated[float, common.duration(
        "--interruption-period", help="The period --interruption-rate is per (AWS's Spot "
                                      "Advisor: 30d).")] = "1h",
    mtbi: Annotated[float | None, common.duration(
        "--mtbi", help="Spot: mean time between interruptions per instance, e.g. 6h (instead "
                       "of a rate).")] = None,
    checkpoint: Annotated[float, common.duration(
        "--checkpoint", help="Time to write one checkpoint.", hi_s=parse.WEEK)] = "5m",
    restart: Annotated[float, common.duration(
        "--restart", help="Time from an interruption back to work (new capacity, reload).",
        hi_s=parse.WEEK)] = "10m",
    interval: Annotated[float | None, common.duration(
        "--interval", help="Compute time between checkpoints [default: Daly's optimum].")
    ] = None,
    deadline: Annotated[float | None, common.duration(
        "--deadline", help="Must finish within, e.g. 48h.")] = None,
    reserved_utilization: Annotated[float | None, common.fraction(
        "--reserved-utilization", help="Share (0-1) of the reserved term that carries work "
                                       "[default: only this job, which pays the whole term].",
        zero_ok=False)] = None,
    price: Annotated[float | None, common.money(
        "--price-per-hour", "--price",
        help="Without --instance: on-demand price per hour of the instance.",
        hi=MAX_HOURLY)] = None,
    spot_price: Annotated[float | None, common.money(
        "--spot-price", help="… its spot price per hour.", hi=MAX_HOURLY)] = None,
    reserved_1y_price: Annotated[float | None, common.money(
        "--reserved-1y-price", help="… its 1-year reserved price per hour.", hi=MAX_HOURLY)
    ] = None,
    gpus: Annotated[int, common.integer("--gpus", help="… its GPU count.", hi=1024)] = "8",
    currency: Annotated[str, common.currency(help="… the currency of those prices.")] = "USD",
    json_: JsonOpt = False,
) -> None:
    """What a job costs on-demand, reserved and on spot (checkpoints, lost work and restarts
    by Daly's model), and which is cheapest within a deadline."""
    from gpuaudit.cost.pricing import compare_job, make_job, mtbi_hours_from_rate
    from gpuaudit.report.pricing_view import job_view

    offer = _offer_from_options(instance, catalog, price, gpus, currency, spot=spot_price,
                                reserved_1y=reserved_1y_price)
    if interruption_rate is not None and mtbi is not None:
        raise BadInputError("give --interruption-rate or --mtbi, not both")
    mtbi_h = None
    if interruption_rate is not None:
        mtbi_h = mtbi_hours_from_rate(interruption_rate, interruption_period / 3600)
    elif mtbi is not None:
        mtbi_h = mtbi / 3600
    result = compare_job(
        offer, make_job(offer, gpu_hours=gpu_hours, wall_hours=wall_hours, instances=instances),
        mtbi_hours=mtbi_h, checkpoint_s=checkpoint, restart_s=restart, interval_s=interval,
        deadline_hours=deadline / 3600 if deadline else None,
        reserved_utilization=reserved_utilization)
    _emit(result, "cost.job", job_view, json_)


def _offer_from_options(instance: str | None, catalog: Path | None, price: float | None,
                        gpus: int, currency: str, **prices: float | None) -> Offer:
    from gpuaudit.cost.offers import manual_offer

    if instance is not None and price is not None:
        raise BadInputError("give --instance or --price-per-hour, not both")
    if instance is not None:
        return find_offer(instance, catalog)
    if price is None:
        raise BadInputError("give --instance PROVIDER/TYPE[@REGION] or --price-per-hour")
    return manual_offer(price, gpus, currency, spot=prices.get("spot"),
                        reserved_1y=prices.get("reserved_1y"))


@cost_app.command()
def tco(
    ctx: typer.Context,
    capex: Annotated[float, common.money(
        "--capex", "--price-usd", help="What the server(s) cost to buy, all-in, in "
                                       "--currency.")],
    gpus: Annotated[int, common.integer("--gpus", help="GPUs bought.", hi=1_000_000)] = "8",
    years: Annotated[float, common.number(
        "--years", help="Amortization period, years.", lo=0, lo_open=True, hi=50)] = "5",
    rate_pct: Annotated[float, common.percent("--rate-pct", help="Cost of capital, % per year.")
                        ] = "0",
    residual_pct: Annotated[float, common.percent(
        "--residual-pct", help="Resale value at the end, % of capex.")] = "0",
    power_w: Annotated[float | None, common.number(
        "--power-w", help="Average draw of the server, W (measured).", lo=0, lo_open=True,
        hi=1e7)] = None,
    gpu_model: Annotated[str | None, typer.Option(
        help="Without --power-w: take this GPU's TDP from the specs (e.g. h100-sxm).")] = None,
    host_power_w: Annotated[float, common.number(
        "--host-power-w", help="With --gpu-model: the host's draw, W.", hi=1e6)] = "0",
    pue: Annotated[float, common.number(
        "--pue", help="Facility energy / IT energy.", lo=1, hi=5)] = "1.3",
    kwh_price: Annotated[float, common.money(
        "--kwh-price", help="Price per kWh.", zero_ok=True, hi=100)] = "0.10",
    colocation_per_month: Annotated[float, common.money(
        "--colocation-per-month", help="Colocation fee per month.", zero_ok=True)] = "0",
    maintenance_pct: Annotated[float, common.percent(
        "--maintenance-pct", help="Maintenance, % of capex per year.")] = "0",
    utilization: Annotated[float, common.fraction(
        "--utilization", help="Share of GPU-hours used (0-1, or a %).", zero_ok=False)] = "1",
    rent_per_gpu_hour: Annotated[float | None, common.money(
        "--rent-per-gpu-hour", help="Rental price to compare with, per GPU-hour.",
        hi=MAX_HOURLY)] = None,
    instance: InstanceOpt = None,
    catalog: CatalogOpt = None,
    currency: CurrencyOpt = "USD",
    json_: JsonOpt = False,
) -> None:
    """Buy vs rent: a year of owning, $ per used GPU-hour, and the utilization at which owning
    beats the rental price (--rent-per-gpu-hour, or --instance's on-demand price per GPU)."""
    from gpuaudit.cost.tco import server_power_w
    from gpuaudit.cost.tco import tco as compute_tco
    from gpuaudit.report.pricing_view import tco_view

    cur = currency
    common.needs(ctx, "host_power_w", on="--gpu-model", present=gpu_model is not None)
    if power_w is not None and gpu_model is not None:
        raise BadInputError("give --power-w or --gpu-model, not both")
    if power_w is not None:
        watts, source = power_w, "given"
    elif gpu_model is not None:
        from gpuaudit.specs import load_catalog as load_specs

        specs = load_specs()
        spec = specs.get(gpu_model)
        if spec is None:
            raise parse.unknown("--gpu-model", gpu_model, [g.id for g in specs.gpus],
                                "GPU in the specs")
        watts = server_power_w(spec.tdp_w, gpus, host_power_w)
        source = (f"TDP: {gpus} × {spec.tdp_w:g} W"
                  + (f" + host {host_power_w:g} W" if host_power_w else ", GPUs only"))
    else:
        raise BadInputError("give the server's power: --power-w (measured) or --gpu-model "
                            "(its TDP)")
    if rent_per_gpu_hour is not None and instance is not None:
        raise BadInputError("give --rent-per-gpu-hour or --instance, not both")
    rent = rent_per_gpu_hour
    if instance is not None:
        offer = find_offer(instance, catalog)
        if offer.on_demand_price_per_hour is None:
            raise BadInputError(f"{offer.key} has no on-demand price")
        if offer.currency != cur:
            raise BadInputError(f"{offer.key} is priced in {offer.currency}, the amounts in "
                                f"{cur}: give --currency {offer.currency}")
        rent = offer.on_demand_price_per_hour / offer.gpu_count
    result = compute_tco(capex=capex, gpu_count=gpus, amortization_years=years,
                         cost_of_capital_pct=rate_pct, residual_value_pct=residual_pct,
                         power_w=watts, power_source=source, pue=pue, price_per_kwh=kwh_price,
                         colocation_per_month=colocation_per_month,
                         maintenance_pct_per_year=maintenance_pct, utilization=utilization,
                         rental_price_per_gpu_hour=rent, currency=cur)
    _emit(result, "cost.tco", tco_view, json_)


@cost_app.command()
def work(
    instance: Annotated[str, typer.Option(
        "--instance", metavar="PROVIDER/TYPE[@REGION]", help="The instance to price.")],
    run: Annotated[str | None, typer.Option(
        "--run", metavar="RUN", help="A run (stored id or prefix, or its JSON file) whose "
                                     "measurements give the rates [default: datasheet "
                                     "estimates].")] = None,
    catalog: CatalogOpt = None,
    price_kind: KindOpt = PriceKind.ON_DEMAND,
    precision: Annotated[str, typer.Option(help="Matmul precision for $/PFLOP-hour and the "
                                                "token estimate.")] = "bf16",
    params: Annotated[float | None, common.count(
        "--params", help="Model parameters for the training-token estimate, e.g. 7B.",
        hi=1e15)] = None,
    mfu: Annotated[float, common.fraction(
        "--mfu", help="Assumed model FLOPs utilization (0-1, or a %).", zero_ok=False)] = "0.40",
    tokens_per_s: Annotated[float | None, common.number(
        "--tokens-per-s", help="A measured training throughput of the whole instance.", lo=0,
        lo_open=True, hi=1e12)] = None,
    inferences_per_s: Annotated[float | None, common.number(
        "--inferences-per-s", help="A measured inference throughput of the whole instance (at "
                                   "your SLO).", lo=0, lo_open=True, hi=1e12)] = None,
    samples_per_s: Annotated[float | None, common.number(
        "--samples-per-s", help="A measured training throughput in samples/s, for "
                                "--dataset-samples.", lo=0, lo_open=True, hi=1e12)] = None,
    dataset_samples: Annotated[float | None, common.count(
        "--dataset-samples", help="Epoch size in samples.", hi=1e15)] = None,
    dataset_tokens: Annotated[float | None, common.count(
        "--dataset-tokens", help="Epoch size in tokens.", hi=1e16)] = None,
    db: DbOpt = None,
    json_: JsonOpt = False,
) -> None:
    """$ per unit of work on an instance: per PFLOP-hour, per million training tokens, per 1000
    inferences, per epoch; from a measured run, or datasheet estimates (labelled)."""
    from gpuaudit.cost.work import price_performance
    from gpuaudit.report.pricing_view import work_view

    offer = find_offer(instance, catalog)
    stored = None
    if run is not None:
        from gpuaudit.cli.predict import load_run_arg

        stored = load_run_arg(run, db)  # a stored run, or a run's JSON file
    try:
        result = price_performance(
            offer, kind=price_kind, run=stored, precision=precision,
            model_params=params, mfu=mfu, tokens_per_s=tokens_per_s,
            inferences_per_s=inferences_per_s, samples_per_s=samples_per_s,
            dataset_samples=dataset_samples, dataset_tokens=dataset_tokens)
    except ValueError as exc:  # an unknown precision, from the specs
        if isinstance(exc, BadInputError):
            raise
        raise BadInputError(f"--precision {precision!r}: {exc}") from None
    _emit(result, "cost.work", work_view, json_)


@cost_app.command()
def idle(
    ctx: typer.Context,
    since: Annotated[Any, common.time_point(
        "--since", help="From (30m, 24h, 7d back, or an ISO time).")] = "24h",
    until: Annotated[Any, common.time_point("--until", help="To ('now' or an ISO time).")
                     ] = "now",
    price_per_gpu_hour: Annotated[float | None, common.money(
        "--price-per-gpu-hour", "--price-usd-per-gpu-hour",
        help="Price of a GPU-hour in --currency.", hi=MAX_HOURLY)] = None,
    currency: Annotated[str, common.currency(help="With --price-per-gpu-hour.")] = "USD",
    instance: InstanceOpt = None,
    catalog: CatalogOpt = None,
    price_kind: KindOpt = PriceKind.ON_DEMAND,
    threshold_pct: Annotated[float, common.percent(
        "--threshold-pct", help="Idle below this activity (SM activity, else GPU "
                                "utilization), %.", lo=0, lo_open=True)] = "5",
    host: Annotated[str | None, typer.Option(help="Only this host [default: all].")] = None,
    db: DbOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Idle GPU-hours in the monitor's history, and what they cost."""
    from gpuaudit.cost.work import idle_cost
    from gpuaudit.report.pricing_view import idle_view
    from gpuaudit.store import Store

    common.needs(ctx, "currency", on="--price-per-gpu-hour",
                 present=price_per_gpu_hour is not None)
    common.needs(ctx, "catalog", on="--instance", present=instance is not None)
    common.needs(ctx, "price_kind", on="--instance", present=instance is not None)
    given = [x for x in (price_per_gpu_hour, instance) if x is not None]
    if len(given) != 1:
        raise BadInputError("give one price: --price-per-gpu-hour or --instance")
    start, end = since, until
    offer = find_offer(instance, catalog) if instance is not None else None
    price, cur = price_per_gpu_hour, currency
    with Store(db, read_only=True) as store:
        points = store.history(since=start, until=end, hostname=host)
    result = idle_cost(points, since=start, until=end, price_per_gpu_hour=price, offer=offer,
                       kind=price_kind, currency=cur, threshold_pct=threshold_pct)
    _emit(result, "cost.idle", idle_view, json_)
