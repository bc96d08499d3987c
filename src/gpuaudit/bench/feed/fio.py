"""fio as the reference for the storage suite: the same jobs (psync, 1 MiB sequential with one
thread per region, 4 KiB random reads at the same depths and duration), on fio's own temporary
file under the same path, its figures named like ours with params tool="fio".

The same statistic as ours. Our sequential figure is the median of `passes` passes over the file
(one sample per pass, each write worker ending with fsync). fio's is made the same way: one fio run
per pass (`--section seq_write`, then `--section seq_read`, each run loops=1 over the whole file,
writes with end_fsync=1), each run's bandwidth one sample, and `measure()` gives the median and
IQR, statistic "median" like ours. (fio with loops=N reports one aggregate over all N loops:
bytes over the whole run, a different statistic.) Random reads stay one fio job per depth, as
ours are one run per depth (all depths in one fio run, stonewalled): IOPS over the job's run,
statistic "fio mean".

Alike per-call work: fio's sequential jobs run with gtod_reduce=1, no clock reads or latency
statistics per I/O (their run time is still timed; only their bandwidth is used), as our
sequential workers read no clock per call. With fio's default per-I/O timing, each 1 MiB write
took 5 % longer at a virtio disk (the H200 machine, 2026-12-01: 1.673 against 1.586 ms, 44
rounds) and fio's writes ran 5 % slower; its reads did not change (docs/feed.md). The random
reads keep it, their latency percentiles need it.

Alike written bytes: fio stamps every 512-byte sector of a write (scramble_buffers, its
default) and ours stamps each with (block, pass, sector), so a deduplicating store saves neither
tool anything. Sequential passes of both go through buffers made alike (storage.io_buffers).

fio's own conventions: bw_bytes is bytes per second over the job's run time (with
group_reporting, all threads' bytes over the slowest thread's run time, each thread's time from
its own start, rounded up to whole ms: up to 0.25 % of a 400 ms pass); a write job's run time
includes its end_fsync (fsync(2) by each thread when its region is done; ours likewise, one
fsync(2) per worker); IOPS likewise; latency
percentiles are of completion latency (clat; slat is nil for psync).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.feed.storage import (
    PREFIX,
    RAND_BLOCK,
    SEQ_BLOCK,
    SUITE,
    Plan,
    check_path,
    check_plan,
    io_buffers,
    open_direct,
    paths_of,
    plan,
    target_params,
)
from gpuaudit.bench.stats import measure, skipped
from gpuaudit.binaries import find_binary
from gpuaudit.model import Measurement, Params
from gpuaudit.parse import human_bytes

ENV_VAR = "GPUAUDIT_FIO"
NOT_FOUND = "fio not found (apt-get install fio, or set GPUAUDIT_FIO)"
SEQ_JOBS = ("seq_write", "seq_read")  # one pass over the file each
SEQ_NOTE = ("fio ran with gtod_reduce=1: no per-I/O clock reads or latency stats, as ours (on "
            "a virtio disk they made fio's writes 5 % slower)")
PERCENTILE_KEYS = {"50.000000": "p50", "99.000000": "p99", "99.900000": "p99.9"}


class FioFailed(Exception):
    """fio ran but gave no figures (timed out, no JSON): the one-line reason."""


def job_file(p: Plan, filename: str, direct: bool, buffers: Sequence[int] = ()) -> str:
    """A fio job file with one section per job of ours (stonewall between them). A sequential
    section is one pass over the file (loops=1): run it once per pass (`run_jobs`). With
    `buffers` (storage.io_buffers, one per thread, passed to fio with `pass_fds`), each thread
    of a sequential job is a section of its own that reads and writes through its buffer, as
    our worker does; the sections share the job's name and group (one figure)."""
    region = p.file_bytes // p.seq_jobs // SEQ_BLOCK * SEQ_BLOCK
    lines = ["[global]", f"filename={filename}", "ioengine=psync", "thread=1",
             "group_reporting=1", f"direct={1 if direct else 0}", "invalidate=1"]
    for name, rw in (("seq_write", "write"), ("seq_read", "read")):
        common = [f"rw={rw}", f"bs={SEQ_BLOCK}", f"size={region}", "loops=1", "gtod_reduce=1"]
        if rw == "write":
            common.append("end_fsync=1")
        if not buffers:
            lines += ["", f"[{name}]", "stonewall", *common, f"numjobs={p.seq_jobs}",
                      f"offset_increment={region}"]
            continue
        for k, fd in enumerate(buffers[:p.seq_jobs]):
            lines += ["", f"[{name}]", *(["stonewall"] if k == 0 else []), *common,
                      f"offset={k * region}", f"iomem=mmapshared:/proc/self/fd/{fd}"]
    for name, depth in zip(rand_jobs(p), p.depths, strict=True):
        lines += ["", f"[{name}]", "stonewall", "rw=randread",
                  f"bs={RAND_BLOCK}", f"numjobs={depth}", f"size={p.file_bytes}",
                  "time_based=1", f"runtime={p.rand_seconds:g}s", "randrepeat=0"]
    return "\n".join(lines) + "\n"


