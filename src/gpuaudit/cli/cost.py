"""`gpuaudit cost job|tco|work|idle`: what a job costs, owning vs renting, price-performance,
idle GPUs' cost. All offline: prices come from the catalog (or the options), figures from the
store."""

from __future__ import annotations

import json
import math
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from gpuaudit.errors import BadInputError
from gpuaudit.model import Billing, Offer
from gpuaudit.model.base import SCHEMA_VERSION, Record
from gpuaudit.model.pricing import PriceKind

cost_app = typer.Typer(help="What it costs: a job on-demand, reserved or on spot; buy vs rent; "
                            "$ per unit of work; idle GPUs.", no_args_is_help=True,
                       context_settings={"help_option_names": ["-h", "--help"]})

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]
InstanceOpt = Annotated[str | None, typer.Option(
    "--instance", metavar="PROVIDER/TYPE[@REGION]",
    help="An instance from the price catalog, e.g. aws/p5.48xlarge@us-east-1 (without a "
         "region: the cheapest region).")]
CatalogOpt = Annotated[Path | None, typer.Option(
    "--catalog", help="Read prices from this catalog file (ours or SkyPilot's) instead of the "
                      "shipped and imported ones.", dir_okay=False)]
DbOpt = Annotated[str | None, typer.Option(
    "--db", envvar="GPUAUDIT_DB", show_envvar=True,
    help="Store URL: a SQLite path or sqlite:///…, postgresql://… "
         "[default: a SQLite file in the user data directory]")]
KindOpt = Annotated[PriceKind, typer.Option("--price-kind", help="Which of the offer's prices.")]


# -- parsing -----------------------------------------------------------------------------------

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(s|m|h|d|w)")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def seconds(option: str, text: str) -> float:
    """'90s', '5m', '1.5h', '2d', '1h30m' → seconds (> 0)."""
    s = text.strip().lower()
    parts = _DURATION_PART.findall(s)
    if not parts or "".join(n + u for n, u in parts) != s:
        raise BadInputError(f"{option} {text!r}: expected a duration like 90s, 5m, 1.5h, 2d")
    value = sum(float(n) * _UNIT_S[u] for n, u in parts)
    if value <= 0:
        raise BadInputError(f"{option} {text!r}: must be more than zero")
    return value


def count(option: str, text: str) -> float:
    """'7e9', '7B', '1.3M', '500k' → a number (> 0)."""
    s = text.strip().lower().replace("_", "").replace(",", "")
    mult = _SUFFIX.get(s[-1:], 1.0)
    try:
        value = float(s[:-1] if mult != 1.0 else s) * mult
    except ValueError:
        raise BadInputError(f"{option} {text!r}: expected a number like 7e9, 7B, 1.3M"
                            ) from None
    if not (math.isfinite(value) and value > 0):
        raise BadInputError(f"{option} {text!r}: must be more than zero")
    return value


def find_offer(instance: str, catalog: Path | None) -> Offer:
    """The catalog's offer for PROVIDER/TYPE[@REGION]; without a region, the region with the
    lowest on-demand price (then spot), as `sky show-gpus` shows the cheapest region."""
    from gpuaudit.cost.catalog import load_catalog, parse_key

    provider, instance_type, region = parse_key(instance)
    cat = load_catalog(catalog)
    found = cat.find(provider, instance_type, region)
    if not found:
        raise BadInputError(f"no offer {instance!r} in the price catalog"
                            + (f" {catalog}" if catalog else "")
                            + ": `gpuaudit catalog list` shows them")

    def rank(o: Offer) -> tuple[float, float]:
        inf = math.inf
        return (o.on_demand_price_per_hour or inf, o.spot_price_per_hour or inf)

    return min(found, key=rank)


def _manual_offer(price: float, gpus: int, currency: str, *, spot: float | None = None,
                  reserved_1y: float | None = None, reserved_3y: float | None = None,
                  billing: Billing = Billing.SECOND, minimum_s: float = 0.0) -> Offer:
    return Offer(provider="user", instance_type=f"{gpus}-gpu", gpu_model="unknown",
                 gpu_count=gpus, currency=currency, on_demand_price_per_hour=price,
                 spot_price_per_hour=spot, reserved_1y_price_per_hour=reserved_1y,
                 reserved_3y_price_per_hour=reserved_3y, billing=billing,
                 billing_minimum_s=minimum_s, source="user (command-line options)",
                 price_date=datetime.now(timezone.utc).date())


