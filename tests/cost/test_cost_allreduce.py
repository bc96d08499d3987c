"""recommend's cross-node efficiency from our own all-reduce: one measured across nodes (a
fleet run's) or the recorded step's gradient buckets (predict's DDP model), each checked
against a hand computation written here."""

from __future__ import annotations

import json
import math
from datetime import date, datetime, timezone

import pytest
from typer.testing import CliRunner

from gpuaudit.cli import recommend as cli
from gpuaudit.cost.recommend import Constraints, PredictedTask, TrainTask, recommend
from gpuaudit.cost.recommend.measured import allreduce_across_nodes
from gpuaudit.errors import BadInputError
from gpuaudit.model import Measurement
from gpuaudit.model.cost import Offer
from tests.conftest import FIXTURES

H100_NAME = "NVIDIA H100 80GB HBM3"
SIZES = (1 << 20, 1 << 26, 1 << 30, 1 << 32)


def offer(provider: str, gpu: str, count: int, od: float, itype: str) -> Offer:
    return Offer(provider=provider, instance_type=itype, gpu_model=gpu, gpu_count=count,
                 on_demand_price_per_hour=od, source="test", price_date=date(2025, 6, 1))


P5 = offer("aws", "h100-sxm", 8, 55.0, "p5.48xlarge")  # 8 × H100, 3200 Gb/s of EFA
P4DE = offer("aws", "a100-sxm4-80gb", 8, 30.0, "p4de.24xlarge")  # 8 × A100, 400 Gb/s
TRAIN_1B = TrainTask(params=1e9, tokens=1e11, layers=16, hidden=2048)  # 6e20 FLOPs
H100_RATE = 8 * 989.5e12 * 0.4 * 0.95  # one node at 40 % MFU, NVLink at 95 %


def fleet_measurements(busbw: float, nodes: int = 2, per_node: int = 8,
                       suite: str = "fleet") -> list[Measurement]:
    """A flat busbw curve (the same at every size) across `nodes` × `per_node` GPUs."""
    return [Measurement(suite=suite, name="all_reduce_busbw", unit="GB/s", value=busbw,
                        params={"op": "all_reduce", "size_bytes": s, "ranks": nodes * per_node,
                                "nodes": nodes, "backend": "nccl"}) for s in SIZES]


def test_the_measured_curve_is_read_with_its_gpu_and_shape():
    m = allreduce_across_nodes("fleet run F1", fleet_measurements(40.0, 4, 8), H100_NAME)
    assert (m.gpu_model, m.gpus_per_node, m.nodes) == ("h100-sxm", 8, 4)
    assert m.applies_to("h100-sxm", 8) and not m.applies_to("h100-sxm", 4)
    assert not m.applies_to("a100-sxm4-80gb", 8)
    # nccl-tests' busbw: time = size · 2(n−1)/n ÷ busbw
    assert m.seconds(2e9, 32) == pytest.approx(2e9 * 2 * 31 / 32 / 40e9, rel=1e-12)


def test_an_all_reduce_inside_one_machine_is_refused_with_the_reason():
    inside = fleet_measurements(400.0, nodes=1, suite="collectives")
    with pytest.raises(BadInputError, match="ran inside one machine"):
        allreduce_across_nodes("run R", inside, H100_NAME)
    with pytest.raises(BadInputError, match="not asked for"):
        allreduce_across_nodes("fleet run F", [], H100_NAME, skipped="not asked for")
    with pytest.raises(BadInputError, match="not in the spec catalog"):
        allreduce_across_nodes("fleet run F", fleet_measurements(40.0), "Mystery GPU")


def hand_efficiency(nodes: int, per_gpu: float, grad_bytes: float, busbw: float,
                    gpus_per_node: int = 8, batch: float = 4_194_304, overlap: float = 2 / 3
                    ) -> float:
    """A 4M-token step of 6·N FLOPs per token; its gradients all-reduced over all ranks at the
    measured busbw; the backward pass (2/3 of the step) hides what it can."""
    ranks = nodes * gpus_per_node
    step = 6 * 1e9 * batch / (ranks * per_gpu)
    comm = grad_bytes * 2 * (ranks - 1) / ranks / (busbw * 1e9)
    return step / (step + max(0.0, comm - overlap * step))


def test_a_measured_all_reduce_sizes_the_cross_node_step():
    cons = Constraints(deadline_hours=40)  # 55.4 h on one p5 node: two are needed
    (fast,) = recommend(TRAIN_1B, [P5], constraints=cons).ranked
    assert fast.nodes == 2 and fast.hours == pytest.approx(6e20 / (2 * H100_RATE) / 3600)
    slow = allreduce_across_nodes("fleet run F1", fleet_measurements(1.0), H100_NAME)
    (r,) = recommend(TRAIN_1B, [P5], constraints=cons, allreduce=slow).ranked
    eff = hand_efficiency(2, 989.5e12 * 0.4 * 0.95, 2e9, 1.0)  # bf16 gradients: 2 GB
    assert 0.7 < eff < 0.9
    assert r.nodes == 2
    assert r.hours == pytest.approx(6e20 / (2 * H100_RATE * eff) / 3600, rel=1e-9)
    assert any(f"{eff:.0%} cross-node efficiency (from the all-reduce measured in fleet run "
               "F1 (2 nodes × 8 h100-sxm: 1 GB/s busbw at 2 GB)" in x for x in r.reasons)


