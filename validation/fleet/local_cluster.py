"""A local Ray cluster of one Ray node per GPU (each raylet sees only its GPU through
CUDA_VISIBLE_DEVICES, as separate hosts would), then `gpuaudit fleet run` and `fleet report`
against it. Only this script's own Ray processes are started and stopped (never `ray stop`,
which ends every Ray of the user on the machine).

    python validation/fleet/local_cluster.py OUTDIR [--gpus N] [--profile quick]

Writes OUTDIR/fleet_run.json, fleet_run.err, fleet_report.txt and fleet.db; prints a summary.
With --gpus N on a machine without GPUs, the nodes offer N "GPUs" to Ray that are not there
(a rehearsal: the audits find no GPU, the all-reduce runs with gloo).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--gpus", type=int, default=None, help="nodes to start [default: GPUs]")
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--timeout", default="8m")
    args = ap.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray.cluster_utils import Cluster

    count = args.gpus
    if count is None:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
        count = len(listed.stdout.splitlines()) if listed.returncode == 0 else 0
    if count < 1:
        print("no GPU here: give --gpus N for a rehearsal", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    node = {"num_cpus": 4, "num_gpus": 1}
    cluster = Cluster(initialize_head=True, head_node_args={
        **node, "env_vars": _env(0), "include_dashboard": False})
    try:
        for i in range(1, count):
            cluster.add_node(**node, env_vars=_env(i))
        cluster.wait_for_nodes()
        print(f"ray {ray.__version__}: {count} node(s), one GPU each, at {cluster.address}")
        db = args.out / "fleet.db"
        started = time.time()
        with open(args.out / "fleet_run.json", "w") as out, \
                open(args.out / "fleet_run.err", "w") as err:
            rc = subprocess.run([sys.executable, "-m", "gpuaudit", "fleet", "run", "--address",
                                 cluster.address, "--profile", args.profile, "--timeout",
                                 args.timeout, "--db", str(db), "--json"],
                                stdout=out, stderr=err).returncode
        print(f"fleet run: rc={rc} wall_s={time.time() - started:.1f}")
        with open(args.out / "fleet_report.txt", "w") as out:
            rc = subprocess.run([sys.executable, "-m", "gpuaudit", "fleet", "report", "--all",
                                 "--db", str(db)], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "COLUMNS": "200"}).returncode
        print(f"fleet report: rc={rc}")
        summary(args.out / "fleet_run.json")
    finally:
        cluster.shutdown()
    return 0


def summary(path: Path) -> None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        print(f"no fleet run document: {exc}")
        return
    for n in doc["nodes"]:
        print(f"node {n['ray_node_id'][:12]} {n['hostname']} {n['state']} {n['verdict']} "
              f"{n['elapsed_s']} s {n['reason'] or ''}")
    for m in doc["collectives"]:
        p = m["params"]
        print(f"{m['name']} size={p.get('size_bytes')} busbw={m['value']} GB/s "
              f"ranks={p.get('ranks')} nodes={p.get('nodes')} backend={p.get('backend')} "
              f"verified={m['verified']} {m.get('skipped_reason') or ''}")
    print("collectives skipped:", doc["collectives_skipped"])


def _env(gpu: int) -> dict[str, str]:
    """One GPU per node, and a name of its own in the fleet (the raylets share a host)."""
    return {"CUDA_VISIBLE_DEVICES": str(gpu), "GPUAUDIT_NODE_NAME": f"gpu{gpu}"}


if __name__ == "__main__":
    sys.exit(main())
