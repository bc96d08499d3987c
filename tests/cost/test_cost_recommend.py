"""recommend: rankings on small constructed catalogs, exclusion reasons, parsing, the CLI."""

from __future__ import annotations

import json
import math
from datetime import date, datetime, timezone

import pytest
from typer.testing import CliRunner

from gpuaudit.cli import recommend as cli
from gpuaudit.cost.pricing import compare_job, make_job, mtbi_hours_from_rate, spot_cost
from gpuaudit.cost.recommend import (
    BenchmarkedTask,
    Constraints,
    FinetuneTask,
    ServeTask,
    TrainTask,
    parse_hours,
    parse_quantity,
    recommend,
    task_from_run,
)
from gpuaudit.errors import BadInputError
from gpuaudit.model import Gpu, Host, Machine, Measurement, Run
from gpuaudit.model.cost import Billing, Offer
from gpuaudit.model.recommendation import Assumptions, PricingModel

L2_7B = dict(layers=32, hidden=4096)


def offer(provider: str, gpu: str, count: int, od: float | None, spot: float | None = None,
          mem_gib: float | None = None, **kw) -> Offer:
    itype = kw.pop("instance_type", f"{gpu}x{count}")
    return Offer(provider=provider, instance_type=itype, gpu_model=gpu,
                 gpu_count=count, on_demand_price_per_hour=od, spot_price_per_hour=spot,
                 gpu_memory_gib=mem_gib, source="test", price_date=date(2025, 6, 1), **kw)


H100 = offer("a", "h100-sxm", 8, 20.0)
A100 = offer("b", "a100-sxm4-80gb", 8, 10.0)
# The same A100 node sold as AWS p4de.24xlarge: 400 Gb/s of EFA between instances.
A100_EFA = offer("aws", "a100-sxm4-80gb", 8, 10.0, instance_type="p4de.24xlarge")
A10G = offer("c", "a10g", 1, 1.0, mem_gib=24)
V100 = offer("d", "v100-sxm2-16gb", 8, 5.0)
TRAIN_1B = TrainTask(params=1e9, tokens=1e11, layers=16, hidden=2048)  # 6e20 FLOPs

# Per-node rates at 40 % MFU: 8 GPUs on NVLink at 95 %, one GPU at 100 %.
H100_RATE = 8 * 989.5e12 * 0.4 * 0.95
A100_RATE = 8 * 312e12 * 0.4 * 0.95
A10G_RATE = 70e12 * 0.4


def keys(result):
    return [r.offer.key for r in result.ranked]


# --- train -----------------------------------------------------------------------------------


def test_train_ranks_by_cost_with_exact_hours_and_cost():
    result = recommend(TRAIN_1B, [A10G, V100, A100, H100])
    assert keys(result) == ["a/h100-sxmx8", "b/a100-sxm4-80gbx8", "c/a10gx1"]
    h100, a100, a10g = result.ranked
    assert h100.hours == pytest.approx(6e20 / H100_RATE / 3600, rel=1e-12)  # 55.4 h
    assert h100.cost == pytest.approx(20.0 * math.ceil(h100.hours * 3600) / 3600, rel=1e-12)
    assert a100.hours == pytest.approx(6e20 / A100_RATE / 3600, rel=1e-12)
    assert a10g.hours == pytest.approx(6e20 / A10G_RATE / 3600, rel=1e-12)  # 5,952 h
    assert h100.rate == pytest.approx(H100_RATE / 1e12) and h100.rate_unit == "TFLOP/s"
    assert (h100.pricing, h100.nodes, h100.currency) == (PricingModel.ON_DEMAND, 1, "USD")
    assert h100.sharding == "none"
    assert result.excluded_counts == {"spec": 1}
    assert result.excluded[0].reason == ("NVIDIA Tesla V100 SXM2 16GB publishes no bf16 peak "
                                         "(not supported by its tensor cores)")
    assert "6·N·T = 6e+20 FLOPs" in result.notes[0]


def test_sort_by_time_puts_the_fastest_first():
    result = recommend(TRAIN_1B, [A10G, A100, H100], constraints=Constraints(sort="time"))
    assert keys(result) == ["a/h100-sxmx8", "b/a100-sxm4-80gbx8", "c/a10gx1"]
    cheap_fast = offer("e", "h100-sxm", 8, 100.0)
    result = recommend(TRAIN_1B, [cheap_fast, A100], constraints=Constraints(sort="cost"))
    assert keys(result) == ["b/a100-sxm4-80gbx8", "e/h100-sxmx8"]


