"""The sweep over every offer looks up an instance type's network between instances only where
the plan depends on it: the results are those of looking it up for every offer, and an
exclusion names its own offer's instance type, though the plan is shared."""

from __future__ import annotations

import itertools
import random
from datetime import date

import pytest

from gpuaudit.cost.catalog.records import OfferColumns
from gpuaudit.cost.recommend import (
    Constraints,
    FinetuneTask,
    ServeTask,
    TrainTask,
    hardware,
    network,
    recommend,
)
from gpuaudit.model.cost import Billing, Offer
from gpuaudit.model.recommendation import Assumptions

# Instance types with a published network (pooled), of a provider that has some but not for
# this type, and of providers with none; their GPUs repeat, so plans are shared across them.
SHAPES = [
    ("aws", "p4de.24xlarge", "a100-sxm4-80gb", 8), ("aws", "p5.48xlarge", "h100-sxm", 8),
    ("aws", "g5.48xlarge", "a10g", 8), ("aws", "g5.xlarge", "a10g", 1),
    ("gcp", "a2-highgpu-8g", "a100-sxm4-40gb", 8), ("gcp", "g2-standard-4", "l4", 1),
    ("azure", "Standard_ND96asr_v4", "a100-sxm4-40gb", 8),
    ("nebius", "gpu-h100-sxm_8gpu-x", "h100-sxm", 8),
    ("vast", "h100x8", "h100-sxm", 8), ("runpod", "a100x8", "a100-sxm4-80gb", 8),
    ("lambda", "a10gx1", "a10g", 1), ("coreweave", "l4x1", "l4", 1),
    ("vast", "v100x8", "v100-sxm2-16gb", 8),
]


def catalog(n: int = 160, seed: int = 5) -> list[Offer]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        provider, itype, gpu, count = SHAPES[i % len(SHAPES)]
        od = round(rng.uniform(0.5, 6) * count, 3)
        out.append(Offer(
            provider=provider, instance_type=itype, region=f"r{i}", gpu_model=gpu,
            gpu_count=count, on_demand_price_per_hour=od if rng.random() < 0.9 else None,
            spot_price_per_hour=round(od * 0.4, 3) if rng.random() < 0.6 else None,
            reserved_1y_price_per_hour=round(od * 0.6, 3) if rng.random() < 0.3 else None,
            billing=rng.choice(list(Billing)), source="test", price_date=date(2025, 6, 1)))
    return out


TASKS = [TrainTask(params=1e9, tokens=1e11, layers=16, hidden=2048),
         TrainTask(params=70e9, tokens=2e11),
         FinetuneTask(params=70e9, method="full", tokens=1e9)]
CASES = list(itertools.product(TASKS, (None, 30.0, 2000.0), ("cost", "time"), (False, True)))


@pytest.mark.parametrize("task, deadline, sort, pool", CASES)
def test_skipping_the_network_lookup_changes_no_result(monkeypatch, task, deadline, sort,
                                                        pool):
    offers = catalog()

    def run():
        network.network_of.cache_clear()
        return recommend(task, offers, constraints=Constraints(deadline_hours=deadline,
                                                               sort=sort),
                         assumptions=Assumptions(allow_pooling=pool), top=len(offers),
                         max_excluded=len(offers)).model_dump()

    quick = run()
    looked_up = network.network_of.cache_info().misses
    # The reference: every offer's network looked up, every plan built over it.
    monkeypatch.setattr(hardware, "without_network", lambda offer, ctx, serving: None)
    assert run() == quick
    assert network.network_of.cache_info().misses >= looked_up


@pytest.mark.parametrize("sort", ["cost", "time"])
def test_serving_looks_up_no_network(sort):
    # A serving replica is one instance: its plan never depends on a network.
    network.network_of.cache_clear()
    task = ServeTask(params=70e9, qps=20, latency_ms=50, prompt_tokens=3840, ttft_ms=2000)
    result = recommend(task, catalog(), constraints=Constraints(sort=sort))
    assert result.feasible > 0
    assert network.network_of.cache_info().misses == 0


