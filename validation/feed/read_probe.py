"""Why sequential O_DIRECT reads differ between ours and fio on a virtio disk: the reader's
buffer. Variants of our read pass, interleaved round-robin with fio's on one file (the order
rotated every round); per run the GB/s and what the block device did (/sys/block/DEV/stat
deltas: requests per MiB, each request's ms at the disk, the requests in flight on average over
the tool's own timed interval, cache flushes), and for ours each worker's own start and end, so
that the rate over the whole span can be set beside fio's convention (bytes over the slowest
worker's own time).

Variants (each worker: one 1 MiB buffer, the pass's 1 MiB preadv calls into it):
  ours          the suite's own: a shared anonymous mapping, its pages faulted by the first read
  ours_private_lazy   private anonymous, faulted by the first read (what fio's malloc gives it)
  ours_private  private anonymous, written once before the pass (pages faulted in order)
  ours_huge     private, madvise(MADV_HUGEPAGE), 2 MiB-aligned (one huge page where THP allows)
  ours_parent   shared, mapped by the parent before the workers fork, faulted by their reads
  ours_parent_touched   the same, written once by the parent before the fork
  ours_threads  4 threads of this process (not processes), private buffers faulted by the read
  fio           fio's seq_read job of the suite (psync, thread=1, 4 jobs)
  fio_processes the same job with thread=0 (fio forks a process per job)
  ours_memfd    the suite's pass since 2026-12-01 (storage.seq_pass): buffers made by the
                parent for each pass (storage.io_buffers: memfds, written through)
  fio_memfd     fio's pass of the suite since then (fio.seq_pass): buffers made the same way
                (and gtod_reduce=1 since the sixth session)
  fio_memfd_processes   the same with thread=0 (fio's default: a process per job)
  fio_memfd_lean        fio_memfd with scramble_buffers=0 as well: no per-I/O sector stamps,
                        clock reads or latency stats
  fio_memfd_each        fio_memfd with group_reporting=0: the group's figure made from each
                        thread's own, and how far apart the threads started and ended
  fio_memfd_timed       fio_memfd without gtod_reduce=1: fio's default per-I/O clock reads and
                        latency stats (the suite's pass before 2026-12-01's sixth session)
  fio_memfd_noscramble  fio_memfd_timed with scramble_buffers=0 (no per-I/O sector stamps)

GPUAUDIT_PROBE_VARIANTS=a,b,...: these variants only (in this order).
GPUAUDIT_PROBE_WRITE=1: sequential writes instead (ours_memfd, fio and fio_memfd, and ours: the
suite's pass with each worker's own buffer, written before the pass), with the requests per MiB
written.

Usage: python validation/feed/read_probe.py DIR ROUNDS [FILE_SIZE]   (GPUAUDIT_FIO or fio on PATH)
"""

from __future__ import annotations

import ctypes
import math
import mmap
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from gpuaudit.bench.feed import fio, storage
from gpuaudit.bench.feed.procs import Workers
from gpuaudit.binaries import find_binary
from gpuaudit.hw.storage import DiskStat, disk_stat
from gpuaudit.parse import size_bytes

SEQ = storage.SEQ_BLOCK
JOBS = 4
VARIANTS = ("ours", "fio", "ours_private_lazy", "ours_private", "ours_huge", "ours_parent",
            "ours_parent_touched", "ours_threads", "fio_processes", "ours_memfd", "fio_memfd",
            "fio_memfd_processes", "fio_memfd_lean", "fio_memfd_each", "fio_memfd_timed",
            "fio_memfd_noscramble")
QUEUE = ("max_segments", "max_sectors_kb", "max_segment_size", "scheduler")