def cross_node(nodes, gpus, per_gpu_flops, params, grad_bytes, gbps, flops_factor=6,
               batch=4_194_304, overlap=2 / 3, zero3=False):
    """Data-parallel efficiency over `nodes`, from its definition: a step of `batch` tokens
    computes flops_factor·N per token; its gradients cross each node's network as a ring
    all-reduce (each node sends 2(n−1)/n of them; ZeRO-3 1.5× that); the backward pass
    (2/3 of the compute) hides what it can."""
    step = flops_factor * params * batch / (nodes * gpus * per_gpu_flops)
    wire = 2 * (nodes - 1) / nodes * grad_bytes * (1.5 if zero3 else 1) * 8 / (gbps * 1e9)
    return step / (step + max(0.0, wire - overlap * step))


def test_deadline_adds_nodes_on_a_pooled_network_or_excludes():
    result = recommend(TRAIN_1B, [A10G, A100, A100_EFA, H100],
                       constraints=Constraints(deadline_hours=100))
    assert keys(result) == ["a/h100-sxmx8", "aws/p4de.24xlarge"]
    a100 = result.ranked[1]
    # 175.7 h on one node; two p4de nodes over 400 Gb/s of EFA: the 2 GB of bf16 gradients
    # of a 4M-token step hide behind its backward pass.
    eff = cross_node(2, 8, 312e12 * 0.4 * 0.95, 1e9, 2e9, 400)
    assert eff == 1.0
    assert a100.nodes == 2 and a100.gpus == 16
    assert a100.hours == pytest.approx(6e20 / (2 * A100_RATE * eff) / 3600, rel=1e-12)
    assert a100.price_per_hour == 20.0
    assert any("2 nodes over EFA 400 Gb/s per node: 100% cross-node efficiency" in r
               for r in a100.reasons)
    by_key = {x.offer_key: x for x in result.excluded}
    # The same A100 node with no known network between instances is not pooled.
    assert by_key["b/a100-sxm4-80gbx8"].kind == "deadline"
    assert "not pooled" in by_key["b/a100-sxm4-80gbx8"].reason
    assert "not pooled" in by_key["c/a10gx1"].reason


def test_pooling_allowed_uses_the_assumed_network_and_its_efficiency():
    ass = Assumptions(allow_pooling=True, pooled_network_gbps=1)
    result = recommend(TRAIN_1B, [A10G], constraints=Constraints(deadline_hours=250),
                       assumptions=ass)
    (r,) = result.ranked
    per_gpu = 70e12 * 0.4
    eff = cross_node(r.nodes, 1, per_gpu, 1e9, 2e9, 1)
    assert 0.5 < eff < 1.0  # 1 Gb/s: part of the all-reduce is exposed
    assert r.hours == pytest.approx(6e20 / (r.nodes * per_gpu * eff) / 3600, rel=1e-9)
    assert r.hours <= 250
    fewer = r.nodes - 1
    assert 6e20 / (fewer * per_gpu * cross_node(fewer, 1, per_gpu, 1e9, 2e9, 1)) / 3600 > 250
    assert any("an assumed 1 Gb/s per node (--allow-pooling" in x for x in r.reasons)


def test_sort_by_time_adds_nodes_while_they_pay_off():
    fast = offer("aws", "h100-sxm", 8, 55.0, instance_type="p5.48xlarge")  # 3200 Gb/s EFA
    (r,) = recommend(TRAIN_1B, [fast], constraints=Constraints(sort="time")).ranked
    assert r.nodes == 64  # the all-reduce hides behind the backward pass up to the cap
    (one,) = recommend(TRAIN_1B, [fast]).ranked
    assert one.nodes == 1  # by cost, more nodes only add cost
    assert r.hours < one.hours / 60
    # Not pooled: one node whatever the order.
    (h,) = recommend(TRAIN_1B, [H100], constraints=Constraints(sort="time")).ranked
    assert h.nodes == 1


def test_budget_excludes_with_the_cost_in_the_reason():
    result = recommend(TRAIN_1B, [A100_EFA, H100],
                       constraints=Constraints(deadline_hours=100, budget=1500))
    assert keys(result) == ["a/h100-sxmx8"]
    (out,) = result.excluded
    assert out.kind == "budget"
    assert out.reason == "costs 1,757 USD (on-demand), over the budget of 1,500"
    assert "within the budget (74% of it)" in result.ranked[0].reasons