def rand_jobs(p: Plan) -> tuple[str, ...]:
    return tuple(f"rand4k_read_qd{depth}" for depth in p.depths)


def run_jobs(exe: str, jobs_path: str, sections: Sequence[str], timeout: float,
             pass_fds: Sequence[int] = ()) -> list[dict[str, Any]]:
    """One fio run of these sections (jobs) of the job file: its jobs' results. Raises
    FioFailed with a one-line reason when fio gives none."""
    if not sections:
        raise ValueError("no fio sections named (fio would run them all)")
    cmd = [exe, "--output-format=json", *(f"--section={s}" for s in sections), jobs_path]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              check=False, pass_fds=tuple(pass_fds))
    except subprocess.TimeoutExpired:
        raise FioFailed(f"fio timed out after {timeout:g} s") from None
    try:
        return parse_fio_json(done.stdout)
    except ValueError as exc:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        raise FioFailed(f"{exc} (exit {done.returncode}: {tail[0][:200]})") from None


def parse_fio_json(text: str) -> list[dict[str, Any]]:
    """The jobs of `fio --output-format=json` (one per reporting group), even with warnings
    printed before the JSON. Raises ValueError when there is none."""
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON in fio's output")
    try:
        doc, _ = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as exc:
        raise ValueError(f"fio's JSON does not parse: {exc}") from None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list) or not jobs:
        raise ValueError("fio's JSON has no jobs")
    return jobs


