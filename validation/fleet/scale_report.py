"""How long `fleet report` takes over a big fleet: NODES nodes × GPUS GPUs of synthetic runs
(gpuaudit.fleet.synthetic: real H200 medians, 1 % noise, a few planted faults), two audits per
node (so every node also has its "changed since" comparison), in a fresh PostgreSQL database.

    # with GPUAUDIT_TEST_PG_URL naming a server where this user may create databases
    python validation/fleet/scale_report.py [--nodes 1000] [--gpus 8] [--repeat 5]

Prints one JSON document: the write side (runs saved, seconds, rows, bytes of the database)
and the report's wall time per repeat (median and worst), with the machine it ran on.
The database is dropped afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from gpuaudit.fleet.synthetic import Plant, SyntheticFleet
from gpuaudit.report.fleet_view import fleet_report
from gpuaudit.store import Store

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--full-size-runs", type=int, default=100,
                    help="also save this many runs of a real audit's document size, timed")
    ap.add_argument("--pg", default=os.environ.get("GPUAUDIT_TEST_PG_URL"))
    args = ap.parse_args()
    if not args.pg:
        print("set GPUAUDIT_TEST_PG_URL or give --pg", file=sys.stderr)
        return 2
    base = sa.make_url(args.pg).set(drivername="postgresql+psycopg")
    name = f"gpuaudit_fleet_bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = base.set(drivername="postgresql", database=name).render_as_string(hide_password=False)
    plants = {7: Plant(slow_gpu=3), 42: Plant(narrow_pcie_gpu=0), 420: Plant(slow_gpu=5)}
    fleet = SyntheticFleet(nodes=args.nodes, gpus_per_node=args.gpus, seed=1, plants=plants)
    try:
        with Store(url) as store:
            started = time.perf_counter()
            saved = 0
            for round_, when in enumerate((T0, T0 + timedelta(days=7))):
                for run in fleet.runs(when, round_=round_, fleet_id=f"bench{round_}"):
                    store.save(run)
                    saved += 1
            write_s = time.perf_counter() - started
        size = _db_bytes(admin, name)
        eng = sa.create_engine(base.set(database=name))
        with eng.connect() as conn:
            rows = {t: conn.exec_driver_sql(f"SELECT count(*) FROM {t}").scalar()
                    for t in ("runs", "measurements", "findings", "run_nodes", "run_gpus")}
            conn.exec_driver_sql("ANALYZE")
        eng.dispose()
        times = []
        for _ in range(args.repeat):
            with Store(url, read_only=True) as store:
                t = time.perf_counter()
                report = fleet_report(store)
                times.append(time.perf_counter() - t)
        # The write load of documents the size of real 8-GPU audits (after the report was
        # timed: these are other nodes' runs).
        full = SyntheticFleet(nodes=args.full_size_runs, gpus_per_node=args.gpus, seed=2,
                              samples=200, prefix="full-node")
        full_runs = list(full.runs(T0 + timedelta(days=14), round_=2))
        doc_bytes = [len(r.model_dump_json()) for r in full_runs]
        with Store(url) as store:
            started = time.perf_counter()
            for run in full_runs:
                store.save(run)
            full_s = time.perf_counter() - started
        bad = sorted(b.hostname for b in report.bad_nodes)
        doc = {
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
            "machine": f"{platform.node()} ({os.cpu_count()} CPUs, {platform.machine()}), "
                       f"Python {platform.python_version()}",
            "postgresql": _pg_version(admin),
            "nodes": args.nodes, "gpus_per_node": args.gpus, "audits_per_node": 2,
            "write": {"runs": saved, "seconds": round(write_s, 1),
                      "runs_per_s": round(saved / write_s, 1), "rows": rows,
                      "database_bytes": size},
            "write_full_size": {"runs": len(full_runs),
                                "document_bytes_mean": round(statistics.mean(doc_bytes)),
                                "seconds": round(full_s, 1),
                                "runs_per_s": round(len(full_runs) / full_s, 1),
                                "mb_per_s": round(sum(doc_bytes) / full_s / 1e6, 1),
                                "database_bytes_added": _db_bytes(admin, name) - size},
            "report": {"seconds_median": round(statistics.median(times), 3),
                       "seconds_max": round(max(times), 3), "repeats": len(times),
                       "figures_judged": len(report.spreads), "gpus": report.gpus,
                       "changed_nodes": len(report.changed), "bad_nodes": bad},
        }
        print(json.dumps(doc, indent=2))
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()
    return 0


def _db_bytes(admin: sa.Engine, name: str) -> int:
    with admin.connect() as conn:
        return int(conn.exec_driver_sql(f"SELECT pg_database_size('{name}')").scalar())


def _pg_version(admin: sa.Engine) -> str:
    with admin.connect() as conn:
        return str(conn.exec_driver_sql("SHOW server_version").scalar())


if __name__ == "__main__":
    sys.exit(main())