def test_memory_exclusion_names_the_gpus_needed_with_zero3():
    task = TrainTask(params=7e9, tokens=1e9, **L2_7B)
    result = recommend(task, [A10G, H100], assumptions=Assumptions(max_nodes=4))
    assert keys(result) == ["a/h100-sxmx8"]
    # 112 GB of states + full-checkpointing activations over 21.7 GB of room per 24 GiB GPU.
    assert result.excluded[0].reason == ("needs 6 × 24 GiB with ZeRO-3, more than 4 nodes; "
                                         "has 1 × 24 GiB")
    h100 = result.ranked[0]
    # 14 + 14 + 84 GB: stage 1 shards the 84 GB of Adam state, 38.5 GB/GPU with activations.
    assert h100.sharding == "zero-1"
    assert h100.memory_per_gpu_bytes == pytest.approx(28e9 + 84e9 / 8 + 34 * 2048 * 4096 * 32)
    # A single-GPU box with no known network is not pooled, even when memory needs 6 of them.
    (out,) = recommend(task, [A10G]).excluded
    assert (out.kind, out.reason) == ("network", "needs 6 nodes for memory, but a10gx1 has no "
                                      "known network between instances (not pooled for one "
                                      "job; --allow-pooling allows it)")
    # Pooling allowed (100 Gb/s assumed), the A10G trains it over 6 nodes with ZeRO-3 and
    # full recompute (8·N·T: one more forward pass).
    ass = Assumptions(allow_pooling=True, pooled_network_gbps=100)
    (a10g,) = recommend(task, [A10G], assumptions=ass).ranked
    assert (a10g.nodes, a10g.sharding) == (6, "zero-3")
    eff = cross_node(6, 1, 70e12 * 0.4, 7e9, 14e9, 100, flops_factor=8, zero3=True)
    assert a10g.hours == pytest.approx(6 * 7e9 * 1e9 * 8 / 6 / (6 * A10G_RATE * eff) / 3600)
    assert any("full activation checkpointing" in r for r in a10g.reasons)
    # A deadline beyond 64 nodes: the hours quoted are on the 6 nodes the memory needs.
    (late,) = recommend(task, [A10G], constraints=Constraints(deadline_hours=1),
                        assumptions=ass).excluded
    assert late.reason.startswith(f"{a10g.hours:,.0f} h on the 6 nodes memory needs; ")
    assert "h at best on" in late.reason


def test_spot_is_chosen_when_cheaper_and_dropped_when_it_misses_the_deadline():
    spot = offer("a", "h100-sxm", 8, 20.0, spot=6.0)
    (best,) = recommend(TRAIN_1B, [spot]).ranked
    # pricing.py's model, written out: a 5 % chance of an interruption per instance-hour is an
    # MTBI of −1/ln(0.95) = 19.50 h; Daly's interval (eq. 37) for a 5-min checkpoint is
    # 104.8 min (Young's 108.2); the job of T_s = 55.4 h is n = ⌈T_s/τ⌉ − 1 intervals each
    # followed by a checkpoint, then the rest, each segment taking M·e^{R/M}·(e^{s/M} − 1).
    m, delta, restart = -3600 / math.log(0.95), 300.0, 600.0
    x = delta / (2 * m)
    tau = math.sqrt(2 * delta * m) * (1 + math.sqrt(x) / 3 + x / 9) - delta
    solve = 6e20 / H100_RATE
    n = math.ceil(solve / tau) - 1
    wall = m * math.exp(restart / m) * (n * math.expm1((tau + delta) / m)
                                        + math.expm1((solve - n * tau) / m))
    assert tau / 60 == pytest.approx(104.847, abs=1e-3)
    assert best.pricing is PricingModel.SPOT
    # 61.30 h (+10.6 %); the first-order Young estimate used before said 60.93 h (+9.96 %).
    assert best.hours == pytest.approx(wall / 3600, rel=1e-12)
    assert best.hours == pytest.approx(61.3017, abs=1e-4)
    assert best.cost == pytest.approx(6.0 * math.ceil(wall - 1e-9) / 3600, rel=1e-12)
    # 6 × 61.3 h against 20 × 55.4 h on demand.
    assert any("67% cheaper than on-demand (+11% time for interruptions)" in r
               for r in best.reasons)
    assert ("spot: a 5-min checkpoint every 105 min of work (Daly's interval; Young's 108), "
            "3.1 interruptions expected (MTBI 19.5 h for the job), each losing the work since "
            "the last checkpoint and 10 min to restart") in best.reasons
    (late,) = recommend(TRAIN_1B, [spot], constraints=Constraints(deadline_hours=58)).ranked
    assert late.pricing is PricingModel.ON_DEMAND
    assert "on-demand: spot's interruptions would miss the deadline" in late.reasons


