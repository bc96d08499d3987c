#!/usr/bin/env python3
"""Scrape latency of the Prometheus exporter for an 8-GPU host (issue #4: p99 under 20 ms).

    python3 scripts/bench_exporter.py [--n 2000] [--dcgm-names]

Builds an 8-GPU Sample with every reading filled, 20 processes and some XIDs, serves it with
gpuaudit.telemetry.exporter.serve in a child process (the client must not share a GIL with the
server, as Prometheus does not) and scrapes it N times the way Prometheus does: a new TCP
connection each time, Prometheus's Accept header (OpenMetrics first) and gzip. Prints p50/p99/
max in ms and the exposition size; exit 1 when p99 misses the target.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import multiprocessing as mp
import platform
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone

from gpuaudit.model import GpuSample, ProcessSample, Sample, XidEvent
from gpuaudit.telemetry import exporter
from gpuaudit.telemetry.metrics import IdleState, XidTally
from gpuaudit.telemetry.state import Latest, MonitorState

# What Prometheus 2.42 sends (scrape/scrape.go); the OpenMetrics answer is the one it gets.
HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
              "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
    "User-Agent": "Prometheus/2.42.0",
    "X-Prometheus-Scrape-Timeout-Seconds": "10",
    "Connection": "close",
}
GPUS = 8
PROCESSES = 20


def eight_gpus() -> MonitorState:
    t = datetime.now(timezone.utc)
    gpus = []
    for i in range(GPUS):
        xids = ()
        if i == 3:
            xids = (XidEvent(gpu=i, code=79, time=t),)
        elif i == 5:
            xids = (XidEvent(gpu=i, code=48, time=t - timedelta(seconds=30)),
                    XidEvent(gpu=i, code=48, time=t), XidEvent(gpu=i, code=13, time=t))
        procs = tuple(
            ProcessSample(pid=1000 + p, user=f"user{p % 4}", command=f"python train.py --rank {p}",
                          used_memory_bytes=(p + 1) << 30)
            for p in range(PROCESSES) if p % GPUS == i)
        gpus.append(GpuSample(
            index=i, uuid=f"GPU-{i:08x}-1111-2222-3333-444455556666", name="NVIDIA H200",
            utilization_gpu_pct=90.0 + i, utilization_memory_pct=40.0 + i,
            memory_used_bytes=(60 + i) << 30, memory_total_bytes=150754820096,
            power_w=650.5 + i, power_limit_w=700.0, energy_j=1.5e7 + i * 1000.25,
            temperature_gpu_c=60.0 + i, temperature_memory_c=70.0 + i,
            sm_clock_mhz=1980, memory_clock_mhz=2619,
            clock_event_reasons=("sw_power_cap", "sw_thermal_slowdown"),
            pcie_link_gen=5, pcie_link_gen_max=5, pcie_link_width=16, pcie_link_width_max=16,
            pcie_rx_bytes_per_s=1.2e9 + i, pcie_tx_bytes_per_s=3.4e8 + i,
            nvlink_rx_bytes=10**13 + i, nvlink_tx_bytes=2 * 10**13 + i,
            ecc_corrected_volatile=i, ecc_uncorrected_volatile=0, ecc_uncorrected_aggregate=0,
            remapped_rows_correctable=i, remapped_rows_uncorrectable=0,
            remapping_pending=False, remapping_failed=False,
            sm_activity_pct=85.0, sm_occupancy_pct=45.0, tensor_activity_pct=60.0,
            dram_bandwidth_util_pct=35.0, fp64_activity_pct=0.5, fp32_activity_pct=12.0,
            fp16_activity_pct=3.0, gpm_pcie_rx_bytes_per_s=1.1e9, gpm_pcie_tx_bytes_per_s=3e8,
            gpm_nvlink_rx_bytes_per_s=1.5e11, gpm_nvlink_tx_bytes_per_s=1.4e11,
            processes=procs, xid_events=xids,
        ))
    sample = Sample(time=t, hostname="bench-node", interval_s=1.0, gpus=tuple(gpus))
    tally = XidTally()
    tally.add(sample)
    idle = {i: IdleState(idle=False, idle_seconds_total=120.0 * i) for i in range(GPUS)}
    return MonitorState(sample=sample, xids=tally, idle=idle)


def serve_child(conn, dcgm_names: bool) -> None:
    latest = Latest(eight_gpus())
    srv = exporter.serve(latest, port=0, dcgm_names=dcgm_names)
    conn.send(srv.port)
    conn.recv()  # until the parent is done
    srv.close()


def scrape(port: int) -> tuple[float, int, bytes]:
    """One scrape on a fresh connection: seconds taken, bytes on the wire, the body."""
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics", headers=HEADERS)
    resp = c.getresponse()
    body = resp.read()
    c.close()
    dt = time.perf_counter() - t0
    if resp.status != 200:
        raise RuntimeError(f"scrape answered {resp.status}")
    if resp.getheader("Content-Encoding") == "gzip":
        return dt, len(body), gzip.decompress(body)
    return dt, len(body), body


def pct(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    k = max(0, min(len(sorted_values) - 1, round(q / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[k]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="scrapes to time")
    ap.add_argument("--warmup", type=int, default=50, help="scrapes before timing")
    ap.add_argument("--dcgm-names", action="store_true", help="also expose dcgm-exporter names")
    ap.add_argument("--target-ms", type=float, default=20.0, help="p99 target")
    args = ap.parse_args()

    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(target=serve_child, args=(child, args.dcgm_names))
    proc.start()
    try:
        if not parent.poll(30):
            raise RuntimeError("the exporter did not start within 30 s")
        port = parent.recv()
        for _ in range(args.warmup):
            scrape(port)
        times, wire, body = [], 0, b""
        for _ in range(args.n):
            dt, wire, body = scrape(port)
            times.append(dt * 1000)
    finally:
        parent.send("stop")
        proc.join(10)
    text = body.decode()
    if 'gpu="7"' not in text or "# EOF" not in text:
        raise RuntimeError("the scrape did not return the 8-GPU OpenMetrics exposition")
    series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    times.sort()
    p50, p99, worst = pct(times, 50), pct(times, 99), times[-1]
    print(f"exporter scrape latency, {GPUS} GPUs, {PROCESSES} processes, "
          f"dcgm_names={args.dcgm_names}")
    print(f"  machine: {platform.node()}, {mp.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"  scrapes: {args.n} after {args.warmup} warm-ups, a new connection each, gzip")
    print(f"  p50 {p50:.2f} ms  p99 {p99:.2f} ms  max {worst:.2f} ms  "
          f"mean {statistics.fmean(times):.2f} ms  min {times[0]:.2f} ms")
    print(f"  exposition: {series} series, {len(body)} bytes (OpenMetrics), {wire} bytes gzip")
    ok = p99 < args.target_ms
    print(f"  target p99 < {args.target_ms:g} ms: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
