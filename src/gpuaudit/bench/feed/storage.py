"""Storage under the paths the user names: sequential read and write in 1 MiB blocks, random
4 KiB reads (IOPS and latency percentiles), with the page cache bypassed.

One temporary file per path (`.gpuaudit-io-*`, created with mkstemp under the path, removed
whatever happens). The page cache is bypassed with O_DIRECT where the file system accepts it;
elsewhere each pass starts with posix_fadvise(DONTNEED) on the file (writes are fdatasync'ed
first, random reads get FADV_RANDOM so no read-ahead fills the cache), and the method is
recorded beside every figure. fio, with `--with-native`, runs the same jobs on its own file
(see fio.py): psync, one thread per region, the same block sizes and depths.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import random
import statistics
import tempfile
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.feed.procs import Workers
from gpuaudit.bench.feed.rates import (
    gb_per_s,
    per_second,
    percentile_name,
    percentiles,
    window_rates,
)
from gpuaudit.bench.stats import measure, skipped
from gpuaudit.errors import BadInputError
from gpuaudit.hw.storage import disk_stat, max_request_bytes, storage_target
from gpuaudit.model import Measurement, Params, StorageTarget
from gpuaudit.parse import human_bytes

SUITE = "storage"
SEQ_BLOCK = 1 << 20
RAND_BLOCK = 4096
MIB = 1 << 20
GIB = 1 << 30
MARGIN_BYTES = 256 * MIB  # left free beyond the test file: never fill a disk
PREFIX = ".gpuaudit-io-"
NO_PATH = "no PATH given: `gpuaudit bench storage PATH...` (a temporary file is written there)"
MEMORY_FS = frozenset({"tmpfs", "ramfs", "devtmpfs"})
# 1 MiB reads that reach the disk as more requests than the queue's size limit explains (by
# this factor) were split for their buffers' 4 KiB pages: too scattered for the queue's segment
# limit (docs/feed.md, "Why reads differ": on a virtio disk 1.3-1.8 requests per MiB, ±25 % a
# pass, where one huge page per buffer read 1.8x).
SPLIT_FACTOR = 1.1


@dataclass(frozen=True)
class Plan:
    file_bytes: int
    seq_jobs: int  # threads, each reading/writing its own contiguous region
    passes: int  # sequential passes over the file, one sample each
    depths: tuple[int, ...]  # random-read queue depths (one thread per outstanding I/O)
    rand_seconds: float
    window_s: float = 0.25  # IOPS sampled per window: the spread over time


def plan(ctx: BenchContext) -> Plan:
    size = ctx.options.get("file_bytes")
    file_bytes = int(size) if isinstance(size, int) else ctx.pick(1, 4, 16) * GIB
    jobs = int(ctx.options.get("seq_jobs", 4))  # type: ignore[call-overload]
    depths: tuple[int, ...] = tuple(ctx.options.get("depths", (1, 16)))  # type: ignore[arg-type]
    return Plan(file_bytes=file_bytes, seq_jobs=jobs, passes=ctx.pick(5, 5, 8),
                depths=depths, rand_seconds=ctx.pick(2.0, 5.0, 15.0))


def paths_of(ctx: BenchContext) -> tuple[str, ...]:
    return tuple(str(p) for p in ctx.options.get("paths", ()))  # type: ignore[attr-defined]


def check_plan(p: Plan) -> None:
    if p.file_bytes % SEQ_BLOCK or p.file_bytes < SEQ_BLOCK * p.seq_jobs:
        raise BadInputError(f"storage file size {human_bytes(p.file_bytes)}: must be a whole "
                            f"number of MiB, at least {p.seq_jobs} MiB ({p.seq_jobs} threads "
                            "of 1 MiB blocks)")


def check_path(path: str, p: Plan) -> StorageTarget:
    """The storage target, or bad input: a path that is missing, not a directory, read-only,
    or without room for the test file."""
    if not os.path.exists(path):
        raise BadInputError(f"storage path {path}: does not exist")
    if not os.path.isdir(path):
        raise BadInputError(f"storage path {path}: not a directory (the test writes a "
                            "temporary file inside it)")
    target = storage_target(path)
    if target.read_only:
        raise BadInputError(f"storage path {path}: read-only (mounted read-only or not "
                            "writable by this user); the test needs to write a temporary file")
    need = p.file_bytes + MARGIN_BYTES
    if target.free_bytes < need:
        raise BadInputError(
            f"storage path {path}: {human_bytes(target.free_bytes)} free, the test needs "
            f"{human_bytes(need)} ({human_bytes(p.file_bytes)} file + "
            f"{human_bytes(MARGIN_BYTES)} left free); use --file-size to test with less")
    return target


def preflight(ctx: BenchContext) -> None:
    """Bad input is refused before any suite runs, so nothing measured is thrown away."""
    p = plan(ctx)
    check_plan(p)
    for path in paths_of(ctx):
        check_path(path, p)


# ---- the test file ----

def open_direct(name: str) -> int | None:
    """`name` opened read-write with O_DIRECT, or None where the file system refuses it (some
    refuse only at the first I/O, so one aligned write is tried)."""
    direct = getattr(os, "O_DIRECT", 0)
    if not direct:
        return None
    try:
        fd = os.open(name, os.O_RDWR | direct)
    except OSError:
        return None
    probe = mmap.mmap(-1, SEQ_BLOCK)
    try:
        os.pwrite(fd, probe, 0)
        return fd
    except OSError:
        os.close(fd)
        return None
    finally:
        probe.close()


class TestFile:
    """A temporary file under `directory`, opened with O_DIRECT where allowed. Removed on
    close, even after an error or Ctrl-C (the I/O workers are killed and reaped first)."""

    def __init__(self, directory: str, nbytes: int, memory_fs: bool) -> None:
        self.nbytes = nbytes
        fd, self.name = tempfile.mkstemp(prefix=PREFIX, dir=directory)
        os.close(fd)
        self.fd = -1
        try:
            self.method, self.fd = self._open(memory_fs)
            with contextlib.suppress(OSError):  # fio lays files out the same way
                os.posix_fallocate(self.fd, 0, nbytes)
        except BaseException:
            self.close()
            raise

    def _open(self, memory_fs: bool) -> tuple[str, int]:
        fd = open_direct(self.name)
        if fd is not None:
            return ("O_DIRECT (memory file system: figures are memory speed)"
                    if memory_fs else "O_DIRECT"), fd
        fd = os.open(self.name, os.O_RDWR)
        return ("fadvise DONTNEED before each pass (O_DIRECT refused by this file system)"
                + ("; memory file system: figures are memory speed" if memory_fs else "")), fd

    @property
    def direct(self) -> bool:
        return self.method.startswith("O_DIRECT")

    def drop_cache(self) -> None:
        if not self.direct:
            os.fdatasync(self.fd)
            os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_DONTNEED)

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.name)


# ---- the sequential I/O buffers ----
# Each worker's 1 MiB buffer is shared memory (a memfd) that the parent creates and writes
# through just before the pass; fio, beside ours, reads and writes through buffers made the
# same way (fio.py: iomem=mmapshared). A 1 MiB O_DIRECT read into 256 scattered 4 KiB pages
# needs more segments than some queues take (virtio: 254), so it is split in two where none of
# its pages sit side by side, and a pass's rate follows where the kernel put them (±25 % on
# virtio disks). fio's malloc'd buffers and our workers' own mappings came out scattered at
# different rates (1.3 against 1.6 requests per MiB read): the two tools differed by where their
# pages sat, not by how they do I/O (docs/feed.md, "Why reads differ"). Buffers made one way
# give both the same odds; made afresh each pass, they give each pass its own draw.
BUFFER_BYTES = SEQ_BLOCK + 4096  # fio maps its block plus a page of alignment slack
SECTORS = SEQ_BLOCK // 512
SECTOR_WORDS = 512 // 8  # 64-bit words in a sector


@contextlib.contextmanager
def io_buffers(count: int) -> Iterator[tuple[int, ...]]:
    """`count` sequential I/O buffers as memfd descriptors, each written through (its pages
    allocated) before use; none (an empty tuple) where the OS has no memfd: each worker then
    maps its own."""
    fds: list[int] = []
    try:
        if hasattr(os, "memfd_create"):
            for k in range(count):
                fds.append(os.memfd_create(f"gpuaudit-io-{k}"))
                os.pwrite(fds[-1], bytes(BUFFER_BYTES), 0)
        yield tuple(fds)
    finally:
        for fd in fds:
            os.close(fd)


# ---- the I/O workers: processes, like fio's jobs ----
# Each worker is a process with its own descriptor, so no interpreter lock sits between an
# I/O's completion and the next one being issued (with threads it does, and on a busy host the
# lock holder gets descheduled: 4 threads read 15 % below fio there, 4 processes do not).

def _open_worker(name: str, direct: bool) -> int:
    return os.open(name, os.O_RDWR | (getattr(os, "O_DIRECT", 0) if direct else 0))


def _seq_worker(name: str, direct: bool, first: int, count: int, write: bool, pass_no: int,
                seed: bytes, buffer_fd: int | None, ready: Callable[[], None]) -> bool:
    """Returns: every block read back carried its own index (True for writes). `buffer_fd`:
    the parent's buffer for this worker (inherited across the fork), or None for its own."""
    fd = _open_worker(name, direct)
    try:
        # page-aligned, as O_DIRECT needs
        buf = mmap.mmap(-1 if buffer_fd is None else buffer_fd, SEQ_BLOCK)
        words = memoryview(buf).cast("Q")
        if write:
            # Every 512-byte sector written is unique, as fio's writes are (scramble_buffers,
            # its default): each starts with (block, pass, sector), so no deduplicating or
            # compressing store writes less than it is given. Only the block changes per call.
            buf[:] = seed
            words[1::SECTOR_WORDS] = array("Q", [pass_no]) * SECTORS
            words[2::SECTOR_WORDS] = array("Q", range(SECTORS))
        ready()
        ok = True
        for b in range(first, first + count):
            if write:
                words[0::SECTOR_WORDS] = array("Q", [b]) * SECTORS
                done = os.pwrite(fd, buf, b * SEQ_BLOCK)
            else:
                done = os.preadv(fd, [buf], b * SEQ_BLOCK)
                ok = ok and words[0] == b
            if done != SEQ_BLOCK:
                raise OSError(f"short {'write' if write else 'read'}: {done} bytes")
        if write:
            # In the timing: the data on the device. Each worker fsyncs its own descriptor when
            # its region is done, as each of fio's threads does with end_fsync=1. One fsync after
            # all workers (before 2026-12-01) read 1.05-1.07x fio's rate on virtio disks over 10
            # and 30 pairs: fio's first finishers commit the journal while the others still write.
            os.fsync(fd)
        return ok
    finally:
        os.close(fd)