def test_spot_on_two_nodes_halves_the_mtbi():
    # A job on n instances stops when any of them is interrupted (pricing.spot_cost: M / n).
    spot = offer("aws", "a100-sxm4-80gb", 8, 10.0, spot=3.0, instance_type="p4de.24xlarge")
    (r,) = recommend(TRAIN_1B, [spot], constraints=Constraints(deadline_hours=105)).ranked
    assert (r.nodes, r.pricing) == (2, PricingModel.SPOT)
    job = make_job(spot, wall_hours=6e20 / (2 * A100_RATE) / 3600, instances=2)
    expected = spot_cost(spot, job, mtbi_hours=mtbi_hours_from_rate(0.05), checkpoint_s=300,
                         restart_s=600)
    assert expected.plan.mtbi_hours == pytest.approx(-1 / math.log(0.95) / 2, rel=1e-12)
    assert r.hours == pytest.approx(expected.expected_wall_hours, rel=1e-12)
    assert r.hours == pytest.approx(102.151, abs=1e-3)  # 87.8 h + 16 %
    assert r.cost == pytest.approx(expected.expected_cost, rel=1e-12)
    assert r.price_per_hour == 6.0


def test_reserved_only_when_the_job_outlasts_its_break_even():
    reserved = offer("r", "a10g", 1, 1.0, mem_gib=24, reserved_1y_price_per_hour=0.5)
    # 5,952 h on demand costs 5,952; the whole 1-year term costs 8,760 × 0.5 = 4,380.
    (long_job,) = recommend(TRAIN_1B, [reserved]).ranked
    assert long_job.pricing is PricingModel.RESERVED_1Y
    assert long_job.cost == pytest.approx(4380) and long_job.price_per_hour == 0.5
    assert ("reserved-1y: paying the term in full (4,380) costs less than on-demand (5,952): "
            "the job uses 68% of the reserved hours, above the 50% break-even"
            ) in long_job.reasons
    short = TrainTask(params=1e9, tokens=1e10, layers=16, hidden=2048)  # 595 h
    (short_job,) = recommend(short, [reserved]).ranked
    assert short_job.pricing is PricingModel.ON_DEMAND
    assert short_job.cost == pytest.approx(6e19 / A10G_RATE / 3600, abs=1 / 3600)


def test_billing_is_rounded_up_and_an_unlisted_unit_is_per_second():
    hourly = offer("h", "h100-sxm", 8, 20.0, billing=Billing.HOUR)
    unlisted = H100.model_copy(update={"billing": None})  # Offer.billing may become optional
    result = recommend(TRAIN_1B, [hourly, unlisted])
    by_key = {r.offer.key: r for r in result.ranked}
    hours = 6e20 / H100_RATE / 3600  # 55.41 h: 56 billed hours
    assert by_key["h/h100-sxmx8"].cost == pytest.approx(20.0 * 56)
    assert "billed per hour, rounded up" in by_key["h/h100-sxmx8"].reasons
    per_second = by_key["a/h100-sxmx8"]
    assert per_second.cost == pytest.approx(20.0 * math.ceil(hours * 3600) / 3600, rel=1e-12)
    assert "billing unit not listed: billed per second, no minimum (assumed)" in \
        per_second.reasons
    assert keys(result) == ["a/h100-sxmx8", "h/h100-sxmx8"]


def test_every_choice_and_figure_agrees_with_pricing_compare_job():
    # recommend prices each plan once at a unit price and scales it; compare_job on the offer
    # itself must give the same option, hours and cost.
    import random

    rng = random.Random(3)
    offers = []
    for i in range(60):
        gpu, count = rng.choice([("h100-sxm", 8), ("a100-sxm4-80gb", 8), ("a10g", 1),
                                 ("l40s", 4)])
        od = rng.uniform(0.5, 40)
        offers.append(offer(f"p{i}", gpu, count, od if rng.random() < 0.9 else None,
                            spot=od * rng.uniform(0.2, 0.9) if rng.random() < 0.7 else None,
                            billing=rng.choice(list(Billing)),
                            billing_minimum_s=rng.choice([0.0, 60.0]),
                            reserved_1y_price_per_hour=od * rng.uniform(0.3, 0.7)
                            if rng.random() < 0.4 else None,
                            reserved_3y_price_per_hour=od * rng.uniform(0.2, 0.5)
                            if rng.random() < 0.2 else None))
    offers.append(offer("r3", "a10g", 1, 1.0, mem_gib=24, reserved_3y_price_per_hour=0.15))
    names = {PricingModel.ON_DEMAND: "on_demand", PricingModel.SPOT: "spot",
             PricingModel.RESERVED_1Y: "reserved_1y", PricingModel.RESERVED_3Y: "reserved_3y"}
    seen = set()
    for task, deadline in ((TRAIN_1B, None), (TRAIN_1B, 150), (TRAIN_1B, 60),
                           (FinetuneTask(params=7e9, tokens=1e10, **L2_7B), None)):
        result = recommend(task, offers, constraints=Constraints(deadline_hours=deadline),
                           top=100)
        for r in result.ranked:
            # The hours without interruptions: the same offer with only an on-demand price.
            plain = r.offer.model_copy(update={"on_demand_price_per_hour": 1.0,
                                               "spot_price_per_hour": None,
                                               "reserved_1y_price_per_hour": None,
                                               "reserved_3y_price_per_hour": None})
            (solve,) = recommend(task, [plain], constraints=Constraints(
                deadline_hours=deadline)).ranked
            assert solve.nodes == r.nodes
            job = make_job(r.offer, wall_hours=solve.hours, instances=r.nodes)
            cmp = compare_job(r.offer, job, mtbi_hours=mtbi_hours_from_rate(0.05),
                              checkpoint_s=300, restart_s=600, deadline_hours=deadline)
            chosen = next(o for o in cmp.options if o.name == cmp.cheapest)
            assert cmp.cheapest == names[r.pricing], r.offer.key
            assert r.cost == pytest.approx(chosen.cost, rel=1e-12)
            assert r.hours == pytest.approx(chosen.wall_hours, rel=1e-12)
            seen.add(r.pricing)
    assert seen == set(PricingModel)


