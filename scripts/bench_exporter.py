#!/usr/bin/env python3
"""Scrape latency of the Prometheus exporter for an 8-GPU host.

    python3 scripts/bench_exporter.py [--n 2000] [--dcgm-names]        one scraper (p99 < 20 ms)
    python3 scripts/bench_exporter.py --scrapers 100 --rounds 30 \\
        --trace tests/fixtures/telemetry/real/ddp-2gpu-lm-bf16.json     100 at once (p99 ≤ 100 ms)

    python3 scripts/bench_exporter.py --scrapers 100 --monitor [--trace FILE]
        `gpuaudit monitor --listen` itself: this machine's GPUs through NVML (or FILE replayed)

The exporter runs in a child process (the scrapers must not share its GIL, as Prometheus does
not). Without --trace it serves one 8-GPU state with every reading filled, 20 processes and
XIDs on two GPUs. With --trace (a recorded telemetry trace, widened to --gpus GPUs: GPU k
answers what recorded GPU k mod n did) the child runs the real monitor over it, looping, each
tick sampling every GPU, evaluating the shipped alert rules and the idle policy, publishing the
state the exporter serves — the work `gpuaudit monitor` does beside its scrapes.

Scrapes are made the way Prometheus 2.42 makes them: a new TCP connection each, its Accept
header (so the answer is OpenMetrics) and gzip. With --scrapers N, N scrapers (threads spread
over --procs processes) fire together every --period seconds, --rounds times: the worst case
of N Prometheus servers whose scrape times line up. Prints p50/p99/max in ms, failures and
the exposition size; exit 1 when p99 misses --target-ms or any scrape failed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import multiprocessing as mp
import os
import platform
import socket
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

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


def looped_trace(path: Path, gpus: int, seconds: float) -> tuple[dict, float]:
    """The recorded trace widened to `gpus` GPUs and repeated (times shifted a lap on each
    time) to last at least `seconds`; and its tick interval."""
    from tests.telemetry_traces import widen

    from gpuaudit.hw.telemetry_trace import read_trace

    trace = widen(read_trace(path), gpus)
    frames = trace["frames"]
    times = [datetime.fromisoformat(f["time"]) for f in frames]
    step = (times[-1] - times[0]) / max(1, len(times) - 1) if len(times) > 1 \
        else timedelta(seconds=1)
    lap = times[-1] - times[0] + step
    laps = max(1, math.ceil(seconds / lap.total_seconds()) + 1)
    out = []
    for k in range(laps):
        for f, t in zip(frames, times, strict=True):
            out.append({**f, "time": (t + k * lap).isoformat()})
    return {**trace, "frames": out}, step.total_seconds()


def serve_child(conn, dcgm_names: bool, trace: str | None, gpus: int, seconds: float) -> None:
    if trace is None:
        srv = exporter.serve(Latest(eight_gpus()), port=0, dcgm_names=dcgm_names)
        conn.send((srv.port, None))
        conn.recv()  # until the parent is done
        srv.close()
        return
    from gpuaudit.telemetry.setup import MonitorOptions, open_monitor

    doc, interval = looped_trace(Path(trace), gpus, seconds + 30)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        path.write_text(json.dumps(doc))
        stop = threading.Event()
        ticks = [0]
        tick_ms: list[float] = []
        with open_monitor(MonitorOptions(replay=path, speed=1.0, interval_s=interval)) as s:

            def run() -> None:
                t = time.perf_counter()
                for _ in s.ticks(stop):
                    ticks[0] += 1
                    now = time.perf_counter()
                    tick_ms.append((now - t) * 1000)
                    t = now

            loop = threading.Thread(target=run, daemon=True)
            loop.start()
            while s.monitor.latest.get().sample is None:
                time.sleep(0.01)
            srv = exporter.serve(s.monitor.latest, port=0, dcgm_names=dcgm_names)
            conn.send((srv.port, interval))
            conn.recv()
            stop.set()
            srv.close()
            loop.join(5)
    conn.send({"ticks": ticks[0]})


def start_monitor(args: argparse.Namespace, seconds: float):
    """`gpuaudit monitor --listen` on a free port, its first sample published: (the process,
    the port, its interval). With --trace, the widened trace replayed at its recorded pace."""
    import subprocess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "gpuaudit", "monitor", "--listen", f"127.0.0.1:{port}",
           "--no-history"]
    interval = 1.0
    if args.trace:
        doc, interval = looped_trace(Path(args.trace), args.gpus, seconds + 30)
        path = Path(tempfile.mkdtemp()) / "trace.json"
        path.write_text(json.dumps(doc))
        cmd += ["--replay", str(path), "--speed", "1"]
    else:
        cmd += ["--interval", "1s"]
    if args.dcgm_names:
        cmd.append("--dcgm-names")
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    request = _request(port)
    while time.monotonic() < deadline:
        try:
            _, status, body = scrape(port, request)
            if status == 200 and b"gpuaudit_up" in body:
                return proc, port, interval
        except OSError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"gpuaudit monitor exited {proc.returncode}")
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("gpuaudit monitor did not serve a sample within 60 s")


def _request(port: int) -> bytes:
    lines = ["GET /metrics HTTP/1.1", f"Host: 127.0.0.1:{port}",
             *(f"{k}: {v}" for k, v in HEADERS.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def scrape(port: int, request: bytes) -> tuple[float, int, bytes]:
    """One scrape on a fresh connection, connect to the last byte: (seconds, status, body)."""
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        chunks = []
        while True:
            got = sock.recv(65536)
            if not got:
                break
            chunks.append(got)
    dt = time.perf_counter() - t0
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
    if b"content-encoding: gzip" in head.lower():
        body = gzip.decompress(body)
    return dt, status, body


def scraper_proc(port: int, threads: int, rounds: int, period: float, start: float,
                 out) -> None:
    """`threads` scrapers, each scraping at start + k·period for k < rounds."""
    request = _request(port)
    results: list[tuple[float, int]] = []
    body_seen: list[bytes] = []
    lock = threading.Lock()

    def one() -> None:
        mine = []
        for k in range(rounds):
            wait = start + k * period - time.time()
            if wait > 0:
                time.sleep(wait)
            try:
                dt, status, body = scrape(port, request)
            except OSError:
                dt, status, body = float("nan"), 0, b""
            mine.append((dt * 1000, status))
            if not body_seen and status == 200:
                body_seen.append(body)
        with lock:
            results.extend(mine)

    workers = [threading.Thread(target=one) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    out.put((results, body_seen[0] if body_seen else b""))


def pct(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    k = max(0, min(len(sorted_values) - 1, round(q / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[k]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="one scraper: scrapes to time")
    ap.add_argument("--warmup", type=int, default=50, help="one scraper: scrapes before timing")
    ap.add_argument("--scrapers", type=int, default=1, help="scrapers firing together")
    ap.add_argument("--rounds", type=int, default=30, help="with --scrapers: bursts")
    ap.add_argument("--period", type=float, default=1.0, help="with --scrapers: s between bursts")
    ap.add_argument("--procs", type=int, default=0, help="client processes [default: CPUs, ≤ 8]")
    ap.add_argument("--trace", help="a recorded telemetry trace the monitor replays meanwhile")
    ap.add_argument("--gpus", type=int, default=GPUS, help="with --trace: GPUs to widen it to")
    ap.add_argument("--dcgm-names", action="store_true", help="also expose dcgm-exporter names")
    ap.add_argument("--monitor", action="store_true",
                    help="scrape `gpuaudit monitor --listen` (live GPUs, or --trace replayed)")
    ap.add_argument("--target-ms", type=float, default=0.0,
                    help="p99 target [default: 20 for one scraper, 100 for several]")
    args = ap.parse_args()
    target = args.target_ms or (20.0 if args.scrapers == 1 else 100.0)
    seconds = args.rounds * args.period + 10 if args.scrapers > 1 else 120

    parent, child = mp.Pipe()
    ctx = mp.get_context("spawn")
    monitor = None
    if args.monitor:
        monitor, port, interval = start_monitor(args, seconds)
        proc = None
    else:
        proc = ctx.Process(target=serve_child, args=(child, args.dcgm_names, args.trace,
                                                      args.gpus, seconds))
        proc.start()
    failed = 0
    info = {}
    try:
        if proc is not None:
            if not parent.poll(60):
                raise RuntimeError("the exporter did not start within 60 s")
            port, interval = parent.recv()
        request = _request(port)
        for _ in range(args.warmup):
            scrape(port, request)
        if args.scrapers == 1:
            times, body = [], b""
            for _ in range(args.n):
                dt, status, body = scrape(port, request)
                failed += status != 200
                times.append(dt * 1000)
        else:
            procs = args.procs or min(8, os.cpu_count() or 1)
            per = [args.scrapers // procs + (i < args.scrapers % procs) for i in range(procs)]
            queue = ctx.Queue()
            start = time.time() + 2.0
            clients = [ctx.Process(target=scraper_proc,
                                   args=(port, n, args.rounds, args.period, start, queue))
                       for n in per if n]
            for c in clients:
                c.start()
            times, body = [], b""
            for _ in clients:
                got, seen = queue.get(timeout=seconds + 120)
                for ms, status in got:
                    if status != 200 or math.isnan(ms):
                        failed += 1
                    else:
                        times.append(ms)
                body = body or seen
            for c in clients:
                c.join(30)
    finally:
        if proc is not None:
            parent.send("stop")
            if args.trace and parent.poll(30):
                info = parent.recv()
            proc.join(10)
        if monitor is not None:
            monitor.terminate()
            monitor.wait(30)
    text = body.decode()
    if "# EOF" not in text or ('gpu="7"' not in text and not (args.monitor and not args.trace)):
        raise RuntimeError("the scrape did not return the 8-GPU OpenMetrics exposition")
    series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    times.sort()
    p50, p99, worst = pct(times, 50), pct(times, 99), times[-1]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    what = (f"the monitor replaying {Path(args.trace).name} widened to {args.gpus} GPUs "
            f"(a tick every {interval:g} s, {info.get('ticks', '?')} ticks)" if args.trace
            else f"one fixed {GPUS}-GPU state, {PROCESSES} processes")
    if args.monitor:
        what = ("`gpuaudit monitor --listen` sampling "
                + (f"{Path(args.trace).name} widened to {args.gpus} GPUs" if args.trace
                   else "this machine's GPUs through NVML") + f" every {interval:g} s")
    print(f"exporter scrape latency: {what}, dcgm_names={args.dcgm_names}")
    print(f"  machine: {platform.node()}, {mp.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
          f"load avg {load:.1f}")
    if args.scrapers == 1:
        print(f"  scrapes: {args.n} one after another after {args.warmup} warm-ups, a new "
              "connection each, gzip")
    else:
        print(f"  scrapes: {args.scrapers} scrapers together every {args.period:g} s, "
              f"{args.rounds} rounds ({len(times) + failed} scrapes), a new connection each, "
              "gzip")
    print(f"  p50 {p50:.2f} ms  p99 {p99:.2f} ms  max {worst:.2f} ms  "
          f"mean {statistics.fmean(times):.2f} ms  min {times[0]:.2f} ms  failed {failed}")
    print(f"  exposition: {series} series, {len(body)} bytes (OpenMetrics)")
    ok = p99 <= target and not failed
    print(f"  target p99 ≤ {target:g} ms, no scrape failed: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