def _currency(text: str) -> str:
    code = text.strip().upper()
    if not re.fullmatch(r"[A-Z]{3}", code):
        raise BadInputError(f"--currency {text!r}: expected a 3-letter ISO 4217 code like USD")
    return code


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
    gpu_hours: Annotated[float | None, typer.Option(help="The job's size in GPU-hours.")
                         ] = None,
    wall_hours: Annotated[float | None, typer.Option(
        help="Or its size as hours on --instances instances.")] = None,
    instances: Annotated[int, typer.Option(min=1, help="Instances running it at once.")] = 1,
    interruption_rate: Annotated[float | None, typer.Option(
        help="Spot: probability that an instance is interrupted within --interruption-period"
             " (0-1).")] = None,
    interruption_period: Annotated[str, typer.Option(
        help="The period --interruption-rate is per (AWS's Spot Advisor: 30d).")] = "1h",
    mtbi: Annotated[str | None, typer.Option(
        help="Spot: mean time between interruptions per instance, e.g. 6h (instead of a "
             "rate).")] = None,
    checkpoint: Annotated[str, typer.Option(help="Time to write one checkpoint.")] = "5m",
    restart: Annotated[str, typer.Option(
        help="Time from an interruption back to work (new capacity, reload).")] = "10m",
    interval: Annotated[str | None, typer.Option(
        help="Compute time between checkpoints [default: Daly's optimum].")] = None,
    deadline: Annotated[str | None, typer.Option(help="Must finish within, e.g. 48h.")] = None,
    reserved_utilization: Annotated[float | None, typer.Option(
        help="Share (0-1) of the reserved term that carries work [default: only this job, "
             "which pays the whole term].")] = None,
    price: Annotated[float | None, typer.Option(
        help="Without --instance: on-demand price per hour of the instance.")] = None,
    spot_price: Annotated[float | None, typer.Option(help="… its spot price per hour.")] = None,
    reserved_1y_price: Annotated[float | None, typer.Option(
        help="… its 1-year reserved price per hour.")] = None,
    gpus: Annotated[int, typer.Option(min=1, help="… its GPU count.")] = 8,
    currency: Annotated[str, typer.Option(help="… the currency of those prices.")] = "USD",
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
        mtbi_h = mtbi_hours_from_rate(interruption_rate,
                                      seconds("--interruption-period", interruption_period)
                                      / 3600)
    elif mtbi is not None:
        mtbi_h = seconds("--mtbi", mtbi) / 3600
    result = compare_job(
        offer, make_job(offer, gpu_hours=gpu_hours, wall_hours=wall_hours, instances=instances),
        mtbi_hours=mtbi_h, checkpoint_s=seconds("--checkpoint", checkpoint),
        restart_s=seconds("--restart", restart),
        interval_s=seconds("--interval", interval) if interval else None,
        deadline_hours=seconds("--deadline", deadline) / 3600 if deadline else None,
        reserved_utilization=reserved_utilization)
    _emit(result, "cost.job", job_view, json_)


def _offer_from_options(instance: str | None, catalog: Path | None, price: float | None,
                        gpus: int, currency: str, **prices: float | None) -> Offer:
    if instance is not None and price is not None:
        raise BadInputError("give --instance or --price, not both")
    if instance is not None:
        return find_offer(instance, catalog)
    if price is None:
        raise BadInputError("give --instance PROVIDER/TYPE[@REGION] or --price")
    for name, value in (("--price", price), *((f"--{k.replace('_', '-')}-price", v)
                                              for k, v in prices.items())):
        if value is not None and not value > 0:
            raise BadInputError(f"{name} must be more than zero, not {value:g}")
    return _manual_offer(price, gpus, _currency(currency), spot=prices.get("spot"),
                         reserved_1y=prices.get("reserved_1y"))