def test_currency_and_missing_prices_are_excluded_with_reasons():
    eur = offer("e", "h100-sxm", 8, 18.0, currency="EUR")
    nothing = offer("n", "h100-sxm", 8, None)
    unknown = offer("u", "mystery-gpu", 8, 1.0)
    result = recommend(TRAIN_1B, [eur, nothing, unknown, H100])
    assert keys(result) == ["a/h100-sxmx8"]
    reasons = {e.offer_key: (e.kind, e.reason) for e in result.excluded}
    assert reasons["e/h100-sxmx8"] == ("currency", "priced in EUR; ranking in USD (no "
                                                   "exchange rates)")
    assert reasons["n/h100-sxmx8"] == ("price", "no price")
    assert reasons["u/mystery-gpux8"][0] == "spec"
    eur_only = recommend(TRAIN_1B, [eur], constraints=Constraints(currency="EUR"))
    assert eur_only.ranked[0].currency == "EUR" and eur_only.currency == "EUR"


# --- fine-tune -------------------------------------------------------------------------------


def test_finetune_lora_is_4nt_and_full_needs_more_memory():
    lora = FinetuneTask(params=7e9, tokens=1e9, method="lora", **L2_7B)
    result = recommend(lora, [A10G, A100, H100])
    # 2.8e19 FLOPs: 2.6 h × 20 = 51.7, 8.2 h × 10 = 82.0; the A10G 277.8 h × 1.5 = 416.7.
    assert keys(result) == ["a/h100-sxmx8", "b/a100-sxm4-80gbx8", "c/a10gx1"]
    assert [round(r.cost, 1) for r in result.ranked] == [51.7, 82.0, 416.7]
    a10g = result.ranked[2]
    # 14 GB frozen + 0.27 GB of adapters + 9.1 GB of activations exceed 23.2 GB usable: full
    # checkpointing (one more forward pass, (4 + 2)/4 of the work) makes it fit on one GPU.
    assert a10g.hours == pytest.approx(1.5 * 4 * 7e9 * 1e9 / A10G_RATE / 3600, rel=1e-12)
    assert a10g.sharding == "none"
    assert "full activation checkpointing to fit: one more forward pass (×1.5 compute)" in \
        a10g.reasons
    full = FinetuneTask(params=7e9, tokens=1e9, method="full", **L2_7B)
    result = recommend(full, [A10G, A100, H100], assumptions=Assumptions(max_nodes=4))
    assert keys(result) == ["a/h100-sxmx8", "b/a100-sxm4-80gbx8"]
    assert result.ranked[0].hours == pytest.approx(6 * 7e9 * 1e9 / H100_RATE / 3600)
    assert result.excluded[0].kind == "memory"


# --- serve -----------------------------------------------------------------------------------


SERVE_7B = ServeTask(params=7e9, qps=10, latency_ms=20, context=4096, output_tokens=256,
                     **L2_7B)


