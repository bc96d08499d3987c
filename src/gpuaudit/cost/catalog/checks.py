"""`validate`: findings on a loaded catalog, FAIL for errors (a wrong number) and WARN for
doubts. One function per rule that looks across offers; the per-offer rules in `_offer_rules`.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from datetime import date, timedelta
from typing import Any

from gpuaudit.model.cost import Offer
from gpuaudit.model.finding import Finding, Severity
from gpuaudit.specs.catalog import SpecCatalog

from .families import (
    FORM_FACTOR_LABEL,
    expected_gpu_count,
    stated_form_factor,
    with_form_factor,
)
from .records import ISO_CURRENCIES, PLACEHOLDER_PRICES, PRICE_FIELDS, Catalog


def _finding(code: str, severity: Severity, message: str, catalog: Catalog,
             offer: Offer | None = None, advice: str | None = None, **evidence: Any
             ) -> Finding:
    ev: dict[str, Any] = {}
    if offer is not None:
        ev["offer"] = offer.key
        loc = catalog.location(offer)
        if loc is not None:
            ev["file"], ev["line"] = loc.file, loc.line
    ev.update(evidence)
    return Finding(code=f"catalog.{code}", severity=severity, message=message, evidence=ev,
                   advice=advice)


def validate(catalog: Catalog, *, today: date | None = None, stale_days: int = 365,
             outlier_factor: float = 3.0, min_peers: int = 3) -> list[Finding]:
    """Findings on a loaded catalog, FAIL for errors (a wrong number) and WARN for doubts.

    Rules (codes `catalog.<rule>`): load (a row that did not load), spot-not-cheaper,
    placeholder-price, gpu-count, gpu-form-factor, stale, future-date, unknown-currency,
    unknown-gpu, repeated-price, per-gpu-outlier; and left-out (INFO: rows left out on
    purpose, e.g. AWS Local Zones). An outlier needs `min_peers` distinct prices of the same
    GPU model and currency to compare with, because a median of two says nothing."""
    from gpuaudit.specs import load_catalog as load_specs

    today = today or date.today()
    specs = load_specs()
    out: list[Finding] = []
    for prob in catalog.problems:
        out.append(Finding(code="catalog.load", severity=Severity.FAIL, message=str(prob),
                           evidence={"file": prob.file, "line": prob.line, "kind": prob.code}))
    for o in catalog.offers:
        out.extend(_offer_rules(o, catalog, specs, today, stale_days))
    out.extend(_repeated_prices(catalog))
    out.extend(_outliers(catalog, outlier_factor, min_peers))
    for left in catalog.left_out:
        out.append(Finding(code="catalog.left-out", severity=Severity.INFO, message=str(left),
                           evidence={"file": left.file, "kind": left.kind, "rows": left.rows,
                                     "zones": ", ".join(left.zones)}))
    return out


def _offer_rules(o: Offer, catalog: Catalog, specs: SpecCatalog, today: date,
                 stale_days: int) -> list[Finding]:
    out = []
    od, spot = o.on_demand_price_per_hour, o.spot_price_per_hour
    if od is not None and spot is not None:
        if spot > od:
            out.append(_finding("spot-not-cheaper", Severity.FAIL,
                                f"{o.key}: spot {spot:g} is above on-demand {od:g} "
                                f"{o.currency}/h", catalog, o,
                                "a spot price is capped at on-demand; one of the two is "
                                "wrong"))
        elif spot == od:
            out.append(_finding("spot-not-cheaper", Severity.WARN,
                                f"{o.key}: spot equals on-demand ({od:g} {o.currency}/h):"
                                " usually 'no spot data', not a real spot price", catalog,
                                o, "leave spot empty when it is not published"))
    for key in PRICE_FIELDS:
        value = getattr(o, key)
        if value is not None and value in PLACEHOLDER_PRICES:
            out.append(_finding("placeholder-price", Severity.FAIL,
                                f"{o.key}: {key} {value:g} {o.currency}/h is a placeholder"
                                " value, not a price", catalog, o,
                                "leave the price empty when it is unknown"))
    expected = expected_gpu_count(o.provider, o.instance_type)
    if expected is not None and expected != o.gpu_count:
        out.append(_finding("gpu-count", Severity.FAIL,
                            f"{o.key}: {o.gpu_count} GPUs, but {o.instance_type} has "
                            f"{expected}", catalog, o, expected=expected))
    if o.price_date > today:
        out.append(_finding("future-date", Severity.FAIL,
                            f"{o.key}: price_date {o.price_date} is after {today}",
                            catalog, o))
    elif (today - o.price_date) > timedelta(days=stale_days):
        age = (today - o.price_date).days
        out.append(_finding("stale", Severity.WARN,
                            f"{o.key}: prices read {o.price_date}, {age} days before "
                            f"{today} (limit {stale_days})", catalog, o,
                            "re-read the source and update the row", age_days=age))
    if o.currency not in ISO_CURRENCIES:
        out.append(_finding("unknown-currency", Severity.FAIL,
                            f"{o.key}: currency {o.currency!r} is not a known ISO 4217 "
                            "code", catalog, o))
    spec = specs.get(o.gpu_model)
    if spec is None:
        out.append(_finding("unknown-gpu", Severity.WARN,
                            f"{o.key}: GPU model {o.gpu_model!r} is not in the spec "
                            "catalog: no datasheet peaks for price-performance", catalog,
                            o, "use a specs id, e.g. h100-sxm (gpuaudit.specs)"))
    elif (form := stated_form_factor(o.instance_type)) is not None:
        is_sxm = spec.form_factor.upper().startswith("SXM")
        if (form == "sxm") != is_sxm:
            # The PCIe and SXM parts differ in peaks, bandwidth and power (H100: 756 vs 989
            # dense BF16 TFLOP/s): the wrong one skews every figure computed from the row.
            want = with_form_factor(o.gpu_model, form)
            label = FORM_FACTOR_LABEL[form]
            out.append(_finding(
                "gpu-form-factor", Severity.FAIL,
                f"{o.key}: the instance name says {label}, but {o.gpu_model} is the "
                f"{spec.form_factor} part", catalog, o,
                f"use {want}" if want != o.gpu_model else f"use the specs id of the {label} part",
                expected_form=form))
    return out


def _repeated_prices(catalog: Catalog) -> list[Finding]:
    """One provider listing the same on-demand price, in the same region, for different
    hardware (GPU model or count): a price copied down a column or a default value.

    Only within one region (or among region-less rows): providers derive regional prices
    from one base by a regional factor, so a price in one region often equals another GPU's
    in another region without anything being wrong (AWS: p5.48xlarge in ca-central-1 and
    p5en.48xlarge in us-east-1 are both 63.296 USD/h, 1.15 × 55.04). Placeholder values are
    left to the placeholder rule."""
    groups: dict[tuple[str, str, str | None, float], list[Offer]] = defaultdict(list)
    for o in catalog.offers:
        od = o.on_demand_price_per_hour
        if od is not None and od not in PLACEHOLDER_PRICES:
            groups[(o.provider, o.currency, o.region, od)].append(o)
    out = []
    for (provider, currency, region, price), offers in groups.items():
        if len({(o.gpu_model, o.gpu_count) for o in offers}) < 2:
            continue
        models = sorted({o.gpu_model for o in offers})
        hardware = (f"other GPUs ({', '.join(models)})" if len(models) > 1 else
                    "other GPU counts (" + ", ".join(
                        f"{n} × {models[0]}" for n in sorted({o.gpu_count for o in offers}))
                    + ")")
        where = f"in {region}" if region else "(no region)"
        for o in offers:
            out.append(_finding(
                "repeated-price", Severity.WARN,
                f"{o.key}: on-demand {price:g} {currency}/h is also the price of {provider} "
                f"offers with {hardware} {where}: likely a copied or default value",
                catalog, o))
    return out


def _outliers(catalog: Catalog, factor: float, min_peers: int) -> list[Finding]:
    """On-demand per GPU-hour far from the market for the same GPU model and currency.

    The market is the median over providers of each provider's median (its equal prices
    counted once): one provider, one vote. Counting rows instead lets one provider's price
    list set the median: AWS lists p5.48xlarge in a dozen regions (55.04 in three of them),
    and with a SkyPilot AWS import beside the shipped rows its H100 rows would outnumber all
    other providers', making their prices look like outliers."""
    by_provider: dict[tuple[str, str], dict[str, set[float]]] = defaultdict(
        lambda: defaultdict(set))
    rows: dict[tuple[str, str], int] = defaultdict(int)
    for o in catalog.offers:
        od = o.on_demand_price_per_hour
        if od is not None and od > 0 and od not in PLACEHOLDER_PRICES:
            by_provider[(o.gpu_model, o.currency)][o.provider].add(round(od / o.gpu_count, 6))
            rows[(o.gpu_model, o.currency)] += 1
    medians = {k: statistics.median(statistics.median(p) for p in v.values())
               for k, v in by_provider.items()
               if sum(len(p) for p in v.values()) >= min_peers}
    out = []
    for o in catalog.offers:
        od = o.on_demand_price_per_hour
        group = (o.gpu_model, o.currency)
        med = medians.get(group)
        if od is None or med is None or od <= 0 or od in PLACEHOLDER_PRICES:
            continue
        each = od / o.gpu_count
        if each > factor * med or each < med / factor:
            side = "above" if each > med else "below"
            providers = len(by_provider[group])
            out.append(_finding(
                "per-gpu-outlier", Severity.WARN,
                f"{o.key}: {each:.4g} {o.currency} per GPU-hour is more than {factor:g}× "
                f"{side} the median {med:.4g} of {rows[group]} {o.gpu_model} offers "
                f"({providers} provider{'s' * (providers != 1)}, one vote each)", catalog,
                o, per_gpu=round(each, 6), median=round(med, 6), providers=providers))
    return out