def seq_pass(exe: str, jobs_path: str, p: Plan, filename: str, direct: bool, job: str,
             timeout: float, buffers: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """One fio pass of the sequential `job` (seq_write or seq_read) through buffers made as
    ours are (`io_buffers`, made for this pass unless given); the job file at `jobs_path` is
    written for them."""
    if buffers is None:
        with io_buffers(p.seq_jobs) as made:
            return seq_pass(exe, jobs_path, p, filename, direct, job, timeout, made)
    with open(jobs_path, "w") as f:
        f.write(job_file(p, filename, direct, buffers))
    return run_jobs(exe, jobs_path, (job,), timeout, pass_fds=buffers)


def seq_rate(job: Mapping[str, Any]) -> float:
    """GB/s of one sequential fio job (one pass): its bw_bytes."""
    side = job["write" if job.get("jobname") == "seq_write" else "read"]
    return float(side["bw_bytes"]) / 1e9


def to_measurements(jobs: list[dict[str, Any]], params: Params,
                    notes: tuple[str, ...] = ()) -> list[Measurement]:
    """Our names and units from fio's job results. Each sequential job in `jobs` is one pass
    (one fio run): its passes become one GB/s Measurement, the median and IQR over them as
    `measure()` gives ours. Random reads: IOPS over the run and µs percentiles."""
    found: list[Measurement] = []
    base: Params = {**params, "tool": "fio"}
    passes: dict[str, list[float]] = {}
    failed: dict[str, str] = {}

    def one(name: str, unit: str, value: float, statistic: str, extra: Mapping[str, Any]
            ) -> Measurement:
        return Measurement(suite=SUITE, name=name, unit=unit, value=value, statistic=statistic,
                           samples=(value,), params={**base, **extra}, notes=notes)

    for job in jobs:
        name = str(job.get("jobname", ""))
        if name in SEQ_JOBS:
            if job.get("error"):
                failed.setdefault(name, f"fio {name}: error {job['error']}")
            passes.setdefault(name, []).append(seq_rate(job))
            continue
        if job.get("error"):
            found.append(skipped(SUITE, name, "", f"fio {name}: error {job['error']}",
                                 params=base))
            continue
        if name.startswith("rand4k_read_qd"):
            side = job["read"]
            depth = int(name.removeprefix("rand4k_read_qd"))
            extra = {"block_bytes": RAND_BLOCK, "queue_depth": depth,
                     "ios": int(side.get("total_ios", 0))}
            found.append(one(name, "IOPS", float(side["iops"]), "fio mean", extra))
            pct = (side.get("clat_ns") or {}).get("percentile") or {}
            for key, label in PERCENTILE_KEYS.items():
                if key in pct:
                    found.append(one(f"{name}_{label}", "µs", float(pct[key]) / 1000, label,
                                     extra))
    seq: list[Measurement] = []
    for name, rates in passes.items():
        if name in failed:
            seq.append(skipped(SUITE, name, "GB/s", failed[name], params=base))
        else:
            seq.append(measure(SUITE, name, "GB/s", rates, warmup=0, notes=notes,
                               params={**base, "block_bytes": SEQ_BLOCK, "passes": len(rates)}))
    return seq + found


def run_native(ctx: BenchContext) -> Iterator[Measurement]:
    """fio on each path (where installed), after our own figures for it."""
    paths = paths_of(ctx)
    if not paths:
        return
    exe = find_binary("fio", path_env=ENV_VAR)
    if exe is None:
        yield skipped(SUITE, "fio", "", NOT_FOUND, params={"tool": "fio"})
        return
    p = plan(ctx)
    check_plan(p)
    for path in paths:
        target = check_path(path, p)
        yield from _one_path(ctx, exe, p, target.path, target_params(target))


def _one_path(ctx: BenchContext, exe: str, p: Plan, path: str, params: Params
              ) -> Iterator[Measurement]:
    fd, name = tempfile.mkstemp(prefix=PREFIX + "fio-", dir=path)
    os.close(fd)
    jobs_path = name + ".fio"
    try:
        probe = open_direct(name)
        if probe is not None:
            os.close(probe)
        direct = probe is not None
        method = "O_DIRECT" if direct else "fio invalidate=1 (O_DIRECT refused)"
        base = {**params, "cache_bypass": method, "file_bytes": p.file_bytes}
        try:
            # As ours: every write pass, then every read pass (one fio run each, through
            # buffers made for it as ours are), then the random reads (one fio run, a job per
            # depth).
            for job in SEQ_JOBS:
                ctx.step(f"fio on {path}: {job.replace('_', ' ')} "
                         f"{human_bytes(p.file_bytes)} × {p.passes}")
                yield from to_measurements(
                    [found for _ in range(p.passes)
                     for found in seq_pass(exe, jobs_path, p, name, direct, job, ctx.timeout_s)],
                    base, notes=(SEQ_NOTE,))
            if p.depths:
                ctx.step(f"fio on {path}: random 4 KiB reads")
                with open(jobs_path, "w") as f:
                    f.write(job_file(p, name, direct))
                yield from to_measurements(
                    run_jobs(exe, jobs_path, rand_jobs(p),
                             ctx.timeout_s + len(p.depths) * p.rand_seconds), base)
        except FioFailed as exc:
            yield skipped(SUITE, "fio", "", str(exc), params={**params, "tool": "fio"})
    finally:
        for leftover in (name, jobs_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)
