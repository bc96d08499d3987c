"""Reference tools for the network suite, where installed: iperf3 (TCP, the same streams and
duration as ours, both directions) and perftest's ib_write_bw (RDMA bandwidth). Their servers
run on the peer: `gpuaudit bench network --serve` starts them beside ours and names their
ports in its hello.

iperf3's figure is its `sum_received` (what arrived, like ours); ib_write_bw's is its
"BW average" in Gbit/s (--report_gbits).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.feed import netproto
from gpuaudit.bench.feed.network import SUITE, connect_timeout, peer_of
from gpuaudit.bench.stats import skipped
from gpuaudit.hw.net import rdma_ports
from gpuaudit.model import Measurement, Params

IPERF3_MISSING = "iperf3 not installed here (apt-get install iperf3)"
PERFTEST_MISSING = "ib_write_bw not installed here (apt-get install perftest)"
_PERFTEST_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


def parse_iperf3(text: str) -> tuple[float, int, float]:
    """(Gbit/s received, bytes received, seconds) from `iperf3 -J`. Raises ValueError on an
    error report or a document without the end summary."""
    doc = json.loads(text)
    if doc.get("error"):
        raise ValueError(f"iperf3: {doc['error']}")
    received = (doc.get("end") or {}).get("sum_received")
    if not received:
        raise ValueError("iperf3: no sum_received in its JSON")
    return (float(received["bits_per_second"]) / 1e9, int(received["bytes"]),
            float(received["seconds"]))


def parse_ib_write_bw(text: str) -> tuple[int, float, float]:
    """(message bytes, peak Gbit/s, average Gbit/s) from ib_write_bw's result row (the last
    row of five numbers under `#bytes #iterations BW peak BW average MsgRate`)."""
    rows = [m for line in text.splitlines() if (m := _PERFTEST_ROW.match(line))]
    if not rows:
        raise ValueError("no result row in ib_write_bw's output")
    last = rows[-1]
    return int(last.group(1)), float(last.group(3)), float(last.group(4))


def _run(cmd: list[str], timeout_s: float) -> subprocess.CompletedProcess[str] | str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except subprocess.TimeoutExpired:
        return f"{cmd[0]} timed out after {timeout_s:g} s"
    except OSError as exc:
        return f"{cmd[0]} did not start: {exc}"


def iperf3(ctx: BenchContext, host: str, hello: dict[str, Any], streams: int,
           seconds: float) -> Iterator[Measurement]:
    base: Params = {"tool": "iperf3", "peer": host, "streams": streams, "seconds": seconds}
    exe = shutil.which("iperf3")
    port = hello.get("iperf3_port")
    if exe is None or not isinstance(port, int):
        why = IPERF3_MISSING if exe is None else (
            "the peer runs no iperf3 server (install iperf3 there; `gpuaudit bench network "
            "--serve` starts one)")
        for name in ("tcp_send", "tcp_recv"):
            yield skipped(SUITE, name, "Gbit/s", why, params=base)
        return
    for name, extra in (("tcp_send", []), ("tcp_recv", ["-R"])):
        ctx.step(f"iperf3 {name.replace('_', ' ')} to {host}:{port}")
        done = _run([exe, "-c", host, "-p", str(port), "-P", str(streams), "-t", f"{seconds:g}",
                     "-J", *extra], seconds + 30 + connect_timeout(ctx))
        if isinstance(done, str):
            yield skipped(SUITE, name, "Gbit/s", done, params=base)
            continue
        try:
            gbit, nbytes, _ = parse_iperf3(done.stdout)
        except (ValueError, KeyError, TypeError) as exc:
            yield skipped(SUITE, name, "Gbit/s", str(exc)[:300], params=base)
            continue
        yield Measurement(suite=SUITE, name=name, unit="Gbit/s", value=gbit,
                          statistic="iperf3 sum_received", samples=(gbit,),
                          params={**base, "peer": f"{host}:{port}", "bytes": nbytes})


def perftest(ctx: BenchContext, host: str, hello: dict[str, Any], seconds: float
             ) -> Iterator[Measurement]:
    base: Params = {"tool": "ib_write_bw", "peer": host}
    ports = [p for p in rdma_ports() if p.state == "ACTIVE"]
    exe = shutil.which("ib_write_bw")
    peer_port = hello.get("perftest_port")
    if not ports:
        yield skipped(SUITE, "rdma_write_bw", "Gbit/s", "no active RDMA port here",
                      params=base)
        return
    if exe is None or not isinstance(peer_port, int):
        why = PERFTEST_MISSING if exe is None else (
            "the peer runs no ib_write_bw server (install perftest there; `gpuaudit bench "
            "network --serve` starts one)")
        yield skipped(SUITE, "rdma_write_bw", "Gbit/s", why, params=base)
        return
    dev = ports[0].device
    ctx.step(f"ib_write_bw on {dev} to {host}")
    # perftest's defaults on both sides (64 KiB messages, 5000 iterations): its server
    # checks that the client's parameters match its own.
    done = _run([exe, "-d", dev, "-p", str(peer_port), "--report_gbits", host], seconds + 60)
    params = {**base, "rdma_device": dev, "peer": f"{host}:{peer_port}"}
    if isinstance(done, str):
        yield skipped(SUITE, "rdma_write_bw", "Gbit/s", done, params=params)
        return
    try:
        size, _peak, average = parse_ib_write_bw(done.stdout)
    except ValueError as exc:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        yield skipped(SUITE, "rdma_write_bw", "Gbit/s", f"{exc} ({tail[0][:200]})",
                      params=params)
        return
    rate = next((p.rate_gbps for p in ports if p.device == dev), None)
    yield Measurement(suite=SUITE, name="rdma_write_bw", unit="Gbit/s", value=average,
                      statistic="ib_write_bw BW average", samples=(average,), spec_value=rate,
                      pct_of_spec=round(100 * average / rate, 2) if rate else None,
                      params={**params, "message_bytes": size})


def run_native(ctx: BenchContext) -> Iterator[Measurement]:
    peer = peer_of(ctx)
    if peer is None:
        return
    host, port = peer
    try:
        hello = netproto.hello(host, port, connect_timeout(ctx))
    except netproto.PeerError as exc:
        yield skipped(SUITE, "tcp_send", "Gbit/s", f"peer {host}:{port}: {exc}",
                      params={"tool": "iperf3"})
        return
    streams = int(ctx.options.get("streams", 4))  # type: ignore[call-overload]
    seconds = float(ctx.options.get("seconds", ctx.pick(3.0, 10.0, 30.0)))  # type: ignore[arg-type]
    yield from iperf3(ctx, host, hello, streams, seconds)
    yield from perftest(ctx, host, hello, seconds)
