"""Ours beside the reference tools, interleaved test by test so a noisy shared machine hits both
alike: storage under PATH (ours and fio on the very same file, same jobs, one after the other)
and TCP over loopback (ours vs iperf3, same streams and duration).

Usage: python scripts/feed_compare.py PATH [ROUNDS] [FILE_SIZE]
Prints each pair as measured, then the medians over rounds; ratio = ours / reference.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile

from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.feed import fio, native_net, network, storage
from gpuaudit.bench.feed.rates import gb_per_s, per_second
from gpuaudit.bench.feed.serve import serve
from gpuaudit.hw import take_snapshot
from gpuaudit.units import parse_bytes

PASSES = 5


def fio_job(exe: str, f: storage.TestFile, p: storage.Plan, job: str) -> float:
    """fio's figure for one of our jobs, run on our own (open) test file."""
    text = fio.job_file(p, f.name, f.direct)
    blocks = text.split("\n\n")
    chosen = [blocks[0]] + [b for b in blocks[1:] if b.startswith(f"[{job}]")]
    with tempfile.NamedTemporaryFile("w", suffix=".fio") as jf:
        jf.write("\n\n".join(chosen) + "\n")
        jf.flush()
        done = subprocess.run([exe, "--output-format=json", jf.name], capture_output=True,
                              text=True, check=True)
    (m,) = [x for x in fio.to_measurements(fio.parse_fio_json(done.stdout), {})
            if x.name == job]
    return float(m.value or 0.0)


def ours_job(f: storage.TestFile, p: storage.Plan, job: str) -> float:
    if job.startswith("seq_"):
        write = job == "seq_write"
        rates = [gb_per_s(p.file_bytes, storage.seq_pass(f, p.seq_jobs, write, i)[0])
                 for i in range(p.passes)]
        return statistics.median(rates)
    depth = int(job.removeprefix("rand4k_read_qd"))
    r = storage.random_reads(f, depth, p.rand_seconds, p.window_s, seed=depth)
    return per_second(r.ios, r.seconds)


def main() -> None:
    path = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    size = parse_bytes(sys.argv[3]) if len(sys.argv) > 3 else 1 << 30
    exe = fio.find_binary()
    machine = take_snapshot()
    p = storage.Plan(file_bytes=size, seq_jobs=4, passes=PASSES, depths=(1, 16),
                     rand_seconds=2.0)
    rows: dict[str, list[tuple[float, float]]] = {}
    jobs = ("seq_write", "seq_read", "rand4k_read_qd1", "rand4k_read_qd16")
    if exe:
        target = storage.storage_target(path)
        print(storage.describe(target, "(see below)"), f"file {size} B, fio {exe}")
        f = storage.TestFile(target.path, size, target.fs_type in storage.MEMORY_FS)
        try:
            print("cache bypass:", f.method)
            for r in range(rounds):
                for job in jobs:
                    pair = (ours_job(f, p, job), fio_job(exe, f, p, job))
                    rows.setdefault(job, []).append(pair)
                    print(f"round {r} {job}: ours {pair[0]:.4g} fio {pair[1]:.4g}", flush=True)
        finally:
            f.close()
    if shutil.which("iperf3"):
        s = serve("127.0.0.1", 0)
        try:
            host, port = s.address
            ctx = BenchContext(machine=machine, devices=(),
                               options={"peer": host, "port": port, "seconds": 3.0})
            hello = network.netproto.hello(host, port, 5)
            for r in range(rounds):
                for name, fn in (("tcp_send", network.netproto.send),
                                 ("tcp_recv", network.netproto.receive)):
                    t = fn(host, port, 4, 3.0, 5)
                    ours = t.bytes * 8 / 1e9 / t.seconds
                    refs = [m for m in native_net.iperf3(ctx, host, hello, 4, 3.0)
                            if m.name == name]
                    if refs and refs[0].value:
                        rows.setdefault(name, []).append((ours, refs[0].value))
                        print(f"round {r} {name}: ours {ours:.4g} iperf3 {refs[0].value:.4g}",
                              flush=True)
        finally:
            s.close()
    print(f"\n{'figure':18s} {'ours (median)':>14s} {'reference':>12s} {'ratio':>7s}")
    for name, pairs in rows.items():
        o = statistics.median(x[0] for x in pairs)
        f_ = statistics.median(x[1] for x in pairs)
        ratios = sorted(x[0] / x[1] for x in pairs)
        print(f"{name:18s} {o:14.4g} {f_:12.4g} {o / f_:7.3f}  (median pair ratio "
              f"{statistics.median(ratios):.3f}, range {ratios[0]:.3f}–{ratios[-1]:.3f})")


if __name__ == "__main__":
    main()
