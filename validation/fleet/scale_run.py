"""The `fleet run` driver at scale: `run_fleet` over NODES simulated GPU nodes
(gpuaudit.fleet.simulated: Ray's API in this process, each node returning a synthetic 8-GPU
audit) with every run saved to a real store, as the CLI does. A few nodes are planted to
fail, hang and die, so the bookkeeping runs at that scale too.

    python validation/fleet/scale_run.py [--nodes 1000] [--gpus 8] [--spread 60] [--samples 0]
                                      [--db URL]

Prints one JSON document: the driver's wall and CPU time (less the time the simulation spent
making the nodes' documents), its peak memory (RSS), the time per node spent parsing and
saving, and the outcome counts. Ray's own costs (scheduling, transport) are not in it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from gpuaudit.fleet.records import NodeState
from gpuaudit.fleet.runner import run_fleet
from gpuaudit.fleet.simulated import SimulatedRay
from gpuaudit.fleet.synthetic import SyntheticFleet
from gpuaudit.store import Store


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--spread", type=float, default=60.0,
                    help="the nodes finish uniformly over this many seconds (the hung node "
                         "holds the run to its timeout, 30 s after that)")
    ap.add_argument("--samples", type=int, default=0,
                    help="samples per figure in each document (200: a real audit's 0.65 MB)")
    ap.add_argument("--db", help="store URL [default: a fresh SQLite file]")
    args = ap.parse_args()
    fleet = SyntheticFleet(nodes=args.nodes, gpus_per_node=args.gpus, seed=5,
                           samples=args.samples)
    n = args.nodes
    fail, hang, die = frozenset({n // 7}), frozenset({n // 5}), frozenset({n // 3})
    sim = SimulatedRay(fleet, duration_s=(1.0, 1.0 + args.spread), fail=fail, hang=hang,
                       die=die, seed=5)
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or str(Path(tmp) / "fleet.db")
        store = Store(db)
        save_s = [0.0]
        events = [0]

        def save(run):
            t = time.perf_counter()
            store.save(run)
            save_s[0] += time.perf_counter() - t
            return True, None

        def progress(_):
            events[0] += 1

        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        cpu0, wall0 = time.process_time(), time.perf_counter()
        result = run_fleet("simulated", ray=sim, save=save, on_progress=progress,
                           collectives=False, timeout_s=args.spread + 30.0, poll_s=0.5)
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        store.close()
    states: dict[str, int] = {}
    for o in result.nodes:
        states[o.state.value] = states.get(o.state.value, 0) + 1
    done = states.get(NodeState.DONE.value, 0)
    doc = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "machine": f"{platform.node()} ({os.cpu_count()} CPUs, {platform.machine()}), "
                   f"Python {platform.python_version()}",
        "nodes": n, "gpus_per_node": args.gpus, "finish_spread_s": args.spread,
        "store": "given" if args.db else "SQLite file",
        "states": states, "progress_events": events[0],
        "driver": {
            "wall_s": round(wall, 1),
            "cpu_s": round(cpu - sim.document_s, 1),
            "cpu_per_node_ms": round(1000 * (cpu - sim.document_s) / n, 1),
            "save_per_run_ms": round(1000 * save_s[0] / max(done, 1), 1),
            "peak_rss_mb": round(rss / 1024, 1), "rss_growth_mb": round((rss - rss0) / 1024, 1),
        },
        "simulation_document_s": round(sim.document_s, 1),
    }
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
