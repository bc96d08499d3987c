"""The `fleet run` driver's bookkeeping at a fleet's size: 400 simulated 8-GPU nodes
(gpuaudit.fleet.simulated, Ray's API in this process), a few failing, hanging and dying,
every run saved in a real SQLite store and judged as a fleet. (The driver's time and memory
at 1,000 nodes are measured by validation/fleet/scale_run.py, not here.)"""

from __future__ import annotations

from gpuaudit.fleet.records import NodeState
from gpuaudit.fleet.runner import run_fleet
from gpuaudit.fleet.simulated import SimulatedRay
from gpuaudit.fleet.synthetic import Plant, SyntheticFleet
from gpuaudit.store import Store

NODES = 400


def test_every_simulated_node_is_accounted_for_saved_and_judged(tmp_path):
    fleet = SyntheticFleet(nodes=NODES, gpus_per_node=8, seed=11,
                           plants={9: Plant(driver_version="570.86.15")})
    sim = SimulatedRay(fleet, duration_s=(0.2, 3.0), fail=frozenset({3}),
                       hang=frozenset({5}), die=frozenset({7}), seed=11)
    seen: dict[str, set[str]] = {}
    with Store(tmp_path / "fleet.db") as store:
        def save(run):
            store.save(run)
            return True, None

        def progress(p):
            seen.setdefault(p.node.node_id, set()).add(p.state)

        # The hung node is waited for this long: past the slowest healthy node's 3 s, with
        # room for the driver to take and save the 400 results on a loaded 2-core machine.
        result = run_fleet("simulated", ray=sim, save=save, on_progress=progress,
                           collectives=False, timeout_s=10.0, poll_s=0.2)
        stored = store.list_runs(limit=NODES + 10)
    by_host = {n.hostname: n for n in result.nodes}
    assert len(result.nodes) == NODES and len(by_host) == NODES  # none merged, none missing
    assert by_host[fleet.hostname(3)].state is NodeState.FAILED
    assert "illegal memory access" in by_host[fleet.hostname(3)].reason
    assert by_host[fleet.hostname(5)].state is NodeState.TIMED_OUT
    assert by_host[fleet.hostname(7)].state is NodeState.LOST
    done = [n for n in result.nodes if n.state is NodeState.DONE]
    assert len(done) == NODES - 3 and all(n.saved for n in done)
    assert {s.id for s in stored} == {n.run_id for n in done}
    # Judged as a fleet: only the node on the other driver is not what it expects.
    assert [n.hostname for n in result.nodes if n.problems] == [fleet.hostname(9)]
    assert result.expectation.gpu_count == 8
    # Every node was seen waiting, running and ending.
    assert all({"waiting", "running"} <= states and len(states) == 3
               for states in seen.values())