def _rand_worker(name: str, direct: bool, blocks: int, seconds: float, seed: int,
                 ready: Callable[[], None]) -> tuple[bytes, bytes]:
    """Returns (latencies, completion times) in ns, as packed int64 arrays."""
    fd = _open_worker(name, direct)
    try:
        if not direct:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no read-ahead into the cache
        rng = random.Random(seed)
        buf = mmap.mmap(-1, RAND_BLOCK)
        lat, ends = array("q"), array("q")
        ready()
        deadline = time.monotonic_ns() + int(seconds * 1e9)
        while True:
            offset = rng.randrange(blocks) * RAND_BLOCK
            t0 = time.monotonic_ns()
            done = os.preadv(fd, [buf], offset)
            t1 = time.monotonic_ns()
            if done != RAND_BLOCK:
                raise OSError(f"short read: {done} bytes")
            lat.append(t1 - t0)
            ends.append(t1)
            if t1 >= deadline:
                break
        return lat.tobytes(), ends.tobytes()
    finally:
        os.close(fd)


def seq_pass(f: TestFile, jobs: int, write: bool, pass_no: int,
             buffers: Sequence[int] | None = None) -> tuple[float, bool]:
    """One pass over the whole file, `jobs` processes each on its own region, 1 MiB per call,
    each into its buffer (`io_buffers`, made for this pass unless given). Returns (seconds,
    every block read back carried its own index)."""
    if buffers is None:
        with io_buffers(jobs) as made:
            return seq_pass(f, jobs, write, pass_no, made)
    region = f.nbytes // jobs // SEQ_BLOCK
    seed = os.urandom(SEQ_BLOCK)  # random, never zeros: no compression or dedupe helps
    if not write:
        f.drop_cache()
    args = [(f.name, f.direct, k * region, region, write, pass_no, seed,
             buffers[k] if buffers else None) for k in range(jobs)]
    with Workers(_seq_worker, args, what="I/O worker") as w:
        start = time.perf_counter()
        results = w.results()  # writes: each worker's fsync included
        seconds = time.perf_counter() - start
    if write:
        f.drop_cache()
    return seconds, all(results)