def test_a_single_node_plan_by_cost_looks_up_no_network():
    network.network_of.cache_clear()
    task = TrainTask(params=1e9, tokens=1e11, layers=16, hidden=2048)
    result = recommend(task, catalog())
    assert result.feasible > 100
    assert network.network_of.cache_info().misses == 0


def test_an_exclusion_names_its_own_instance_type():
    # Two single-GPU hosts without a network share one plan (memory needs several nodes):
    # each exclusion names its own instance type.
    task = TrainTask(params=7e9, tokens=1e9, layers=32, hidden=4096)
    offers = [Offer(provider=p, instance_type=t, gpu_model="a10g", gpu_count=1,
                    gpu_memory_gib=24, on_demand_price_per_hour=1.0, source="test",
                    price_date=date(2025, 6, 1))
              for p, t in (("vast", "box-1"), ("runpod", "pod-2"), ("aws", "g5.xlarge"))]
    for constraints in (Constraints(), Constraints(deadline_hours=1)):
        result = recommend(task, offers, constraints=constraints,
                           assumptions=Assumptions(max_nodes=8))
        assert result.ranked == ()
        for out in result.excluded:
            assert out.kind == "network"
            itype = out.offer_key.split("/", 1)[1]
            assert out.reason.startswith(f"needs 6 nodes for memory, but {itype} has no ")
    one_node = TrainTask(params=1e9, tokens=1e12, layers=16, hidden=2048)
    result = recommend(one_node, offers, constraints=Constraints(deadline_hours=10))
    assert [o.kind for o in result.excluded] == ["deadline"] * 3
    for out in result.excluded:
        itype = out.offer_key.split("/", 1)[1]
        assert f"h on one node; {itype} is not pooled" in out.reason


def test_serving_that_misses_tpot_at_batch_one_says_so_without_a_ttft_bound():
    # 7B in bf16 on an A10G (600 GB/s, 80 % achieved): reading the weights takes 29 ms, a
    # decode step with one sequence's KV cache more than the 30 ms bound; no TTFT bound.
    task = ServeTask(params=7e9, qps=5, latency_ms=30, layers=32, hidden=4096)
    a10g = Offer(provider="c", instance_type="a10gx1", gpu_model="a10g", gpu_count=1,
                 gpu_memory_gib=24, on_demand_price_per_hour=1.0, source="test",
                 price_date=date(2025, 6, 1))
    (out,) = recommend(task, [a10g]).excluded
    weights = 2 * 7e9
    kv_per_token = 2 * 32 * 4096 * 2  # K and V, every layer, 2 bytes
    step = (weights + kv_per_token * (3840 + 256 / 2)) / (600e9 * 0.8)
    assert weights / (600e9 * 0.8) < 0.030 < step
    assert (out.kind, out.reason) == (
        "latency", f"a decode step takes {step * 1e3:.3g} ms even at batch 1 on 1 × NVIDIA "
                   "A10G (AWS); TPOT bound 30 ms")


def test_offers_kept_as_columns_rank_as_the_offers_themselves():
    # The cached catalog keeps offers field by field; the sweep reads only the fields it needs.
    offers = catalog()
    columns = OfferColumns([list(column) for column in zip(*offers, strict=True)])
    assert list(columns.fields(("gpu_model", "currency", "billing"))) == [
        (o.gpu_model, o.currency, o.billing) for o in offers]
    for task in (TASKS[1], ServeTask(params=7e9, qps=5, latency_ms=50, layers=32, hidden=4096)):
        for constraints in (Constraints(), Constraints(deadline_hours=200.0, budget=5e4)):
            kept = recommend(task, columns, constraints=constraints, max_excluded=len(offers))
            assert kept == recommend(task, offers, constraints=constraints,
                                     max_excluded=len(offers))
            assert kept.considered == len(offers)