def sysfs(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


WRITE = os.environ.get("GPUAUDIT_PROBE_WRITE") == "1"
JOB = "seq_write" if WRITE else "seq_read"


def counters(dev: str) -> DiskStat:
    found = disk_stat(dev)
    if found is None:
        sys.exit(f"no request counts for {dev} in /sys/block")
    return found


@dataclass(frozen=True)
class DiskShare:
    """What the disk did during one run, in the probe's direction."""
    requests_per_mib: float
    ms_per_request: float  # each request's time at the disk, start to completion
    in_flight: float  # requests at the disk on average over the tool's own timed interval
    flushes: int | None  # cache flushes the disk completed (the writers' fsyncs, the journal's)
    flush_ms: int | None


def disk_share(before: DiskStat, after: DiskStat, nbytes: int, seconds: float) -> DiskShare:
    d = after.since(before)
    done = d.requests(WRITE)
    return DiskShare(requests_per_mib=round(done / (nbytes >> 20), 2),
                     ms_per_request=d.requests_ms(WRITE) / max(done, 1),
                     in_flight=d.in_queue_ms / (seconds * 1e3),
                     flushes=d.flushes, flush_ms=d.flush_ms)


def buffer(mode: str) -> tuple[object, object]:
    """(the mapping, the 1 MiB buffer in it) for a variant."""
    private = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    if mode == "ours_huge":
        m = mmap.mmap(-1, 4 * SEQ, flags=private)
        m.madvise(mmap.MADV_HUGEPAGE)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        off = (-addr) % (2 * SEQ)
        buf = memoryview(m)[off:off + SEQ]
        buf[:] = bytes(SEQ)
        return m, buf
    if mode == "ours":
        m = mmap.mmap(-1, SEQ)
        return m, m
    m = mmap.mmap(-1, SEQ, flags=private)
    if mode == "ours_private":
        m[:] = bytes(SEQ)
    return m, m


def worker(name: str, first: int, count: int, mode: str, given, ready) -> tuple[float, float]:
    """One region read in 1 MiB calls into `given` (a view of the parent's mapping) or into a
    buffer of the variant's own; (start, end) on the shared monotonic clock."""
    fd = os.open(name, os.O_RDONLY | os.O_DIRECT)
    try:
        buf = given if given is not None else buffer(mode)[1]
        ready()
        t0 = time.perf_counter()
        for b in range(first, first + count):
            if os.preadv(fd, [buf], b * SEQ) != SEQ:
                raise OSError("short read")
        return t0, time.perf_counter()
    finally:
        os.close(fd)


def threads(f: storage.TestFile) -> tuple[float, float]:
    region = f.nbytes // JOBS // SEQ
    go = threading.Barrier(JOBS + 1)
    with ThreadPoolExecutor(JOBS) as pool:
        futures = [pool.submit(worker, f.name, k * region, region, "ours_private_lazy", None,
                               go.wait) for k in range(JOBS)]
        go.wait()
        start = time.perf_counter()
        times = [x.result() for x in futures]
        end = time.perf_counter()
    return f.nbytes / (end - start) / 1e9, f.nbytes / max(b - a for a, b in times) / 1e9


def ours(f: storage.TestFile, mode: str) -> tuple[float, float]:
    """(GB/s over the span from go to the last worker's result, GB/s over the slowest worker's
    own time)."""
    if mode == "ours" and WRITE:
        g = f.nbytes / storage.seq_pass(f, JOBS, True, 0, buffers=())[0] / 1e9
        return g, g
    if mode == "ours_threads":
        return threads(f)
    if mode == "ours_memfd":
        g = f.nbytes / storage.seq_pass(f, JOBS, WRITE, 0)[0] / 1e9
        return g, g
    region = f.nbytes // JOBS // SEQ
    shared = None
    if mode.startswith("ours_parent"):
        shared = mmap.mmap(-1, JOBS * SEQ)
        if mode == "ours_parent_touched":
            shared[:] = bytes(JOBS * SEQ)
    # forked workers inherit the parent's mapping: its views need no pickling
    view = memoryview(shared) if shared is not None else None
    args = [(f.name, k * region, region, mode,
             None if view is None else view[k * SEQ:(k + 1) * SEQ]) for k in range(JOBS)]
    with Workers(worker, args) as w:
        start = time.perf_counter()
        times = w.results()
        end = time.perf_counter()
    return f.nbytes / (end - start) / 1e9, f.nbytes / max(b - a for a, b in times) / 1e9


FIO_MEMFD_EDITS = {
    "fio_memfd": {},
    "fio_memfd_processes": {"thread=1\n": "thread=0\n"},
    "fio_memfd_lean": {"[global]\n": "[global]\nscramble_buffers=0\n"},
    "fio_memfd_each": {"group_reporting=1\n": "group_reporting=0\n"},
    "fio_memfd_timed": {"gtod_reduce=1\n": ""},
    "fio_memfd_noscramble": {"gtod_reduce=1\n": "", "[global]\n": "[global]\nscramble_buffers=0\n"},
}


def fio_memfd(exe: str, path: str, f: storage.TestFile, size: int, variant: str) -> float:
    """GB/s of fio's pass through buffers made for it (fio.seq_pass's job), edited as the
    variant says."""
    p = storage.Plan(size, JOBS, 1, (), 1.0)
    with storage.io_buffers(JOBS) as bufs:
        text = fio.job_file(p, f.name, f.direct, bufs)
        for old, new in FIO_MEMFD_EDITS[variant].items():
            text = text.replace(old, new)
        with open(path, "w") as jf:
            jf.write(text)
        found = fio.run_jobs(exe, path, (JOB,), 120, pass_fds=bufs)
    if len(found) == 1:
        return fio.seq_rate(found[0])
    # each thread apart (fio_memfd_each): the group's figure made from them, and how far apart
    # the threads started and how long each ran
    side = "write" if WRITE else "read"
    runtimes = [job[side]["runtime"] for job in found]
    starts = [job["job_start"] for job in found]
    print(f"   fio threads: started over {max(starts) - min(starts)} ms, ran "
          f"{min(runtimes)}–{max(runtimes)} ms")
    return sum(job[side]["io_bytes"] for job in found) / (max(runtimes) / 1e3) / 1e9


def main() -> None:
    d, rounds = sys.argv[1], int(sys.argv[2])
    size = size_bytes(sys.argv[3], "size") if len(sys.argv) > 3 else 512 << 20
    exe = find_binary("fio", path_env=fio.ENV_VAR)
    if not exe:
        sys.exit(fio.NOT_FOUND)
    dev = storage.storage_target(d).device
    if dev is None:
        sys.exit(f"{d} is not on a block device: no request counts to read")
    queue = {q: sysfs(f"/sys/block/{dev}/queue/{q}") for q in QUEUE
             if os.path.exists(f"/sys/block/{dev}/queue/{q}")}
    print(f"{d} on {dev}: {queue}; THP "
          f"{sysfs('/sys/kernel/mm/transparent_hugepage/enabled')}")
    f = storage.TestFile(d, size, False)
    job = os.path.join(d, f"{storage.PREFIX}probe.fio")
    try:
        print("cache bypass:", f.method)
        storage.seq_pass(f, JOBS, True, 0)
        text = fio.job_file(storage.Plan(size, JOBS, 1, (), 1.0), f.name, f.direct)
        with open(job, "w") as jf:
            jf.write(text)
        with open(job + ".proc", "w") as jf:
            jf.write(text.replace("thread=1", "thread=0"))
        chosen = os.environ.get("GPUAUDIT_PROBE_VARIANTS")
        variants = tuple(chosen.split(",")) if chosen else VARIANTS
        if WRITE and set(variants) - {"ours", "ours_memfd", "fio", *FIO_MEMFD_EDITS}:
            sys.exit("writes: the variants ours, ours_memfd, fio and fio_memfd* only")
        rate: dict[str, list[float]] = {v: [] for v in variants}
        reqs: dict[str, list[float]] = {v: [] for v in variants}
        shares: dict[str, list[DiskShare]] = {v: [] for v in variants}
        own: list[float] = []
        for r in range(rounds):
            for v in variants[r % len(variants):] + variants[:r % len(variants)]:
                before = counters(dev)
                if v.startswith("fio_memfd"):
                    g = fio_memfd(exe, job + ".memfd", f, size, v)
                elif v.startswith("fio"):
                    (found,) = fio.run_jobs(exe, job + (".proc" if v == "fio_processes" else ""),
                                            (JOB,), 120)
                    g = fio.seq_rate(found)
                else:
                    g, slowest = ours(f, v)
                    if v == "ours":
                        own.append(slowest)
                share = disk_share(before, counters(dev), size, size / (g * 1e9))
                rate[v].append(g)
                reqs[v].append(share.requests_per_mib)
                shares[v].append(share)
                print(f"r{r} {v:18s} {g:.4f} GB/s  requests/MiB {share.requests_per_mib:.2f}"
                      f"  ms/request {share.ms_per_request:.3f}  in flight "
                      f"{share.in_flight:.2f}  flushes {share.flushes} "
                      f"({share.flush_ms} ms)", flush=True)
    finally:
        f.close()
        for leftover in (job, job + ".proc", job + ".memfd"):
            if os.path.exists(leftover):
                os.unlink(leftover)
    print(f"\n{'variant':18s} {'GB/s':>7s} {'÷ fio':>6s} {'req/MiB':>7s}  GB/s by requests/MiB")
    for v in variants:
        ref = "fio_memfd" if "_memfd" in v and "fio_memfd" in rate else "fio"
        ratio = statistics.median(a / b for a, b in zip(rate[v], rate[ref], strict=True)) \
            if ref in rate else math.nan
        by: dict[float, list[float]] = {}
        for g, q in zip(rate[v], reqs[v], strict=True):
            by.setdefault(q, []).append(g)
        strata = "  ".join(f"{q:g}: {statistics.median(x):.3f} (n={len(x)})"
                           for q, x in sorted(by.items()))
        print(f"{v:18s} {statistics.median(rate[v]):7.4f} {ratio:6.3f} "
              f"{statistics.mean(reqs[v]):7.2f}  {strata}")
    print(f"\n{'variant':18s} {'ms/req':>7s} {'in flight':>9s} {'flushes':>7s} "
          f"{'flush ms':>8s}  (medians; over each tool's own timed interval)")
    for v in variants:
        x = shares[v]
        print(f"{v:18s} {statistics.median(a.ms_per_request for a in x):7.3f} "
              f"{statistics.median(a.in_flight for a in x):9.2f} "
              f"{statistics.median(a.flushes or 0 for a in x):7g} "
              f"{statistics.median(a.flush_ms or 0 for a in x):8g}")
    if own:
        print("ours over the slowest worker's own time (fio's convention):",
              f"{statistics.median(own):.4f}")
    print("÷ fio: the median of the round's ratios to fio's job (the _memfd variants: to "
          "fio_memfd)")


if __name__ == "__main__":
    main()