def _serving_by_hand(*, params, layers, hidden, kv_heads, prompt, output, w_bytes, kv_bytes,
                     peak_tflops, bw_gbps, gpus, mem_bytes, tpot, ttft=None, mfu=0.4,
                     eff=1.0):
    """The serving model of docs/cost-recommend.md written out, every batch tried."""
    head = hidden // (hidden // 128)
    kv_token = 2 * layers * kv_heads * head * kv_bytes
    weights = params * w_bytes
    compute = gpus * peak_tflops * 1e12 * mfu * eff
    bw = gpus * bw_gbps * 1e9 * 0.8 * eff
    t_pf = max((2 * params * prompt + 2 * layers * hidden * prompt ** 2) / compute,
               weights / bw)
    dec = 2 * params + 4 * layers * hidden * (prompt + output / 2)
    top = int((gpus * mem_bytes * 0.9 - weights) // (kv_token * (prompt + output)))
    best = (0.0, 0)
    for b in range(1, top + 1):
        step = max((weights + b * kv_token * (prompt + output / 2)) / bw, b * dec / compute)
        if step >= tpot:
            continue
        q = min(b / (output * step + b * t_pf), (1 - step / tpot) / t_pf)
        if ttft is not None:
            room = ttft - t_pf - step
            if room <= step / 2:
                continue
            q = min(q, (1 - step / (2 * room)) / t_pf)
        best = max(best, (q, b))
    return best, t_pf


def test_serve_prefill_and_decode_at_the_best_batch():
    h100 = offer("a", "h100-sxm", 1, 3.0)
    h200 = offer("b", "h200-sxm", 1, 4.0)
    l4 = offer("c", "l4", 1, 0.8)
    result = recommend(SERVE_7B, [l4, h100, h200])
    by = {r.offer.key: r for r in result.ranked}
    for key, peak, bw, mem in (("a/h100-sxmx1", 989.5, 3350, 80e9),
                               ("b/h200-sxmx1", 989.5, 4800, 141e9)):
        (q, batch), t_pf = _serving_by_hand(
            params=7e9, layers=32, hidden=4096, kv_heads=32, prompt=3840, output=256,
            w_bytes=2, kv_bytes=2, peak_tflops=peak, bw_gbps=bw, gpus=1, mem_bytes=mem,
            tpot=0.020)
        s = by[key].serving
        assert s.requests_per_s_per_replica == pytest.approx(q, rel=1e-9), key
        assert s.batch == batch and s.prefill_ms == pytest.approx(t_pf * 1e3)
        assert s.replicas == by[key].nodes == math.ceil(10 / q)
        assert by[key].cost == pytest.approx(s.replicas * (3.0 if key[0] == "a" else 4.0))
        assert s.tpot_ms <= 20 + 1e-9 and (s.prompt_tokens, s.output_tokens) == (3840, 256)
    (out,) = result.excluded
    assert (out.kind, out.reason) == ("latency", "reading the weights takes 58.3 ms per token "
                                                 "on 1 × NVIDIA L4; TPOT bound 20 ms")


def test_serve_counts_prefill_of_long_prompts_at_high_qps():
    """3,840-token prompts at 100 QPS on a 70B model need ~5.6e16 FLOP/s of prefill alone:
    ~141 H100s at 40 % MFU, where a decode-only model proposed 16 GPUs."""
    task = ServeTask(params=70e9, qps=100, latency_ms=50, ttft_ms=2000, prompt_tokens=3840,
                     output_tokens=256, layers=80, hidden=8192, kv_heads=8)
    (r,) = recommend(task, [offer("a", "h100-sxm", 8, 98.32)]).ranked
    prefill_per_s = 100 * r.serving.prefill_flops_per_request
    assert prefill_per_s == pytest.approx(100 * (2 * 70e9 * 3840 + 2 * 80 * 8192 * 3840**2))
    assert prefill_per_s / (989.5e12 * 0.4) > 140
    assert r.gpus >= 141 and r.gpus == 8 * r.nodes
    assert r.serving.ttft_ms <= 2000 and r.serving.tpot_ms <= 50 + 1e-9


def test_serve_ttft_bound_excludes_a_slow_prefill_with_the_reason():
    task = ServeTask(params=70e9, qps=1, latency_ms=200, ttft_ms=300, prompt_tokens=32000,
                     output_tokens=100, layers=80, hidden=8192, kv_heads=8)
    result = recommend(task, [offer("a", "h100-sxm", 8, 98.32)])
    (out,) = result.excluded
    assert out.kind == "latency" and "32,000-token prompt's prefill takes" in out.reason
    assert out.reason.endswith("TTFT bound 300 ms")


def test_serve_model_against_mlperf_v4_llama2_70b_h100():
    """MLPerf Inference v4.0, closed, NVIDIA DGX-H100 (8 × H100 SXM), llama2-70b-99.9 Server:
    70.42 samples/s within TTFT 2 s and TPOT 200 ms (fp8, 294.45 output tokens per sample;
    the mean prompt is not published: 300 assumed). The model's replica rate is within 10 %."""
    task = ServeTask(params=70e9, qps=70.42, latency_ms=200, ttft_ms=2000, prompt_tokens=300,
                     output_tokens=294, layers=80, hidden=8192, kv_heads=8, dtype="fp8")
    (r,) = recommend(task, [offer("a", "h100-sxm", 8, 98.32, mem_gib=80)]).ranked
    assert r.serving.requests_per_s_per_replica == pytest.approx(70.42, rel=0.10)


def test_serve_memory_exclusion_and_no_spot():
    task = ServeTask(params=70e9, qps=1, latency_ms=200, context=4096, layers=80, hidden=8192)
    spot_only = offer("s", "h100-sxm", 8, None, spot=10.0)
    result = recommend(task, [A10G, spot_only])
    assert result.ranked == ()
    reasons = {e.offer_key: e.reason for e in result.excluded}
    assert reasons["c/a10gx1"] == ("weights 140 GB + one sequence's KV cache 10.7 GB need "
                                   "151 GB; has 1 × 24 GiB (23.2 GB usable)")
    assert reasons["s/h100-sxmx8"].startswith("no on-demand or reserved price (spot is not")


# --- benchmarked -----------------------------------------------------------------------------


def test_benchmarked_uses_measured_rate_on_the_same_gpu_and_scales_others():
    task = BenchmarkedTask(run_id="r1", gpu_model="h100-sxm", gpus=8, rate_per_gpu=700.0,
                           unit="TFLOP/s", metric="matmul/bf16", hours=10, scale_by="bf16")
    h200 = offer("h", "h200-sxm", 8, 30.0)
    result = recommend(task, [A100, h200, H100])
    assert keys(result) == ["a/h100-sxmx8", "h/h200-sxmx8", "b/a100-sxm4-80gbx8"]
    same, h200r, a100 = result.ranked
    assert same.measured and same.hours == pytest.approx(10) and same.cost == pytest.approx(200)
    assert not a100.measured
    assert a100.hours == pytest.approx(10 * 989.5 / 312)
    assert a100.rate == pytest.approx(8 * 700 * 312 / 989.5 * 0.95)
    assert "scaled from h100-sxm by the bf16 spec ratio (estimate)" in a100.reasons
    assert h200r.cost == pytest.approx(300)


def _run_with_matmul() -> Run:
    now = datetime(2025, 6, 1, tzinfo=timezone.utc)
    gpus = tuple(Gpu(index=i, name="NVIDIA H200", pci_device_id=0x2335) for i in range(2))
    machine = Machine(captured_at=now, host=Host(hostname="box", python_version="3.11"), gpus=gpus)
    ms = tuple(Measurement(suite="matmul", name="bf16", unit="TFLOP/s", value=v, gpu_index=i)
               for i, v in enumerate((700.0, 720.0)))
    return Run(id="abc123", kind="bench", started_at=now, tool_version="t", machine=machine,
               measurements=ms)


def test_task_from_run_takes_the_median_over_gpus():
    task = task_from_run(_run_with_matmul(), hours=5)
    assert (task.gpu_model, task.gpus, task.rate_per_gpu) == ("h200-sxm", 2, 710.0)
    assert (task.scale_by, task.unit) == ("bf16", "TFLOP/s")
    with pytest.raises(BadInputError, match="no matmul/fp8 measurement"):
        task_from_run(_run_with_matmul(), hours=5, metric="matmul/fp8")


# --- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "value"), [
    ("7B", 7e9), ("1.3B", 1.3e9), ("125M", 125e6), ("1T", 1e12), ("300b", 300e9),
    ("70k", 70e3), ("2e9", 2e9), ("42", 42.0)])
