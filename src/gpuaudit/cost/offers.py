"""The offer a price comes from: one picked from a catalog by PROVIDER/TYPE[@REGION], or one
made from prices the user typed (for a whole instance, or per GPU-hour of a run's machine).
Shared by `gpuaudit cost` and `gpuaudit report`."""

from __future__ import annotations

import math
from datetime import datetime, timezone

from gpuaudit.errors import BadInputError
from gpuaudit.model import Billing, Offer, Run

from .catalog import Catalog, parse_key


def pick_offer(catalog: Catalog, instance: str, where: str = "") -> Offer:
    """The catalog's offer for PROVIDER/TYPE[@REGION]; without a region, the region with the
    lowest on-demand price (then spot), as `sky show-gpus` shows the cheapest region.
    `where` names the catalog in the error when there is no such offer."""
    provider, instance_type, region = parse_key(instance)
    found = catalog.find(provider, instance_type, region)
    if not found:
        raise BadInputError(f"no offer {instance!r} in the price catalog"
                            + (f" {where}" if where else "")
                            + ": `gpuaudit catalog list` shows them")

    def rank(o: Offer) -> tuple[float, float]:
        inf = math.inf
        return (o.on_demand_price_per_hour or inf, o.spot_price_per_hour or inf)

    return min(found, key=rank)


def manual_offer(price: float, gpus: int, currency: str, *, spot: float | None = None,
                 reserved_1y: float | None = None, reserved_3y: float | None = None,
                 billing: Billing = Billing.SECOND, minimum_s: float = 0.0,
                 gpu_model: str = "unknown") -> Offer:
    """An instance of `gpus` GPUs at the hourly prices the user gave (no catalog row)."""
    return Offer(provider="user", instance_type=f"{gpus}-gpu", gpu_model=gpu_model,
                 gpu_count=gpus, currency=currency, on_demand_price_per_hour=price,
                 spot_price_per_hour=spot, reserved_1y_price_per_hour=reserved_1y,
                 reserved_3y_price_per_hour=reserved_3y, billing=billing,
                 billing_minimum_s=minimum_s, source="user (command-line options)",
                 price_date=datetime.now(timezone.utc).date())


def run_machine_offer(run: Run, price_per_gpu_hour: float, currency: str) -> Offer:
    """The run's own machine rented at `price_per_gpu_hour` per GPU: its GPU count, and its
    GPU model as the specs name it (so that datasheet figures and the run's match)."""
    gpus = run.machine.gpus if run.machine and run.machine.gpus else ()
    model = "unknown"
    if gpus:
        from gpuaudit.specs import lookup

        spec = lookup(nvml_name=gpus[0].name, pci_device_id=gpus[0].pci_device_id)
        model = spec.id if spec else gpus[0].name
    count = len(gpus) or 1
    return manual_offer(price_per_gpu_hour * count, count, currency, gpu_model=model)
