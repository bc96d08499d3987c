"""The fleet's side of the store: the index rows written beside each run (which node, which
GPUs), the fleet runs, and the rows `fleet report` reads, without parsing run documents."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Select, func, select

from gpuaudit.fleet.records import FindingRow, FleetRows, GpuRow, NodeRow
from gpuaudit.model import Run

from .schema import findings, fleet_runs, measurements, run_gpus, run_nodes, runs


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


def _plain_rows(conn: Connection, query: Select[Any]) -> list[tuple[Any, ...]]:
    """The rows of `query` as the driver's own tuples, fetched at once. For the figures: a
    thousand 8-GPU nodes are a third of a million rows, and wrapping each in a SQLAlchemy Row
    (then a named tuple) costs more than the query; PostgreSQL's binary format spares
    parsing each number from text. The values are literals rendered by SQLAlchemy (a kind
    name of our own), so no parameters cross the driver here."""
    sql = str(query.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    binary = {"binary": True} if conn.dialect.name == "postgresql" else {}
    cursor = conn.connection.cursor(**binary)
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
    ids = {n.run_id for n in latest} | {n.run_id for n in previous}
    # Each node's two newest runs, picked by the database the way the loop above picks them
    # (one query each, not thousands of ids sent back); a node --since leaves out is
    # dropped here.
    rank = func.row_number().over(partition_by=run_nodes.c.hostname,
                                  order_by=(run_nodes.c.started_at.desc(),
                                            run_nodes.c.run_id.desc()))
    ranked = select(run_nodes.c.run_id, rank.label("rn")).where(
        run_nodes.c.kind == kind).subquery()
    two_newest = select(ranked.c.run_id).where(ranked.c.rn <= 2)
    gpus = [GpuRow._make(r) for r in conn.execute(
        select(run_gpus.c.run_id, run_gpus.c.gpu_index, run_gpus.c.name, run_gpus.c.uuid,
               run_gpus.c.serial, run_gpus.c.vbios_version)
        .where(run_gpus.c.run_id.in_(two_newest))) if r[0] in ids]
    figures = _plain_rows(conn, select(
        measurements.c.run_id, measurements.c.suite, measurements.c.name,
        measurements.c.unit, measurements.c.value, measurements.c.gpu_index)
        .where(measurements.c.run_id.in_(two_newest), measurements.c.value.is_not(None)))
    if len(ids) < 2 * len(seen):  # some node had fewer than two runs, or --since left it out
        figures = [f for f in figures if f[0] in ids]
    found = [FindingRow._make(r) for r in conn.execute(
        select(findings.c.run_id, findings.c.code, findings.c.severity,
               findings.c.gpu_index, findings.c.message)
        .where(findings.c.run_id.in_(two_newest), findings.c.severity.in_(("WARN", "FAIL"))))
        if r[0] in ids]
    documents: list[str] = []
    if has_fleet_runs:
        q = select(fleet_runs.c.document).order_by(fleet_runs.c.started_at.desc()).limit(20)
        if since is not None:
            q = q.where(fleet_runs.c.started_at >= since)
        documents = list(conn.scalars(q))
    return FleetRows(latest=latest, previous=previous, gpus=gpus, figures=figures,
                     findings=found, fleet_runs=documents)
