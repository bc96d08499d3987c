"""Ours beside the reference tools, interleaved so a noisy shared machine hits both alike:
storage under PATH (ours and fio on the very same file, same jobs) and TCP over loopback (ours
vs iperf3, same streams and duration).

Sequential write and read are compared pass by pass, the statistic the suite reports for both
(one sample per pass over the file; fio one run per pass, loops=1, see fio.py): ours pass i, then
fio pass i, with the order swapped every other pass so drift over the run falls on both alike;
each pair gives a ratio. Random reads and TCP: one run of each per round, ours first.

Each sequential pass reads and writes through buffers made for it (storage.io_buffers), ours and
fio's alike, as the suite does; GPUAUDIT_COMPARE_SHARED_BUFFERS=1 gives a round's passes of both
tools the very same buffers (the same pages: the tools compared with the buffers' luck removed).

Usage: python validation/feed/compare.py PATH [ROUNDS] [FILE_SIZE]
       (GPUAUDIT_COMPARE_SEQ_ONLY=1: the sequential passes alone)
Prints each pair as measured, then per figure: the medians of ours and of the reference, and the
median of the pair ratios (ours / reference) with their range.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.feed import fio, native_net, network, storage
from gpuaudit.bench.feed.rates import gb_per_s, per_second
from gpuaudit.bench.feed.serve import serve
from gpuaudit.binaries import find_binary
from gpuaudit.hw import take_snapshot
from gpuaudit.parse import size_bytes

PASSES = 5
FIO_TIMEOUT_S = 600.0


def paired_passes(passes: int, ours: Callable[[int], float], ref: Callable[[int], float],
                  first: int = 0) -> list[tuple[float, float]]:
    """(ours, reference) for passes 0..passes-1, each pair run back to back: ours first on
    even (first + i), the reference first on odd, so a drift in the machine's speed over the
    run does not favour one side."""
    pairs = []
    for i in range(passes):
        if (first + i) % 2 == 0:
            o = ours(i)
            r = ref(i)
        else:
            r = ref(i)
            o = ours(i)
        pairs.append((o, r))
    return pairs


@dataclass(frozen=True)
class Summary:
    ours: float  # median of our figures
    reference: float  # median of the reference's
    ratio: float  # median of the pair ratios, ours / reference
    low: float  # the lowest pair ratio
    high: float  # the highest
    pairs: int
    ci_low: float  # the median ratio's 95 % confidence interval (distribution-free)
    ci_high: float


def median_ci95(values: Sequence[float]) -> tuple[float, float]:
    """A 95 % confidence interval for the median, from order statistics alone (the ranks
    n/2 ∓ 0.98·√n of the sorted values, the normal approximation to the binomial): whether
    ours is within 3 % of the reference is then a statement the pairs can make or not."""
    v = sorted(values)
    n = len(v)
    half = 0.98 * math.sqrt(n)
    return v[max(0, math.floor(n / 2 - half))], v[min(n - 1, math.ceil(n / 2 + half))]


def summarize(pairs: Sequence[tuple[float, float]]) -> Summary:
    if not pairs:
        raise ValueError("no pairs")
    ratios = sorted(o / r for o, r in pairs)
    lo, hi = median_ci95(ratios)
    return Summary(ours=statistics.median(o for o, _ in pairs),
                   reference=statistics.median(r for _, r in pairs),
                   ratio=statistics.median(ratios), low=ratios[0], high=ratios[-1],
                   pairs=len(pairs), ci_low=lo, ci_high=hi)


def row(name: str, s: Summary) -> str:
    return (f"{name:18s} {s.ours:14.4g} {s.reference:12.4g} {s.ratio:7.3f}  "
            f"{s.ci_low:.3f}–{s.ci_high:.3f}  {s.low:.3f}–{s.high:.3f} {s.pairs:5d}")


def storage_rows(exe: str, path: str, p: storage.Plan, rounds: int
                 ) -> dict[str, list[tuple[float, float]]]:
    rows: dict[str, list[tuple[float, float]]] = {}
    target = storage.storage_target(path)
    print(storage.describe(target, "(see below)"), f"file {p.file_bytes} B, fio {exe}")
    f = storage.TestFile(target.path, p.file_bytes, target.fs_type in storage.MEMORY_FS)
    fd, jobs_path = tempfile.mkstemp(prefix=storage.PREFIX, suffix=".fio", dir=target.path)
    os.close(fd)
    shared = os.environ.get("GPUAUDIT_COMPARE_SHARED_BUFFERS") == "1"
    try:
        print("cache bypass:", f.method, "| buffers:",
              "shared by both tools each round" if shared else "made for each pass")
        for r in range(rounds):
            for job in fio.SEQ_JOBS:
                write = job == "seq_write"
                with contextlib.ExitStack() as stack:
                    bufs = stack.enter_context(storage.io_buffers(p.seq_jobs)) if shared \
                        else None
                    pairs = paired_passes(
                        p.passes,
                        lambda i, w=write, b=bufs: gb_per_s(
                            p.file_bytes, storage.seq_pass(f, p.seq_jobs, w, i, b)[0]),
                        lambda i, j=job, b=bufs: fio.seq_rate(fio.seq_pass(
                            exe, jobs_path, p, f.name, f.direct, j, FIO_TIMEOUT_S, b)[0]),
                        first=r * p.passes)
                rows.setdefault(job, []).extend(pairs)
                print(f"round {r} {job} per pass (ours, fio): "
                      + " ".join(f"{o:.4g}/{x:.4g}" for o, x in pairs), flush=True)
            if p.depths:  # the sequential passes rewrote the job file for their buffers
                with open(jobs_path, "w") as jf:
                    jf.write(fio.job_file(p, f.name, f.direct))
            for job, depth in zip(fio.rand_jobs(p), p.depths, strict=True):
                res = storage.random_reads(f, depth, p.rand_seconds, p.window_s, seed=depth)
                ours = per_second(res.ios, res.seconds)
                found = fio.to_measurements(
                    fio.run_jobs(exe, jobs_path, (job,), FIO_TIMEOUT_S + p.rand_seconds), {})
                (ref,) = [m.value for m in found if m.name == job]
                rows.setdefault(job, []).append((ours, float(ref or 0.0)))
                print(f"round {r} {job}: ours {ours:.4g} fio {ref:.4g}", flush=True)
    finally:
        f.close()
        os.unlink(jobs_path)
    return rows


def network_rows(rounds: int) -> dict[str, list[tuple[float, float]]]:
    rows: dict[str, list[tuple[float, float]]] = {}
    s = serve("127.0.0.1", 0)
    try:
        host, port = s.address
        ctx = BenchContext(machine=take_snapshot(), devices=(),
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
    return rows


def main() -> None:
    path = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    size = size_bytes(sys.argv[3], "size") if len(sys.argv) > 3 else 1 << 30
    # GPUAUDIT_COMPARE_SEQ_ONLY=1: sequential passes only (more pairs in the same time)
    seq_only = os.environ.get("GPUAUDIT_COMPARE_SEQ_ONLY") == "1"
    p = storage.Plan(file_bytes=size, seq_jobs=4, passes=PASSES,
                     depths=() if seq_only else (1, 16), rand_seconds=2.0)
    rows: dict[str, list[tuple[float, float]]] = {}
    exe = find_binary("fio", path_env=fio.ENV_VAR)
    if exe:
        rows.update(storage_rows(exe, path, p, rounds))
    else:
        print(fio.NOT_FOUND)
    if shutil.which("iperf3") and not seq_only:
        rows.update(network_rows(rounds))
    print(f"\n{'figure':18s} {'ours (median)':>14s} {'reference':>12s} {'ratio':>7s}  "
          f"{'ratio CI95':11s}  {'range':11s} {'pairs':>5s}")
    for name, pairs in rows.items():
        print(row(name, summarize(pairs)))
    print("ratio: median of the pair ratios ours / reference (sequential: one pair per pass, "
          "the order alternating; random and TCP: one pair per round); CI95: its 95 % "
          "confidence interval from order statistics")


if __name__ == "__main__":
    main()
