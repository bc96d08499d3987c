"""The fleet's side of the store: the index rows written beside each run (which node, which
GPUs), the fleet runs, and the rows `fleet report` reads, without parsing run documents."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Select, select

from gpuaudit.fleet.records import FindingRow, FleetRows, GpuRow, NodeRow
from gpuaudit.model import Run

from .schema import findings, fleet_runs, measurements, run_gpus, run_nodes, runs

# Bound parameters per IN (...) list: well under SQLite's limit, few round trips on PostgreSQL.
_CHUNK = 900


def index_rows(run: Run) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The run_nodes row and run_gpus rows that index `run` (none without a machine)."""
    machine = run.machine
    if machine is None:
        return None, []
    node = run.node
    # The column holds the node's name in the fleet (a Kubernetes node name, or a host name
    # made unique within its fleet run): a node's audits are grouped by it.
    name = node.node_name if node and node.node_name else machine.host.hostname
    node_row = {
        "run_id": run.id, "hostname": name, "kind": run.kind,
        "started_at": run.started_at,
        "ray_node_id": node.ray_node_id if node else None,
        "node_ip": node.node_ip if node else None,
        "fleet_id": node.fleet_id if node else None,
        "driver_version": machine.driver_version,
        "gpu_summary": None,  # filled by the caller, which owns the summary's format
    }
    gpu_rows = [{"run_id": run.id, "gpu_index": g.index, "name": g.name, "uuid": g.uuid,
                 "serial": g.serial, "vbios_version": g.vbios_version} for g in machine.gpus]
    return node_row, gpu_rows


def _chunks(ids: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(ids), _CHUNK):
        yield ids[start:start + _CHUNK]


def _plain_rows(conn: Connection, query: Select[Any]) -> list[tuple[Any, ...]]:
    """The rows of `query` as the driver's own tuples, fetched at once. For the figures: a
    thousand 8-GPU nodes are a third of a million rows, and wrapping each in a SQLAlchemy Row
    (then a named tuple) costs more than the query. The values are literals rendered by
    SQLAlchemy (run ids from the store itself), so no parameters cross the driver here."""
    sql = str(query.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    cursor = conn.connection.cursor()
    try:
        cursor.execute(sql)
        return list(cursor.fetchall())
    finally:
        cursor.close()


def fleet_rows(conn: Connection, *, since: datetime | None, kind: str = "run",
               has_fleet_runs: bool = True) -> FleetRows:
    """Each host's latest `kind` run since `since` and the one before it (at any time), with
    their GPUs, figures (not skipped) and WARN/FAIL findings; the fleet runs since `since`,
    newest first."""
    query = (select(run_nodes.c.run_id, run_nodes.c.hostname, run_nodes.c.started_at,
                    run_nodes.c.ray_node_id, run_nodes.c.node_ip, run_nodes.c.fleet_id,
                    run_nodes.c.driver_version, run_nodes.c.gpu_summary, runs.c.verdict)
             .join(runs, runs.c.id == run_nodes.c.run_id)
             .where(run_nodes.c.kind == kind)
             .order_by(run_nodes.c.hostname, run_nodes.c.started_at.desc(),
                       run_nodes.c.run_id.desc()))
    latest: list[NodeRow] = []
    previous: list[NodeRow] = []
    seen: dict[str, int] = {}
    for row in conn.execute(query):
        node = NodeRow(*row)
        count = seen.get(node.hostname, 0)
        if count == 0:
            if since is not None and node.started_at < since:
                seen[node.hostname] = 2  # no audit in the period: the host is not in it
                continue
            latest.append(node)
        elif count == 1:
            previous.append(node)
        seen[node.hostname] = count + 1
    ids = [n.run_id for n in latest] + [n.run_id for n in previous]
    gpus: list[GpuRow] = []
    figures: list[tuple[Any, ...]] = []
    found: list[FindingRow] = []
    for part in _chunks(ids):
        gpus += map(GpuRow._make, conn.execute(
            select(run_gpus.c.run_id, run_gpus.c.gpu_index, run_gpus.c.name, run_gpus.c.uuid,
                   run_gpus.c.serial, run_gpus.c.vbios_version)
            .where(run_gpus.c.run_id.in_(part))).all())
        figures += _plain_rows(conn, select(
            measurements.c.run_id, measurements.c.suite, measurements.c.name,
            measurements.c.unit, measurements.c.value, measurements.c.gpu_index)
            .where(measurements.c.run_id.in_(part), measurements.c.value.is_not(None)))
        found += map(FindingRow._make, conn.execute(
            select(findings.c.run_id, findings.c.code, findings.c.severity,
                   findings.c.gpu_index, findings.c.message)
            .where(findings.c.run_id.in_(part), findings.c.severity.in_(("WARN", "FAIL"))))
            .all())
    documents: list[str] = []
    if has_fleet_runs:
        q = select(fleet_runs.c.document).order_by(fleet_runs.c.started_at.desc()).limit(20)
        if since is not None:
            q = q.where(fleet_runs.c.started_at >= since)
        documents = list(conn.scalars(q))
    return FleetRows(latest=latest, previous=previous, gpus=gpus, figures=figures,
                     findings=found, fleet_runs=documents)
