"""NVIDIA nccl-tests (`all_reduce_perf` and friends): parse their text output, and run them
over the collectives suite's size sweep for comparison (`gpuaudit bench --with-native`).

The measurements carry the same names as ours (`{op}_busbw`, `{op}_busbw_peak`), told apart by
params["tool"] == "nccl-tests". nccl-tests' time is the mean over `-n` back-to-back ops and over
ranks (one figure per size, no per-iteration samples), so the statistic is "mean".
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpuaudit.bench.collectives import (
    NEEDS_TWO,
    OPS,
    SUITE,
    UNIT,
    int_option,
    line_rate_gbps,
    sweep_range,
)
from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.stats import pct_of, skipped
from gpuaudit.binaries import find_binary
from gpuaudit.errors import BadInputError
from gpuaudit.hw.torch_env import apply_safe_env
from gpuaudit.model import Measurement, Params

BINARIES = {
    "all_reduce": "all_reduce_perf",
    "all_gather": "all_gather_perf",
    "reduce_scatter": "reduce_scatter_perf",
    "all_to_all": "alltoall_perf",
    "broadcast": "broadcast_perf",
}
ENV_DIR = "GPUAUDIT_NCCL_TESTS"
RUNS_ENV = "GPUAUDIT_NCCL_TESTS_RUNS"
ITERS_ENV = "GPUAUDIT_NCCL_TESTS_ITERS"
LAUNCH_ENV = "GPUAUDIT_NCCL_TESTS_LAUNCH"
MPI_DIR_ENV = "GPUAUDIT_NCCL_TESTS_MPI"  # a build with MPI=1, for launch "mpi"
NOT_FOUND = "nccl-tests not found (set GPUAUDIT_NCCL_TESTS or put all_reduce_perf on PATH)"

# How nccl-tests launches the ops, for N GPUs. Its host clock times the launches too, so at
# small sizes the figure depends on it (2026-12-01, 2 H200s: with one thread launching for
# both GPUs, all-gather, reduce-scatter and all-to-all of 1 MiB all took ~21 µs an op, the
# launching thread's pace, where the GPUs need ~11).
#   threads  one thread per GPU (-t N -g 1): each GPU's ops launched by its own thread, as
#            each of our ranks (and each torchrun process) launches its own
#   group    one thread launches for all GPUs (-g N): nccl-tests' usual single-node form
#   mpi      one process per GPU under mpirun (-g 1; a build with MPI=1 in
#            GPUAUDIT_NCCL_TESTS_MPI): our ranks' layout exactly, processes and all
LAUNCHES = ("threads", "group", "mpi")
DEFAULT_LAUNCH = "group"
NCCL_TYPES = {"float32": "float", "bfloat16": "bfloat16"}  # our dtype → nccl-tests' -d


@dataclass(frozen=True)
class NcclTestsRow:
    """One size of an nccl-tests table; the unprefixed figures are the out-of-place column.
    `wrong` is None where nccl-tests printed N/A (run with -c 0)."""

    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int | None  # None in outputs older than the root column (2019)
    time_us: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    wrong: int | None
    in_place_time_us: float | None
    in_place_algbw_gbps: float | None
    in_place_busbw_gbps: float | None
    in_place_wrong: int | None


_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}$|^\d{2}:\d{2}:\d{2}$")  # -S 1 appends date time
_MPI_PREFIX = re.compile(r"^\[[\d,]+\]<stdout>:")  # mpirun --tag-output
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)", re.MULTILINE)
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)", re.MULTILINE)


def _wrong(token: str) -> int | None:
    return None if token.upper() == "N/A" else int(float(token))  # "0", "1e+06", "0e+00"


def _block(tokens: list[str]) -> tuple[float, float, float, int | None]:
    return float(tokens[0]), float(tokens[1]), float(tokens[2]), _wrong(tokens[3])


def _row(line: str) -> NcclTestsRow | None:
    tokens = _MPI_PREFIX.sub("", line.strip()).split()
    while tokens and _TIMESTAMP.match(tokens[-1]):
        tokens.pop()
    if len(tokens) < 8 or not tokens[0].isdigit() or not tokens[1].isdigit():
        return None
    rest = tokens[4:]
    root = None
    if len(rest) % 4 == 1:  # the root column (every version since 2019)
        root, rest = int(rest[0]), rest[1:]
    # Per block: time algbw busbw #wrong, plus i_min i_max i_p99 i_cv% with -I 1.
    width = {8: 4, 16: 8}.get(len(rest))
    try:
        if width is None:
            if len(rest) != 4:  # a trace replay prints the in-place block only
                return None
            oop, ip = None, _block(rest)
        else:
            oop, ip = _block(rest[:4]), _block(rest[width:width + 4])
    except ValueError:
        return None
    return NcclTestsRow(
        size_bytes=int(tokens[0]), count=int(tokens[1]), dtype=tokens[2], redop=tokens[3],
        root=root,
        time_us=oop[0] if oop else None, algbw_gbps=oop[1] if oop else None,
        busbw_gbps=oop[2] if oop else None, wrong=oop[3] if oop else None,
        in_place_time_us=ip[0], in_place_algbw_gbps=ip[1], in_place_busbw_gbps=ip[2],
        in_place_wrong=ip[3])


def parse_nccl_tests(text: str) -> list[NcclTestsRow]:
    """The table rows of an nccl-tests run (header, device and NCCL log lines are skipped)."""
    rows = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        row = _row(line)
        if row is not None:
            rows.append(row)
    return rows


def avg_bus_bandwidth(text: str) -> float | None:
    """The `# Avg bus bandwidth` footer: the mean busbw of every printed row, out-of-place and
    in-place alike (so it depends on -b/-e; compare peaks, not this)."""
    m = _AVG.search(text)
    try:
        return float(m.group(1)) if m else None
    except ValueError:
        return None


def out_of_bounds(text: str) -> int | None:
    """The `# Out of bounds values` footer: rows whose wrong count was not 0."""
    m = _OOB.search(text)
    return int(m.group(1)) if m else None


def _visible_devices(ctx: BenchContext) -> str:
    """CUDA_VISIBLE_DEVICES selecting exactly the chosen GPUs: by UUID where torch gave one,
    else by index (through the user's own CUDA_VISIBLE_DEVICES, which those indices follow)."""
    outer = [x for x in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip()]
    ids = []
    for d, _ in ctx.devices:
        if len(d.uuid) > len("GPU-"):
            ids.append(d.uuid)
        else:
            ids.append(outer[d.cuda_index] if d.cuda_index < len(outer) else str(d.cuda_index))
    return ",".join(ids)


def launches(ctx: BenchContext) -> list[str]:
    """The launch forms to run (option native_launch or GPUAUDIT_NCCL_TESTS_LAUNCH, a comma
    list); an unknown one is bad input."""
    raw = ctx.options.get("native_launch") or os.environ.get(LAUNCH_ENV) or DEFAULT_LAUNCH
    names = [x.strip() for x in (raw.split(",") if isinstance(raw, str) else raw) if x.strip()]
    unknown = [x for x in names if x not in LAUNCHES]
    if unknown or not names:
        raise BadInputError(f"nccl-tests launch {', '.join(unknown) or '(none)'!s}: "
                            f"expected one or more of {', '.join(LAUNCHES)}")
    return list(dict.fromkeys(names))


def preflight(ctx: BenchContext) -> None:
    """A launch form that does not exist is refused before anything is measured."""
    launches(ctx)


def launch_command(launch: str, exe: str, n: int, mpirun: str | None = None) -> list[str]:
    """The command line that starts `exe` on n GPUs in the given launch form (its size and
    timing arguments follow)."""
    if launch == "threads":
        return [exe, "-t", str(n), "-g", "1"]
    if launch == "group":
        return [exe, "-g", str(n)]
    if mpirun is None:
        raise ValueError("launch 'mpi' needs mpirun")
    return [mpirun, "-np", str(n), exe, "-g", "1"]


def _pip_nccl_lib() -> str | None:
    """The lib folder of the nvidia-nccl-cu* wheel (torch's NCCL), if installed: nccl-tests
    built against it find libnccl.so.2 there."""
    with contextlib.suppress(ImportError, ValueError):
        spec = importlib.util.find_spec("nvidia.nccl")
        for root in (spec.submodule_search_locations or []) if spec else []:
            if (Path(root) / "lib").is_dir():
                return str(Path(root) / "lib")
    return None


def _last_line(text: str) -> str:
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    return lines[-1] if lines else ""


def row_measurement(op: str, row: NcclTestsRow, *, ranks: int, warmup: int, iters: int,
                    spec: float | None, name: str | None = None, run: int | None = None,
                    launch: str = DEFAULT_LAUNCH) -> Measurement | None:
    """A Measurement of one nccl-tests row's out-of-place busbw (None if the row has none)."""
    if row.busbw_gbps is None:
        return None
    wrongs = [w for w in (row.wrong, row.in_place_wrong) if w is not None]
    notes = []
    if sum(wrongs):
        notes.append(f"nccl-tests counted {sum(wrongs)} wrong elements")
    params: Params = {
        "tool": "nccl-tests", "op": op, "size_bytes": row.size_bytes, "count": row.count,
        "dtype": row.dtype, "ranks": ranks, "algbw_gbps": row.algbw_gbps,
        "time_us": row.time_us, "in_place_busbw_gbps": row.in_place_busbw_gbps,
        "iters": iters, "wrong": sum(wrongs) if wrongs else None, "launch": launch,
    }
    if run is not None:  # one of several runs in the same call (run-to-run spread)
        params["run"] = run
    return Measurement(
        suite=SUITE, name=name or f"{op}_busbw", unit=UNIT, value=row.busbw_gbps,
        statistic="mean", samples=(row.busbw_gbps,), warmup=warmup, spec_value=spec,
        pct_of_spec=pct_of(row.busbw_gbps, spec), params=params,
        verified=(sum(wrongs) == 0) if wrongs else None, notes=tuple(notes))


def run_native(ctx: BenchContext) -> Iterator[Measurement]:
    """Each nccl-tests binary over the suite's sweep on the chosen GPUs, in each launch form
    asked for (`launches`; -g N, one process, by default)."""
    dtype = str(ctx.options.get("dtype", "float32"))
    if not ctx.on_gpu or len(ctx.devices) < 2:
        reason = NEEDS_TWO if ctx.on_gpu else "no GPU: nccl-tests needs 2 or more NVIDIA GPUs"
        for op in OPS:
            yield skipped(SUITE, f"{op}_busbw", UNIT, reason, params={"tool": "nccl-tests"})
        return
    n = len(ctx.devices)
    lo, hi, factor = sweep_range(ctx)
    warmup = int_option(ctx, "warmup", 5)
    # -n: ops per timed batch (ours: 20). nccl-tests' host clock adds its launch and sync
    # latency over -n to each op: ~4 % of a 1 MiB all-reduce at -n 20, ~1 % at -n 100
    # (option native_iters or GPUAUDIT_NCCL_TESTS_ITERS).
    iters = int_option(ctx, "native_iters",
                       os.environ.get(ITERS_ENV) or int_option(ctx, "iters", 20))
    spec = line_rate_gbps(ctx)
    env = apply_safe_env(dict(os.environ))
    env["CUDA_VISIBLE_DEVICES"] = _visible_devices(ctx)
    if lib := _pip_nccl_lib():  # last: a system NCCL the binary was linked with comes first
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (env.get("LD_LIBRARY_PATH"), lib) if p)
    # repeated (option native_runs, or GPUAUDIT_NCCL_TESTS_RUNS): its run-to-run spread
    runs = max(1, int_option(ctx, "native_runs", os.environ.get(RUNS_ENV, "1")))
    forms = launches(ctx)
    mpirun = shutil.which("mpirun") if "mpi" in forms else None
    if mpirun:  # Open MPI refuses root without these; MPICH ignores them
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    sizes = ["-b", str(lo), "-e", str(hi), "-f", str(factor), "-c", "1", "-w", str(warmup),
             "-n", str(iters), "-d", NCCL_TYPES.get(dtype, "float")]
    for op, binary in BINARIES.items():
        for launch in forms:
            base: Params = {"tool": "nccl-tests", "op": op, "launch": launch}
            exe, reason = _binary(binary, launch, mpirun)
            if exe is None:
                yield skipped(SUITE, f"{op}_busbw", UNIT, reason, params=base)
                continue
            cmd = launch_command(launch, exe, n, mpirun) + sizes
            for run in range(1, runs + 1):
                ctx.step(f"nccl-tests {binary} ({launch}"
                         + (f", run {run} of {runs})" if runs > 1 else ")"))
                yield from _one_run(ctx, op, binary, cmd, env, run if runs > 1 else None,
                                    ranks=n, warmup=warmup, iters=iters, spec=spec,
                                    launch=launch)


