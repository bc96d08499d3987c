"""Small complete runs and a look under the store's API, for the store's tests and those
that keep or read runs."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

import gpuaudit.store.database as store_module
from gpuaudit.model import Finding, Gpu, Host, Machine, Measurement, Run, Severity
from gpuaudit.store import Store
from gpuaudit.store import schema as store_schema

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)


def make_run(
    n: int = 0,
    *,
    run_id: str | None = None,
    kind: str = "run",
    gpus: int = 1,
    machine: bool = True,
    fails: int = 1,
    tz: timezone = timezone.utc,
) -> Run:
    """A small but complete Run: started n minutes after T0, `fails` FAIL + one WARN finding."""
    host = Host(hostname=f"node-{n}", python_version="3.11.7", cpu_threads=64)
    snapshot = Machine(
        captured_at=T0 + timedelta(minutes=n, seconds=1),
        host=host,
        driver_version="550.54.15",
        gpus=tuple(Gpu(index=i, name="NVIDIA H200", memory_total_bytes=150_754_820_096,
                       cpu_affinity=(0, 1, 2)) for i in range(gpus)),
        xid_counts={79: 1},
    )
    fail = [Finding(code="pcie.degraded", severity=Severity.FAIL, gpu_index=0,
                    message="PCIe link at Gen3 x16, the slot allows Gen5 x16",
                    evidence={"gen_current": 3, "gen_max": 5}, advice="reseat the card")] * fails
    findings = (*fail,
                Finding(code="ecc.corrected", severity=Severity.WARN, gpu_index=0,
                        message="12 corrected ECC errors since boot"),
                Finding(code="driver.ok", severity=Severity.PASS, message="driver is current"))
    measurements = (
        Measurement(suite="matmul", name="bf16", unit="TFLOP/s", value=701.5,
                    samples=(700.25, 701.5, 702.0), warmup=3, spread_low=700.25,
                    spread_high=702.0, spread_kind="min-max", spec_value=989.4,
                    pct_of_spec=70.9, gpu_index=0, params={"m": 8192, "dtype": "bf16"},
                    verified=True),
        Measurement(suite="memory", name="device_bandwidth", unit="GB/s", value=None,
                    skipped_reason="out of memory"),
    )
    start = (T0 + timedelta(minutes=n)).astimezone(tz)
    return Run(
        id=run_id or uuid.uuid4().hex[:12],
        kind=kind,
        started_at=start,
        finished_at=start + timedelta(seconds=42),
        tool_version="0.1.0",
        command=("gpuaudit", "run"),
        source="live",
        machine=snapshot if machine else None,
        findings=findings,
        measurements=measurements,
    )


def raw_engine(url: str) -> sa.Engine:
    """An engine of our own on the store's database, to look under the store's API."""
    parsed = sa.make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return sa.create_engine(parsed)


V1_TABLES = ("gpuaudit_meta", "runs", "findings", "measurements")


def create_v1_database(url: str, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """A database as gpuaudit with store schema 1 made it: the same Store code path with the
    schema-1 tables and version, and two runs saved through it."""
    v1 = sa.MetaData()
    for name in V1_TABLES:
        store_schema.metadata.tables[name].to_metadata(v1)
    with monkeypatch.context() as patch:
        patch.setattr(store_module.schema, "metadata", v1)
        patch.setattr(store_module, "STORE_SCHEMA_VERSION", 1)
        runs = [make_run(n, run_id=f"eeee{n:08d}") for n in range(2)]
        with Store(url) as old:
            for run in runs:
                old.save(run)
    return runs


def stored_version_and_tables(url: str) -> tuple[str, set[str]]:
    engine = raw_engine(url)
    try:
        with engine.connect() as conn:
            version = conn.execute(sa.text("SELECT value FROM gpuaudit_meta"
                                           " WHERE key = 'store_schema_version'")).scalar_one()
            return version, set(sa.inspect(conn).get_table_names())
    finally:
        engine.dispose()