@cost_app.command()
def tco(
    capex: Annotated[float, typer.Option(
        "--capex", "--price-usd", help="What the server(s) cost to buy, all-in (--price-usd: "
                                       "in USD).")],
    gpus: Annotated[int, typer.Option(min=1, help="GPUs bought.")] = 8,
    years: Annotated[float, typer.Option(help="Amortization period, years.")] = 5.0,
    rate_pct: Annotated[float, typer.Option(help="Cost of capital, % per year.")] = 0.0,
    residual_pct: Annotated[float, typer.Option(help="Resale value at the end, % of capex.")
                            ] = 0.0,
    power_w: Annotated[float | None, typer.Option(
        help="Average draw of the server, W (measured).")] = None,
    gpu_model: Annotated[str | None, typer.Option(
        help="Without --power-w: take this GPU's TDP from the specs (e.g. h100-sxm).")] = None,
    host_power_w: Annotated[float, typer.Option(help="With --gpu-model: the host's draw, W.")
                            ] = 0.0,
    pue: Annotated[float, typer.Option(help="Facility energy / IT energy.")] = 1.3,
    kwh_price: Annotated[float, typer.Option(help="Price per kWh.")] = 0.10,
    colocation_per_month: Annotated[float, typer.Option(help="Colocation fee per month.")
                                    ] = 0.0,
    maintenance_pct: Annotated[float, typer.Option(help="Maintenance, % of capex per year.")
                               ] = 0.0,
    utilization: Annotated[float, typer.Option(help="Share of GPU-hours used (0-1).")] = 1.0,
    rent_per_gpu_hour: Annotated[float | None, typer.Option(
        help="Rental price to compare with, per GPU-hour.")] = None,
    instance: InstanceOpt = None,
    catalog: CatalogOpt = None,
    currency: Annotated[str, typer.Option(help="The currency of the amounts.")] = "USD",
    json_: JsonOpt = False,
) -> None:
    """Buy vs rent: a year of owning, $ per used GPU-hour, and the utilization at which owning
    beats the rental price (--rent-per-gpu-hour, or --instance's on-demand price per GPU)."""
    from gpuaudit.cost.tco import server_power_w
    from gpuaudit.cost.tco import tco as compute_tco
    from gpuaudit.report.pricing_view import tco_view

    cur = _currency(currency)
    if power_w is not None and gpu_model is not None:
        raise BadInputError("give --power-w or --gpu-model, not both")
    if power_w is not None:
        watts, source = power_w, "given"
    elif gpu_model is not None:
        from gpuaudit.specs import load_catalog as load_specs

        spec = load_specs().get(gpu_model)
        if spec is None:
            raise BadInputError(f"--gpu-model {gpu_model!r}: not in the GPU specs")
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
        "--run", help="A stored run (id or prefix) whose measurements give the rates "
                      "[default: datasheet estimates].")] = None,
    catalog: CatalogOpt = None,
    price_kind: KindOpt = PriceKind.ON_DEMAND,
    precision: Annotated[str, typer.Option(help="Matmul precision for $/PFLOP-hour and the "
                                                "token estimate.")] = "bf16",
    params: Annotated[str | None, typer.Option(
        help="Model parameters for the training-token estimate, e.g. 7B.")] = None,
    mfu: Annotated[float, typer.Option(help="Assumed model FLOPs utilization (0-1).")] = 0.40,
    tokens_per_s: Annotated[float | None, typer.Option(
        help="A measured training throughput of the whole instance.")] = None,
    inferences_per_s: Annotated[float | None, typer.Option(
        help="A measured inference throughput of the whole instance (at your SLO).")] = None,
    samples_per_s: Annotated[float | None, typer.Option(
        help="A measured training throughput in samples/s, for --dataset-samples.")] = None,
    dataset_samples: Annotated[str | None, typer.Option(help="Epoch size in samples.")] = None,
    dataset_tokens: Annotated[str | None, typer.Option(help="Epoch size in tokens.")] = None,
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
        from gpuaudit.store import Store

        with Store(db, read_only=True) as store:
            stored = store.get(run)
    try:
        result = price_performance(
            offer, kind=price_kind, run=stored, precision=precision,
            model_params=count("--params", params) if params else None, mfu=mfu,
            tokens_per_s=tokens_per_s, inferences_per_s=inferences_per_s,
            samples_per_s=samples_per_s,
            dataset_samples=count("--dataset-samples", dataset_samples)
            if dataset_samples else None,
            dataset_tokens=count("--dataset-tokens", dataset_tokens) if dataset_tokens else None)
    except ValueError as exc:  # an unknown precision, from the specs
        if isinstance(exc, BadInputError):
            raise
        raise BadInputError(f"--precision {precision!r}: {exc}") from None
    _emit(result, "cost.work", work_view, json_)


@cost_app.command()
def idle(
    since: Annotated[str, typer.Option(help="From (30m, 24h, 7d back, or an ISO time).")
                     ] = "24h",
    until: Annotated[str, typer.Option(help="To ('now' or an ISO time).")] = "now",
    price_usd_per_gpu_hour: Annotated[float | None, typer.Option(
        help="Price of a GPU-hour, USD.")] = None,
    price_per_gpu_hour: Annotated[float | None, typer.Option(
        help="Price of a GPU-hour in --currency.")] = None,
    currency: Annotated[str, typer.Option(help="With --price-per-gpu-hour.")] = "USD",
    instance: InstanceOpt = None,
    catalog: CatalogOpt = None,
    price_kind: KindOpt = PriceKind.ON_DEMAND,
    threshold_pct: Annotated[float, typer.Option(
        help="Idle below this activity (SM activity, else GPU utilization), %.")] = 5.0,
    host: Annotated[str | None, typer.Option(help="Only this host [default: all].")] = None,
    db: DbOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Idle GPU-hours in the monitor's history, and what they cost."""
    from gpuaudit.cost.work import idle_cost
    from gpuaudit.report.pricing_view import idle_view
    from gpuaudit.store import Store, parse_time

    given = [x for x in (price_usd_per_gpu_hour, price_per_gpu_hour, instance) if x is not None]
    if len(given) != 1:
        raise BadInputError("give one price: --price-usd-per-gpu-hour, --price-per-gpu-hour or "
                            "--instance")
    now = datetime.now(timezone.utc)
    start, end = parse_time(since, now), parse_time(until, now)
    offer = find_offer(instance, catalog) if instance is not None else None
    price = price_usd_per_gpu_hour if price_usd_per_gpu_hour is not None else price_per_gpu_hour
    cur = "USD" if price_usd_per_gpu_hour is not None else _currency(currency)
    with Store(db, read_only=True) as store:
        points = store.history(since=start, until=end, hostname=host)
    result = idle_cost(points, since=start, until=end, price_per_gpu_hour=price, offer=offer,
                       kind=price_kind, currency=cur, threshold_pct=threshold_pct)
    _emit(result, "cost.idle", idle_view, json_)