def seq_passes(f: TestFile, p: Plan, write: bool, device: str | None
               ) -> tuple[list[float], bool, float | None]:
    """GB/s of each pass, whether every block read back carried its index, and the median
    requests per MiB the disk completed in that direction (None without a block device)."""
    samples, requests, ok = [], [], True
    for i in range(p.passes):
        before = disk_stat(device) if device else None
        seconds, good = seq_pass(f, p.seq_jobs, write, i)
        after = disk_stat(device) if device and before else None
        samples.append(gb_per_s(p.file_bytes, seconds))
        if before and after:
            requests.append(after.since(before).requests(write) / (p.file_bytes / MIB))
        ok = ok and good
    per_mib = round(statistics.median(requests), 2) if len(requests) == p.passes else None
    return samples, ok, per_mib


def split_note(per_mib: float, device: str | None) -> tuple[str, ...]:
    """A note where 1 MiB O_DIRECT reads reached the disk as more requests than the queue's
    size limit explains: split for their buffers' scattered pages."""
    largest = max_request_bytes(device) if device else None
    by_size = math.ceil(SEQ_BLOCK / largest) if largest else 1
    if per_mib <= SPLIT_FACTOR * by_size:
        return ()
    return (f"the disk took {per_mib:g} requests per MiB read (its size limit explains "
            f"{by_size}): the 1 MiB reads were split, their buffers' pages too scattered for "
            f"the queue's segment limit; such reads vary with where the pages sit (on virtio "
            f"disks ±25 % a pass; huge-page buffers read up to 1.9x)",)


