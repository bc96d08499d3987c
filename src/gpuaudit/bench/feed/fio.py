"""fio as the reference for the storage suite: the same jobs (psync, 1 MiB sequential with one
thread per region, 4 KiB random reads at the same depths and duration), on fio's own temporary
file under the same path, its figures named like ours with params tool="fio".

fio's own conventions: bw_bytes is bytes per second over the job's run time; IOPS likewise;
latency percentiles are of completion latency (clat; slat is nil for psync).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
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
    open_direct,
    paths_of,
    plan,
    target_params,
)
from gpuaudit.bench.stats import skipped
from gpuaudit.model import Measurement, Params

ENV_VAR = "GPUAUDIT_FIO"
NOT_FOUND = "fio not found (apt-get install fio, or set GPUAUDIT_FIO)"
PERCENTILE_KEYS = {"50.000000": "p50", "99.000000": "p99", "99.900000": "p99.9"}


def find_binary() -> str | None:
    path = os.environ.get(ENV_VAR) or shutil.which("fio")
    return path if path and os.path.isfile(path) and os.access(path, os.X_OK) else None


def job_file(p: Plan, filename: str, direct: bool) -> str:
    """A fio job file running our storage jobs one after the other (stonewall)."""
    region = p.file_bytes // p.seq_jobs // SEQ_BLOCK * SEQ_BLOCK
    lines = ["[global]", f"filename={filename}", "ioengine=psync", "thread=1",
             "group_reporting=1", f"direct={1 if direct else 0}", "invalidate=1"]
    for name, rw in (("seq_write", "write"), ("seq_read", "read")):
        lines += ["", f"[{name}]", "stonewall", f"rw={rw}", f"bs={SEQ_BLOCK}",
                  f"numjobs={p.seq_jobs}", f"size={region}", f"offset_increment={region}",
                  f"loops={p.passes}"]
        if rw == "write":
            lines.append("end_fsync=1")
    for depth in p.depths:
        lines += ["", f"[rand4k_read_qd{depth}]", "stonewall", "rw=randread",
                  f"bs={RAND_BLOCK}", f"numjobs={depth}", f"size={p.file_bytes}",
                  "time_based=1", f"runtime={p.rand_seconds:g}s", "randrepeat=0"]
    return "\n".join(lines) + "\n"


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


def to_measurements(jobs: list[dict[str, Any]], params: Params,
                    notes: tuple[str, ...] = ()) -> list[Measurement]:
    """Our names and units from fio's job results: GB/s for sequential jobs, IOPS and µs
    percentiles for random reads."""
    found: list[Measurement] = []
    base: Params = {**params, "tool": "fio"}

    def one(name: str, unit: str, value: float, statistic: str, extra: Mapping[str, Any]
            ) -> Measurement:
        return Measurement(suite=SUITE, name=name, unit=unit, value=value, statistic=statistic,
                           samples=(value,), params={**base, **extra}, notes=notes)

    for job in jobs:
        name = str(job.get("jobname", ""))
        if job.get("error"):
            found.append(skipped(SUITE, name, "", f"fio {name}: error {job['error']}",
                                 params=base))
            continue
        if name in ("seq_write", "seq_read"):
            side = job["write" if name == "seq_write" else "read"]
            found.append(one(name, "GB/s", float(side["bw_bytes"]) / 1e9, "fio aggregate",
                             {"block_bytes": SEQ_BLOCK}))
        elif name.startswith("rand4k_read_qd"):
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
    return found


def run_native(ctx: BenchContext) -> Iterator[Measurement]:
    """fio on each path (where installed), after our own figures for it."""
    paths = paths_of(ctx)
    if not paths:
        return
    exe = find_binary()
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
        with open(jobs_path, "w") as f:
            f.write(job_file(p, name, direct))
        ctx.step(f"fio on {path}")
        budget = ctx.timeout_s + len(p.depths) * p.rand_seconds
        try:
            done = subprocess.run([exe, "--output-format=json", jobs_path], capture_output=True,
                                  text=True, timeout=budget, check=False)
        except subprocess.TimeoutExpired:
            yield skipped(SUITE, "fio", "", f"fio timed out after {budget:g} s",
                          params={**params, "tool": "fio"})
            return
        try:
            jobs = parse_fio_json(done.stdout)
        except ValueError as exc:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
            yield skipped(SUITE, "fio", "", f"{exc} (exit {done.returncode}: {tail[0][:200]})",
                          params={**params, "tool": "fio"})
            return
        method = "O_DIRECT" if direct else "fio invalidate=1 (O_DIRECT refused)"
        yield from to_measurements(jobs, {**params, "cache_bypass": method,
                                          "file_bytes": p.file_bytes})
    finally:
        for leftover in (name, jobs_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)
