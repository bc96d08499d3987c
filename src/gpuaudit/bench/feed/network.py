"""The network: NICs and RDMA ports as the host reports them, then TCP throughput both ways
and round-trip latency to a peer running `gpuaudit bench network --serve`.

Throughput is Gbit/s (10^9 bit/s, as links are sold) counted by the receiver, over several
parallel streams (one TCP stream rarely fills a fast link); its spread is the sender's rate
per half-second window. Latency is the round trip of a 64-byte message with Nagle off, as the
client's clock sees it (p50 and p99).
"""

from __future__ import annotations

from collections.abc import Iterator

import psutil

from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.feed import netproto
from gpuaudit.bench.feed.rates import gbit_per_s, mbps_to_gbit, percentile_name, percentiles
from gpuaudit.bench.stats import measure, skipped
from gpuaudit.errors import BadInputError
from gpuaudit.hw.net import ibv_devinfo, merge_ports, rdma_ports, read_nics
from gpuaudit.model import Measurement, Nic, Params

SUITE = "network"
NO_PEER = ("no --peer given: run `gpuaudit bench network --serve --bind ADDRESS` on the "
           "other node, then `gpuaudit bench network --peer ADDRESS` here")
RTT_PERCENTILES = (50.0, 99.0)


def peer_of(ctx: BenchContext) -> tuple[str, int] | None:
    peer = ctx.options.get("peer")
    if not peer:
        return None
    port = ctx.options.get("port")
    return str(peer), int(port) if isinstance(port, int) else netproto.DEFAULT_PORT


def parse_peer(text: str, port: int | None = None) -> tuple[str, int]:
    """'host', 'host:5301', '[::1]:5301' → (host, port). Bad text is bad input."""
    host, sep, tail = text.rpartition(":") if not text.endswith("]") else ("", "", "")
    if sep and tail.isascii() and tail.isdigit() and (host.startswith("[") or ":" not in host):
        host = host.strip("[]")
        found = int(tail)
    else:
        host, found = text.strip("[]"), port or netproto.DEFAULT_PORT
    if not host or not 0 < found < 65536:
        raise BadInputError(f"--peer {text!r}: expected HOST or HOST:PORT")
    return host, found


def connect_timeout(ctx: BenchContext) -> float:
    return min(float(ctx.options.get("peer_timeout_s", 5.0)), ctx.timeout_s)  # type: ignore[arg-type]


def preflight(ctx: BenchContext) -> None:
    peer = peer_of(ctx)
    if peer is None:
        return
    host, port = peer
    try:
        netproto.hello(host, port, connect_timeout(ctx))
    except netproto.PeerError as exc:
        raise BadInputError(
            f"peer {host}:{port}: {exc}; is `gpuaudit bench network --serve` running there "
            "(with --bind set so it listens beyond 127.0.0.1)?") from None


def nic_params(n: Nic) -> Params:
    return {"nic": n.name, "driver": n.driver, "pci": n.pci_address, "numa_node": n.numa_node,
            "mtu": n.mtu, "operstate": n.operstate,
            "rdma": ",".join(n.rdma_devices) or None}


def inventory() -> Iterator[Measurement]:
    """Each physical NIC's link speed and each RDMA port's rate, as the host reports them
    (sysfs, and ibv_devinfo where installed)."""
    ibv, _why = ibv_devinfo()
    ports = merge_ports(rdma_ports(), ibv or [])
    for n in read_nics(rdma=ports):
        if n.kind != "physical":
            continue
        if n.speed_mbps is None:
            yield skipped(SUITE, "link_speed", "Gbit/s", n.unavailable.get(
                "speed_mbps", "not reported"), params=nic_params(n))
            continue
        yield Measurement(suite=SUITE, name="link_speed", unit="Gbit/s",
                          value=mbps_to_gbit(n.speed_mbps), statistic="reported by the driver",
                          params=nic_params(n))
    for p in ports:
        params: Params = {"rdma_device": p.device, "port": p.port, "state": p.state,
                          "link_layer": p.link_layer, "netdevs": ",".join(p.netdevs) or None,
                          "firmware": p.firmware}
        if p.rate_gbps is None:
            yield skipped(SUITE, "rdma_rate", "Gbit/s", "no rate in sysfs", params=params)
        else:
            yield Measurement(suite=SUITE, name="rdma_rate", unit="Gbit/s", value=p.rate_gbps,
                              statistic="reported by the driver", params=params)


def route_nic(host: str, port: int) -> Nic | None:
    """The interface traffic to host leaves by (by its local address)."""
    local = netproto.local_address_to(host, port)
    if local is None:
        return None
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == local for a in addrs):
            return next((n for n in read_nics() if n.name == name), None)
    return None


def run(ctx: BenchContext) -> Iterator[Measurement]:
    ctx.step("network: NICs and RDMA devices")
    yield from inventory()
    peer = peer_of(ctx)
    if peer is None:
        yield skipped(SUITE, "tcp_send", "Gbit/s", NO_PEER)
        return
    host, port = peer
    timeout = connect_timeout(ctx)
    streams = int(ctx.options.get("streams", 4))  # type: ignore[call-overload]
    seconds = float(ctx.options.get("seconds", ctx.pick(3.0, 10.0, 30.0)))  # type: ignore[arg-type]
    nic = route_nic(host, port)
    spec = mbps_to_gbit(nic.speed_mbps) if nic and nic.speed_mbps else None
    base: Params = {"peer": f"{host}:{port}", "streams": streams, "seconds": seconds,
                    "nic": nic.name if nic else None}
    notes = ("loopback: the figure is this host's TCP stack, not a network",) \
        if nic and nic.kind == "loopback" else ()
    for name, fn in (("tcp_send", netproto.send), ("tcp_recv", netproto.receive)):
        ctx.step(f"network: {name.replace('_', ' ')} to {host}:{port}, {streams} streams, "
                 f"{seconds:g} s")
        t = fn(host, port, streams, seconds, timeout)
        value = gbit_per_s(t.bytes, round(t.seconds, 6))
        m = measure(SUITE, name, "Gbit/s", t.window_gbit or [value], warmup=0,
                    spec_value=spec, params={**base, "bytes": t.bytes,
                                             "elapsed_s": round(t.seconds, 6)}, notes=notes)
        yield m.model_copy(update={"value": value, "statistic": "bytes received / time",
                                   "pct_of_spec": round(100 * value / spec, 2) if spec
                                   else None})
    ctx.step(f"network: round trips to {host}:{port}")
    rtts = netproto.round_trips(host, port, ctx.pick(2000, 10000, 50000), ctx.pick(2.0, 5.0,
                                                                                    15.0),
                                timeout)
    params = {**base, "message_bytes": 64, "round_trips": len(rtts)}
    params.pop("streams")
    params.pop("seconds")
    for q, v in percentiles(rtts, RTT_PERCENTILES).items():
        yield Measurement(suite=SUITE, name=f"tcp_rtt_{percentile_name(q)}", unit="µs",
                          value=v, statistic=percentile_name(q), params=params, notes=notes)
