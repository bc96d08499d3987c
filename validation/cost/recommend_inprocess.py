"""Time `recommend` over a synthetic 10,000-offer catalog (median of several runs).

The offers are generated from the shapes real catalogs have (GPU model × count per instance ×
provider × region, prices per GPU-hour near published ones, spot on most, billing per second,
minute or hour), so that every code path runs: memory plans, multi-node deadlines, spot,
reserved, billing rounding, exclusions. Usage:

    python3 validation/cost/recommend_inprocess.py [--rows 10000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time
from datetime import date

from gpuaudit.cost.recommend import (
    Constraints,
    FinetuneTask,
    ServeTask,
    TrainTask,
    recommend,
)
from gpuaudit.model.cost import Billing, Offer
from gpuaudit.specs.catalog import load_catalog

# (specs id, $ per GPU-hour on demand, GPU counts sold): shapes of the shipped/peer catalogs.
SHAPES = [
    ("v100-sxm2-16gb", 3.06, (1, 4, 8)), ("t4", 0.53, (1, 4)), ("a10g", 1.01, (1, 4, 8)),
    ("l4", 0.98, (1, 2, 4, 8)), ("l40s", 1.86, (1, 4, 8)), ("a100-sxm4-40gb", 2.74, (1, 8)),
    ("a100-sxm4-80gb", 3.43, (1, 2, 4, 8)), ("h100-sxm", 6.88, (1, 8)),
    ("h100-pcie", 2.49, (1, 2)), ("h200-sxm", 3.99, (8,)), ("b200", 6.25, (8,)),
]
PROVIDERS = ["aws", "gcp", "azure", "lambda", "runpod", "nebius", "coreweave", "vast"]
# Billing units as these providers bill (per second with AWS's 60 s minimum, per minute, per
# hour), so that pricing.py's rounding runs for each: one plan per (hardware, billing).
BILLING = {"aws": (Billing.SECOND, 60.0), "azure": (Billing.MINUTE, 0.0),
           "coreweave": (Billing.HOUR, 0.0), "vast": (Billing.MINUTE, 0.0)}


def synthetic_offers(rows: int, seed: int = 7) -> list[Offer]:
    rng = random.Random(seed)
    specs = load_catalog()
    out = []
    for i in range(rows):
        gpu, per_gpu, counts = SHAPES[i % len(SHAPES)]
        count = rng.choice(counts)
        od = round(per_gpu * count * rng.uniform(0.6, 1.4), 4)
        provider = PROVIDERS[i % len(PROVIDERS)]
        billing, minimum = BILLING.get(provider, (Billing.SECOND, 0.0))
        out.append(Offer(
            provider=provider, instance_type=f"{gpu}-x{count}-{i}",
            billing=billing, billing_minimum_s=minimum,
            region=f"region-{i % 37}", gpu_model=gpu, gpu_count=count,
            gpu_memory_gib=None if rng.random() < 0.5 else specs.get(gpu).memory_gb * 0.931,
            on_demand_price_per_hour=od,
            spot_price_per_hour=round(od * rng.uniform(0.25, 0.6), 4) if rng.random() < 0.7
            else None,
            reserved_1y_price_per_hour=round(od * 0.6, 4) if rng.random() < 0.3 else None,
            source="synthetic", price_date=date(2025, 6, 1)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    offers = synthetic_offers(args.rows)
    load_catalog()  # the spec catalog is cached after its first load, as in a long process
    cases = {
        "train 7B × 1T, 14 d deadline, $500k budget": (
            TrainTask(params=7e9, tokens=1e12), Constraints(deadline_hours=336, budget=5e5)),
        "finetune 70B LoRA": (FinetuneTask(params=70e9), Constraints()),
        "serve 70B 20 QPS 50 ms/token": (
            ServeTask(params=70e9, qps=20, latency_ms=50), Constraints()),
    }
    print(f"{platform.node()} · {platform.processor() or platform.machine()} · Python "
          f"{platform.python_version()} · {len(offers)} offers · median of {args.repeat}")
    for label, (task, cons) in cases.items():
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            result = recommend(task, offers, constraints=cons)
            times.append(time.perf_counter() - t0)
        print(f"{label}: median {statistics.median(times) * 1e3:.1f} ms "
              f"(min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f}); "
              f"{result.feasible} feasible, {sum(result.excluded_counts.values())} excluded "
              f"{dict(sorted(result.excluded_counts.items()))}")


if __name__ == "__main__":
    main()