def _binary(binary: str, launch: str, mpirun: str | None) -> tuple[str | None, str]:
    """(the executable for this launch form, or None and why). Form mpi takes only the MPI=1
    build's (one built without MPI under mpirun would run N single-rank copies)."""
    if launch != "mpi":
        exe = find_binary(binary, dir_env=ENV_DIR)  # e.g. nccl-tests/build
        return exe, NOT_FOUND
    folder = os.environ.get(MPI_DIR_ENV)
    if not folder:
        return None, f"launch mpi needs {MPI_DIR_ENV}: a folder of nccl-tests built with MPI=1"
    path = Path(folder) / binary
    if not (path.is_file() and os.access(path, os.X_OK)):
        return None, f"{binary} not in {MPI_DIR_ENV} ({folder})"
    if mpirun is None:
        return None, "mpirun not found (launch mpi)"
    return str(path), ""


def _one_run(ctx: BenchContext, op: str, binary: str, cmd: list[str], env: dict[str, str],
             run: int | None, *, ranks: int, warmup: int, iters: int, spec: float | None,
             launch: str = DEFAULT_LAUNCH) -> Iterator[Measurement]:
    base: Params = {"tool": "nccl-tests", "op": op, "launch": launch,
                    **({"run": run} if run else {})}
    failure = None
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True,
                              timeout=ctx.timeout_s, stdin=subprocess.DEVNULL)
        out, err = done.stdout, done.stderr
        if done.returncode != 0:
            failure = (f"{binary} exited with status {done.returncode}: "
                       f"{_last_line(err) or _last_line(out)}")
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) \
            else (exc.stdout or "")
        failure = f"timed out after {ctx.timeout_s:g} s (hung collective?)"
    except OSError as exc:
        yield skipped(SUITE, f"{op}_busbw", UNIT, f"{binary} could not run: {exc}",
                      params=base)
        return
    rows = parse_nccl_tests(out)
    found = [m for r in rows
             if (m := row_measurement(op, r, ranks=ranks, warmup=warmup, iters=iters,
                                      spec=spec, run=run, launch=launch)) is not None]
    yield from found
    # nccl-tests also exits non-zero when it counted wrong elements: those rows say so.
    if failure and not any(m.verified is False for m in found):
        where = {"after_size_bytes": rows[-1].size_bytes} if rows else {}
        yield skipped(SUITE, f"{op}_busbw", UNIT, failure, params={**base, **where})
    if found:
        best = max(found, key=lambda m: m.value or 0.0)
        yield best.model_copy(update={"name": f"{op}_busbw_peak"})
