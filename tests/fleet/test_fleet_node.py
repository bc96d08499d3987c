"""What a node runs, outside Ray: the replayed audit's events and its tagged run."""

from __future__ import annotations

import pytest

from gpuaudit.errors import BadInputError
from gpuaudit.fleet.cluster import ClusterNode, choose
from gpuaudit.fleet.node import NODE_NAME_ENV, REPLAY_ENV, audit_node
from gpuaudit.model import Severity, load_run
from tests.support.fleet_replays import SLOW, documents, write_plans


def test_a_replayed_node_streams_progress_then_its_tagged_run(tmp_path, monkeypatch):
    plans = write_plans(tmp_path, hold_s=0.0)
    monkeypatch.setenv(REPLAY_ENV, str(plans["h200-b"]))
    monkeypatch.setenv(NODE_NAME_ENV, "gpu-pool-7")  # as the downward API sets it in a pod
    events = list(audit_node("quick", fleet_id="f00d"))
    kinds = [e["event"] for e in events]
    assert kinds[0] == "step" and kinds[-1] == "run" and kinds.count("run") == 1
    assert {"event": "identity", "hostname": "h200-b", "node_name": "gpu-pool-7",
            "gpus": 2} in events
    run = load_run(events[-1]["document"])
    assert run.kind == "run" and run.node.hostname == "h200-b" and run.node.fleet_id == "f00d"
    assert run.node.node_name == "gpu-pool-7"
    assert run.node.ray_node_id is None  # not in Ray
    inspect_doc, bench_doc, _ = documents()["h200-b"]
    assert run.node.gpu_uuids == tuple(g["uuid"] for g in inspect_doc["machine"]["gpus"])
    assert len(run.measurements) == len(bench_doc["measurements"])
    # The box itself flags its slow GPU too (straggler within the node), from the figures;
    # the recording's own straggler (GPU 1's launch round trip, GPU 0 once swapped) stays.
    stragglers = {(f.gpu_index, f.evidence["suite"]) for f in run.findings
                  if f.code == "bench.straggler"}
    assert stragglers == {(1, "matmul"), (1, "memory"), (0, "latency")}
    bf16 = {m.gpu_index: m.value for m in run.measurements if m.name == "bf16"}
    assert bf16[1] / bf16[0] == pytest.approx(SLOW, rel=0.05)


def test_a_node_whose_replay_is_broken_raises_its_reason(tmp_path, monkeypatch):
    monkeypatch.setenv(REPLAY_ENV, str(tmp_path / "missing.json"))
    with pytest.raises(BadInputError, match=r"replay plan .*missing\.json"):
        list(audit_node())


def test_a_live_node_without_gpus_is_inspected_and_says_so(monkeypatch):
    monkeypatch.delenv(REPLAY_ENV, raising=False)
    monkeypatch.delenv(NODE_NAME_ENV, raising=False)
    events = list(audit_node(bench=False))
    run = load_run(events[-1]["document"])
    assert run.kind == "run" and run.source == "live" and run.machine is not None
    assert run.node.hostname == run.machine.host.hostname
    assert run.verdict in tuple(Severity)


def test_choosing_nodes():
    nodes = [ClusterNode(f"id{i}", f"h{i}", "10.0.0.1", 8) for i in range(3)]
    assert choose(nodes, None, "x:1") == nodes and choose(nodes, 2, "x:1") == nodes[:2]
    with pytest.raises(BadInputError, match="--nodes 4: the Ray cluster at x:1 has 3 GPU"):
        choose(nodes, 4, "x:1")
    with pytest.raises(BadInputError, match="has no node with GPUs"):
        choose([], None, "x:1")