@dataclass(frozen=True)
class RandomResult:
    ios: int
    seconds: float
    latencies_us: list[float]
    window_iops: list[float]


def random_reads(f: TestFile, depth: int, seconds: float, window_s: float,
                 seed: int = 0) -> RandomResult:
    """`depth` processes, each one 4 KiB pread at a time at a random aligned offset, for
    `seconds`. Latency is the host clock around each call."""
    if not f.direct:
        f.drop_cache()
    args = [(f.name, f.direct, f.nbytes // RAND_BLOCK, seconds, seed * 1000 + k)
            for k in range(depth)]
    lat: list[float] = []
    ends: list[float] = []
    with Workers(_rand_worker, args, what="I/O worker") as w:
        start_ns = time.monotonic_ns()
        for lat_bytes, end_bytes in w.results():
            lat.extend(x / 1000 for x in array("q", lat_bytes))
            ends.extend((x - start_ns) / 1e9 for x in array("q", end_bytes))
    elapsed = max(ends) if ends else seconds
    return RandomResult(ios=len(lat), seconds=elapsed, latencies_us=lat,
                        window_iops=window_rates(ends, 0.0, window_s))


# ---- the suite ----

def target_params(t: StorageTarget) -> Params:
    return {"path": t.path, "fs_type": t.fs_type, "mount_point": t.mount_point,
            "device": t.device, "device_model": t.device_model, "transport": t.transport,
            "rotational": t.rotational, "network_fs": t.network_fs}


def describe(t: StorageTarget, method: str) -> str:
    """'/data: xfs on nvme0n1 (nvme, SAMSUNG MZQL23T8, 3.5 TiB), O_DIRECT'."""
    if t.device:
        facts = ", ".join(x for x in (t.transport, t.device_model,
                                      human_bytes(t.device_size_bytes)
                                      if t.device_size_bytes else None,
                                      "rotational" if t.rotational else None) if x)
        where = f"{t.fs_type} on {t.device}" + (f" ({facts})" if facts else "")
    else:
        where = f"{t.fs_type} from {t.mount_source}"
    return f"{t.path}: {where}, page cache bypassed with {method}"


def random_measurements(r: RandomResult, depth: int, params: Params, warmup: int = 0,
                        suite: str = SUITE, notes: Sequence[str] = ()) -> list[Measurement]:
    """IOPS (spread over time windows) and latency percentiles of one random-read run."""
    name = f"rand4k_read_qd{depth}"
    p = {**params, "block_bytes": RAND_BLOCK, "queue_depth": depth, "ios": r.ios}
    iops = per_second(r.ios, r.seconds)
    samples = r.window_iops or [iops]
    m = measure(suite, name, "IOPS", samples, warmup=warmup, params=p, notes=notes)
    found = [m.model_copy(update={"value": iops, "statistic": "mean over the run"})]
    for q, v in percentiles(r.latencies_us).items():
        found.append(Measurement(suite=suite, name=f"{name}_{percentile_name(q)}", unit="µs",
                                 value=v, statistic=percentile_name(q),
                                 params=p, notes=tuple(notes)))
    return found


def run(ctx: BenchContext) -> Iterator[Measurement]:
    paths = paths_of(ctx)
    if not paths:
        yield skipped(SUITE, "seq_read", "GB/s", NO_PATH)
        return
    p = plan(ctx)
    check_plan(p)
    for path in paths:
        target = check_path(path, p)
        yield from _one_path(ctx, p, target)


def _one_path(ctx: BenchContext, p: Plan, target: StorageTarget) -> Iterator[Measurement]:
    f = TestFile(target.path, p.file_bytes, target.fs_type in MEMORY_FS)
    try:
        base = {**target_params(target), "cache_bypass": f.method,
                "file_bytes": p.file_bytes}
        notes = (f"network file system ({target.fs_type}): the figures include the network",) \
            if target.network_fs else ()
        seq = {**base, "block_bytes": SEQ_BLOCK, "threads": p.seq_jobs}
        for write in (True, False):
            name = "seq_write" if write else "seq_read"
            ctx.step(f"storage {target.path}: {name.replace('_', ' ')} "
                     f"{human_bytes(p.file_bytes)} × {p.passes}")
            samples, ok, per_mib = seq_passes(f, p, write, target.device)
            first = (describe(target, f.method),) if write else ()
            params: dict[str, Any] = seq
            split: tuple[str, ...] = ()
            if per_mib is not None:
                params = {**seq, "device_requests_per_mib": per_mib}
                if not write and f.direct:
                    split = split_note(per_mib, target.device)
            yield measure(SUITE, name, "GB/s", samples, warmup=0, params=params,
                          verified=None if write else ok, notes=first + split + notes)
        for depth in p.depths:
            ctx.step(f"storage {target.path}: random 4 KiB reads, depth {depth}")
            r = random_reads(f, depth, p.rand_seconds, p.window_s, seed=depth)
            yield from random_measurements(r, depth, base, notes=notes)
    finally:
        f.close()