def test_a_measured_all_reduce_leaves_other_gpus_to_their_network():
    cons = Constraints(deadline_hours=100)
    slow = allreduce_across_nodes("fleet run F1", fleet_measurements(0.01), H100_NAME)
    plain = recommend(TRAIN_1B, [P4DE], constraints=cons).ranked[0]
    other = recommend(TRAIN_1B, [P4DE], constraints=cons, allreduce=slow).ranked[0]
    assert plain.nodes == other.nodes == 2 and plain.hours == other.hours
    assert any("EFA 400 Gb/s per node: 100% cross-node efficiency (gradients all-reduced"
               in x for x in other.reasons)


BUCKETS = ((1_000_000_000, 0.5), (1_000_000_000, 0.9), (2_000_000_000, 1.0))


def hand_ddp(buckets, backward_s: float, ranks: int, busbw: float) -> float:
    """Each bucket all-reduced when ready, one at a time; what runs past the backward."""
    free = 0.0
    for size, ready in buckets:
        free = max(ready * backward_s, free) + size * 2 * (ranks - 1) / ranks / (busbw * 1e9)
    return max(0.0, free - backward_s)


def predicted_task(**kw) -> PredictedTask:
    # 100 h of 1 × H100 at 100 samples/s; 8 × H100 predicted at 100 samples/s per GPU.
    return PredictedTask(run_id="r", gpu_model="h100-sxm", gpus=1, rate_per_gpu=100.0,
                         unit="samples/s", metric="gpt step", hours=100.0,
                         scale_by="prediction",
                         predicted=(("h100-sxm", 8, 100.0, "predicted"),), **kw)


@pytest.mark.parametrize("busbw", [None, 100.0])
def test_a_predicted_step_all_reduces_its_buckets_across_nodes(busbw):
    task = predicted_task(grad_buckets=BUCKETS, samples_per_step=8, backward_share=0.6)
    measured = None if busbw is None else allreduce_across_nodes(
        "fleet run F2", fleet_measurements(busbw), H100_NAME)
    (r,) = recommend(task, [P5], constraints=Constraints(deadline_hours=8),
                     allreduce=measured).ranked  # 12.5 h on one node
    step = 8 / 100.0
    n = r.nodes
    exposed = hand_ddp(BUCKETS, 0.6 * step, 8 * n, 3200 / 8 if busbw is None else busbw)
    eff = step / (step + exposed)
    assert 0.5 < eff < 1.0
    assert n == (2 if busbw is None else 3)  # 12.5 h ÷ 2 ÷ 0.61 misses 8 h: a third node
    assert r.rate == pytest.approx(n * 8 * 100.0 * eff, rel=1e-9)
    assert r.hours == pytest.approx(100 * 3600 * 100.0 / r.rate / 3600, rel=1e-9)
    where = "at the node's network" if busbw is None else "measured in fleet run F2"
    assert any("3 gradient bucket(s) all-reduced against its backward pass" in x
               and where in x for x in r.reasons)


def test_without_buckets_a_benchmarked_step_keeps_the_assumed_efficiency():
    (r,) = recommend(predicted_task(), [P5], constraints=Constraints(deadline_hours=8)).ranked
    assert r.nodes == 2 and r.rate == pytest.approx(2 * 800 * 0.9)
    assert any("90% cross-node efficiency (assumed: no model of the workload's step" in x
               for x in r.reasons)


# --- CLI -------------------------------------------------------------------------------------


def fleet_document(tmp_path, collectives, skipped=None):
    now = datetime(2025, 6, 1, tzinfo=timezone.utc).isoformat()
    doc = {"kind": "fleet-run", "id": "F9", "address": "auto", "profile": "quick",
           "tool_version": "t", "started_at": now,
           "collectives": [m.model_dump(mode="json") for m in collectives],
           "collectives_skipped": skipped,
           "expectation": {"source": "the majority of 2 nodes", "gpu_model": H100_NAME}}
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(doc))
    return path


def invoke(*args):
    return CliRunner().invoke(cli.recommend_app, list(args))


def test_cli_reads_a_fleet_run_file(monkeypatch, tmp_path):
    monkeypatch.setattr(cli, "load_offers", lambda path: [P5])
    path = fleet_document(tmp_path, fleet_measurements(1.0))
    res = invoke("train", "--params", "1B", "--tokens", "100B", "--layers", "16", "--hidden",
                 "2048", "--deadline", "40h", "--allreduce-run", str(path), "--db",
                 str(tmp_path / "s.db"), "--json")
    assert res.exit_code == 0, res.output
    (rec,) = json.loads(res.stdout)["ranked"]
    eff = hand_efficiency(2, 989.5e12 * 0.4 * 0.95, 2e9, 1.0)
    assert rec["nodes"] == 2 and math.isclose(rec["hours"],
                                              6e20 / (2 * H100_RATE * eff) / 3600)
    assert any("measured in fleet run F9" in x for x in rec["reasons"])


@pytest.mark.parametrize(("which", "message"), [
    ("inside", "its collectives ran inside one machine"),
    ("skipped", "has no all-reduce measured across nodes: not asked for"),
    ("missing", "no store at"),
    ("garbage", "not valid JSON"),
])
def test_cli_refuses_what_is_not_a_cross_node_all_reduce(monkeypatch, tmp_path, which,
                                                         message):
    monkeypatch.setattr(cli, "load_offers", lambda path: [P5])
    ref = {"inside": str(FIXTURES / "runs" / "h200-2gpu-collectives-native.json"),
           "skipped": str(fleet_document(tmp_path, [], "not asked for (--no-collectives)")),
           "missing": "nope", "garbage": str(tmp_path / "x.json")}[which]
    (tmp_path / "x.json").write_text("{")
    res = invoke("train", "--params", "1B", "--tokens", "100B", "--allreduce-run", ref,
                 "--db", str(tmp_path / "s.db"))
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