def test_parse_quantity(text, value):
    assert parse_quantity(text) == pytest.approx(value, rel=1e-15)


@pytest.mark.parametrize("text", ["0", "0B", "-7B", "7X", "", "B", "inf"])
def test_parse_quantity_rejects(text):
    with pytest.raises(BadInputError):
        parse_quantity(text, "--params")


def test_parse_hours():
    assert parse_hours("14d") == 336 and parse_hours("36h") == 36 and parse_hours("90m") == 1.5
    assert parse_hours("2w") == 336 and parse_hours("12") == 12
    for bad in ("0d", "soon", "-1h"):
        with pytest.raises(BadInputError):
            parse_hours(bad)


# --- CLI -------------------------------------------------------------------------------------


@pytest.fixture
def catalog(monkeypatch):
    offers = [A10G, V100, A100, H100]
    monkeypatch.setattr(cli, "load_offers", lambda path: offers)
    return offers


def invoke(*args):
    return CliRunner().invoke(cli.recommend_app, list(args))


def test_cli_train_json(catalog):
    res = invoke("train", "--params", "1B", "--tokens", "100B", "--layers", "16", "--hidden",
                 "2048", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [r["offer"]["provider"] for r in doc["ranked"]] == ["a", "b", "c"]
    assert doc["currency"] == "USD" and doc["ranked"][0]["currency"] == "USD"
    assert doc["assumptions"]["mfu"] == 0.4
    assert doc["excluded_counts"] == {"spec": 1}


def test_cli_table_prints_the_currency(catalog):
    res = invoke("train", "--params", "1B", "--tokens", "100B", "--deadline", "100h")
    assert res.exit_code == 0, res.output
    assert "Recommended offers (USD)" in res.stdout and "Prices in USD" in res.stdout


def test_cli_finetune_and_serve(catalog):
    res = invoke("finetune", "--params", "7B", "--method", "lora", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["task"]["method"] == "lora"
    res = invoke("serve", "--params", "7B", "--qps", "5", "--latency-ms", "50", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["ranked"][0]["rate_unit"] == "tokens/s"


@pytest.mark.parametrize("args", [
    ("train", "--params", "0", "--tokens", "1T"),
    ("train", "--params", "7B", "--tokens", "1T", "--budget-usd", "-5"),
    ("train", "--params", "7B", "--tokens", "1T", "--precision", "fp12"),
    ("train", "--params", "7B", "--tokens", "1T", "--deadline", "soon"),
    ("finetune", "--params", "7B", "--method", "prefix"),
    ("serve", "--params", "7B", "--qps", "0", "--latency-ms", "50"),
    ("--run", "abc"),
])
def test_cli_bad_input_exits_2_with_one_line(catalog, args):
    res = invoke(*args)
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuaudit: error: ")


def test_cli_run_reads_the_store(catalog, tmp_path):
    from gpuaudit.store import Store

    db = f"sqlite:///{tmp_path / 's.db'}"
    with Store(db) as store:
        store.save(_run_with_matmul())
    res = invoke("--run", "abc123", "--hours", "5", "--db", db, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["task"]["gpu_model"] == "h200-sxm" and doc["task"]["rate_per_gpu"] == 710.0
    res = invoke("--run", "nope", "--hours", "5", "--db", db)
    assert res.exit_code == 2


# --- one pricing enum, recommend's document version ------------------------------------------


def test_price_kinds_and_pricing_models_are_one_enum():
    from gpuaudit.model import pricing as pricing_model
    from gpuaudit.model import recommendation

    assert pricing_model.PriceKind is PricingModel is recommendation.PricingModel
    assert [m.value for m in PricingModel] == ["on_demand", "spot", "reserved_1y",
                                               "reserved_3y"]
    assert [m.label for m in PricingModel] == ["on-demand", "spot", "reserved-1y",
                                               "reserved-3y"]
    # Each value names the Offer field it prices from.
    assert {m.price_field for m in PricingModel} <= set(Offer._fields)
    # compare_job's options and recommend's pick are the same type: no mapping between them.
    spot_offer = offer("s", "h100-sxm", 8, 20.0, spot=6.0)
    cmp = compare_job(spot_offer, make_job(spot_offer, wall_hours=10, instances=1),
                      mtbi_hours=mtbi_hours_from_rate(0.05, 1.0))
    assert cmp.cheapest is PricingModel.SPOT
    assert {o.name for o in cmp.options} == {PricingModel.ON_DEMAND, PricingModel.SPOT}


def test_recommend_document_is_version_3_with_the_enum_values(catalog):
    import jsonschema

    from gpuaudit.model import recommend_json_schema

    res = invoke("train", "--params", "1B", "--tokens", "100B", "--layers", "16", "--hidden",
                 "2048", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema_version"] == 3
    assert {r["pricing"] for r in doc["ranked"]} <= {m.value for m in PricingModel}
    assert doc["ranked"][0]["pricing"] == "on_demand"  # version 1 wrote "on-demand"
    jsonschema.validate(doc, recommend_json_schema())


def test_published_recommend_schema_is_current():
    from pathlib import Path

    from gpuaudit.model import recommend_json_schema

    path = Path(__file__).parents[2] / "docs" / "schema" / "recommend.schema.json"
    assert json.loads(path.read_text()) == recommend_json_schema(), (
        "regenerate: python3 -c 'import json; from gpuaudit.model import "
        "recommend_json_schema as s; print(json.dumps(s(), indent=2))' "
        "> docs/schema/recommend.schema.json")
    assert recommend_json_schema()["$id"].endswith("/recommend-v3.json")
