"""Ours beside the reference tools, interleaved so a noisy shared machine hits both alike:
storage (ours vs fio, same jobs) under PATH and TCP over loopback (ours vs iperf3).

Usage: python scripts/feed_compare.py PATH [ROUNDS] [FILE_SIZE]
Prints one line per round and the medians; ratio = ours / reference.
"""

from __future__ import annotations

import statistics
import sys

from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.feed import fio, native_net, network, storage
from gpuaudit.bench.feed.serve import serve
from gpuaudit.hw import take_snapshot
from gpuaudit.units import parse_bytes


def main() -> None:
    path = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    size = parse_bytes(sys.argv[3]) if len(sys.argv) > 3 else 1 << 30
    machine = take_snapshot()
    rows: dict[str, list[tuple[float, float]]] = {}
    ctx = BenchContext(machine=machine, devices=(), options={"paths": (path,),
                                                             "file_bytes": size})
    for r in range(rounds):
        ours = {m.name: m.value for m in storage.run(ctx) if m.value is not None}
        ref = {m.name: m.value for m in fio.run_native(ctx) if m.value is not None}
        for name in ("seq_write", "seq_read", "rand4k_read_qd1", "rand4k_read_qd16"):
            rows.setdefault(name, []).append((ours[name], ref[name]))
        print(f"round {r}: " + "  ".join(f"{n} {o:.4g}/{f:.4g}" for n, v in rows.items()
                                         for o, f in [v[-1]]), flush=True)
    s = serve("127.0.0.1", 0)
    try:
        host, port = s.address
        nctx = BenchContext(machine=machine, devices=(), options={"peer": host, "port": port,
                                                                  "seconds": 3.0})
        for r in range(rounds):
            ours = {m.name: m.value for m in network.run(nctx) if m.value is not None}
            refs = [m for m in native_net.run_native(nctx) if m.params.get("tool") == "iperf3"]
            ref = {m.name: m.value for m in refs if m.value is not None}
            for m in refs:
                if m.value is None:
                    print(f"net round {r}: iperf3 {m.name} skipped: {m.skipped_reason}")
            for name in ("tcp_send", "tcp_recv"):
                if name in ours and name in ref:
                    rows.setdefault(name, []).append((ours[name], ref[name]))
                    print(f"net round {r}: {name} {ours[name]:.4g}/{ref[name]:.4g}",
                          flush=True)
    finally:
        s.close()
    print(f"\n{'figure':18s} {'ours (median)':>14s} {'reference':>12s} {'ratio':>7s}")
    for name, pairs in rows.items():
        o = statistics.median(p[0] for p in pairs)
        f = statistics.median(p[1] for p in pairs)
        ratios = [p[0] / p[1] for p in pairs]
        print(f"{name:18s} {o:14.4g} {f:12.4g} {o / f:7.3f}  (per-round ratios "
              f"{min(ratios):.3f}–{max(ratios):.3f})")


if __name__ == "__main__":
    main()
