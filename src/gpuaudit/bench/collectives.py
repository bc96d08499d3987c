"""Collectives: all-reduce, all-gather, reduce-scatter, all-to-all and broadcast over a size
sweep, one process per GPU through torch.distributed (NCCL; gloo on a machine without GPUs).

Figures follow nccl-tests (doc/PERFORMANCE.md and src/<op>.cu): algbw = S / t with S as
`algbw_bytes` defines it per op, busbw = algbw × `bus_factor` (all-reduce 2(n−1)/n;
all-gather, reduce-scatter, all-to-all (n−1)/n; broadcast 1), GB = 10^9 B. A sweep size is
the figure nccl-tests prints in its `size` column for the same `-b/-e`, so the two compare
row by row. The work runs in `gpuaudit.bench.collectives_worker` processes; this module
starts them, turns what rank 0 reports into Measurements, and kills them on a hang.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import IO, Any

from gpuaudit.bench.collectives_worker import DTYPES, MARKER
from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.stats import measure, median, skipped
from gpuaudit.hw.torch_env import apply_safe_env
from gpuaudit.model import LinkKind, Measurement, Params
from gpuaudit.parse import human_bytes

SUITE = "collectives"
UNIT = "GB/s"
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
# Ops whose nccl-tests S (and our buffers) is split into one block per rank.
_PER_RANK_BLOCKS = frozenset({"all_gather", "reduce_scatter", "all_to_all"})
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
CPU_SIZES = (KIB, 4 * MIB, 4)  # gloo on the host: small, so CI runs it in seconds
NEEDS_TWO = "needs 2 or more GPUs"
STARTUP_S = 60.0  # the least time the workers get to start before their first report


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw for `op` on n ranks."""
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}")
    if op == "broadcast":
        return 1.0
    if n < 1:
        raise ValueError("n must be at least 1")
    return (2.0 if op == "all_reduce" else 1.0) * (n - 1) / n


def algbw_bytes(op: str, count: int, dtype_size: int, n: int) -> int:
    """The S of algbw = S / t: nccl-tests' `count` (elements per op, per rank block for
    all-gather, reduce-scatter and all-to-all) times the element size, times n for those three."""
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}")
    return count * dtype_size * (n if op in _PER_RANK_BLOCKS else 1)


def op_count(op: str, size_bytes: int, dtype_size: int, n: int) -> int:
    """nccl-tests' `count` for a sweep size (at least 1 element)."""
    parts = n if op in _PER_RANK_BLOCKS else 1
    return max(1, size_bytes // (dtype_size * parts))


def size_sweep(lo: int, hi: int, factor: int = 2) -> list[int]:
    """lo, lo·factor, … up to hi inclusive (nccl-tests' -b lo -e hi -f factor)."""
    if lo < 1 or hi < lo or factor < 2:
        raise ValueError(f"bad size sweep {lo}..{hi} ×{factor}")
    sizes = [lo]
    while sizes[-1] * factor <= hi:
        sizes.append(sizes[-1] * factor)
    return sizes


def sweep_range(ctx: BenchContext) -> tuple[int, int, int]:
    """(smallest, largest, factor) in bytes for this run."""
    if ctx.size_range is not None:
        return ctx.size_range[0], ctx.size_range[1], 2
    if not ctx.on_gpu:
        return CPU_SIZES
    return ctx.pick((MIB, 256 * MIB, 4), (8, 4 * GIB, 2), (8, 16 * GIB, 2))


def line_rate_gbps(ctx: BenchContext) -> float | None:
    """What busbw is judged against: with every pair of the chosen GPUs on NVLink, the
    datasheet NVLink bandwidth per direction (its bidirectional total / 2); else unknown."""
    indices = [i for _, i in ctx.devices]
    if len(indices) < 2:
        return None
    for a, b in combinations(indices, 2):
        link = ctx.machine.link(a, b)
        if link is None or link.kind is not LinkKind.NVLINK:
            return None
    rates = [s.nvlink_bandwidth_gbps if (s := ctx.spec(i)) else None for i in indices]
    if any(r is None for r in rates):
        return None
    return min(r for r in rates if r is not None) / 2


@dataclass(frozen=True)
class Item:
    """One (op, size) the workers measure."""

    op: str
    count: int
    size_bytes: int  # algbw_bytes of it


def plan(ops: Sequence[str], sizes: Sequence[int], dtype_size: int, n: int) -> list[Item]:
    """Items in nccl-tests' order (op by op, sizes ascending); a sweep size that rounds to the
    same count as the previous one (tiny sizes on many ranks) is measured once."""
    items: list[Item] = []
    for op in ops:
        seen: set[int] = set()
        for size in sizes:
            count = op_count(op, size, dtype_size, n)
            if count not in seen:
                seen.add(count)
                items.append(Item(op, count, algbw_bytes(op, count, dtype_size, n)))
    return items


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# A Python exception line ("RuntimeError: …", "torch.distributed.DistBackendError: …"), maybe
# prefixed by torch's "[rank1]: ": a better reason than the abort message that often follows.
_EXCEPTION = re.compile(r"^(?:\[rank\d+\]:\s*)?((?:\w+\.)*\w*(?:Error|Exception)\b.*)$")


def _last_line(path: Path) -> str:
    """The reason a worker gave when it died: its last exception line, else its last line."""
    try:
        lines = [x.strip() for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    for line in reversed(lines):
        if m := _EXCEPTION.match(line):
            return m.group(1)
    return lines[-1] if lines else ""


class Workers:
    """The worker processes of one run, each in its own process group so that a kill takes
    everything it started; `events()` yields rank 0's reports and sets `failure` on a hang or
    a crash."""

    def __init__(self, config: dict[str, Any], n: int, *, timeout_s: float,
                 extra_env: dict[str, str] | None = None,
                 module: str = "gpuaudit.bench.collectives_worker",
                 marker: str = MARKER,
                 master: tuple[str, int] | None = None, first_rank: int = 0,
                 world_size: int | None = None) -> None:
        """`n` local ranks. Across hosts (`gpuaudit fleet`), as torchrun starts them: ranks
        `first_rank`.. of `world_size`, meeting at `master` (rank 0's host and port)."""
        self.timeout_s = timeout_s
        self.marker = marker
        self.failure: str | None = None
        self.first_rank = first_rank
        self._dir = tempfile.TemporaryDirectory(prefix="gpuaudit-collectives-")
        self._procs: list[subprocess.Popen[str]] = []
        self._stderr: list[Path] = []
        self._files: list[IO[str]] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        env = apply_safe_env(dict(os.environ))
        # The children must import this very gpuaudit, however the parent found it.
        src = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        env.update(extra_env or {})
        addr, port = master or ("127.0.0.1", _free_port())
        env.update(MASTER_ADDR=addr, MASTER_PORT=str(port), WORLD_SIZE=str(world_size or n))
        cmd = [sys.executable, "-m", module, json.dumps(config)]
        try:
            for local in range(n):
                rank = first_rank + local
                err_path = Path(self._dir.name) / f"rank{rank}.err"
                err = open(err_path, "w")  # noqa: SIM115 - closed in close()
                self._files.append(err)
                self._stderr.append(err_path)
                self._procs.append(subprocess.Popen(
                    cmd, env={**env, "RANK": str(rank), "LOCAL_RANK": str(local)},
                    stdin=subprocess.DEVNULL, stderr=err, text=True,
                    stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
                    start_new_session=True))
        except BaseException:
            self.close()
            raise
        self._reader = threading.Thread(target=self._read, args=(self._procs[0].stdout,),
                                        daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str] | None) -> None:
        with contextlib.suppress(ValueError, OSError):  # the stream closed under us
            for line in stream or ():
                self._lines.put(line)
        self._lines.put(None)

    def wait(self) -> str | None:
        """For ranks that do not report (no rank 0 here): wait until they exit; why they
        failed (a crash, or the timeout), or None."""
        deadline = time.monotonic() + self.timeout_s
        while any(p.poll() is None for p in self._procs):
            if (crashed := self._crashed()) is not None:
                return crashed
            if time.monotonic() > deadline:
                return f"timed out after {self.timeout_s:g} s (hung collective?)"
            time.sleep(0.2)
        return self._crashed()

    def _crashed(self) -> str | None:
        """Why the run failed, from the worker that failed first: when one rank dies the others
        fail next ("connection closed by peer"), so the earliest-written stderr tells the cause."""
        failed = []
        for rank, p in enumerate(self._procs):
            rc = p.poll()
            if rc is not None and rc != 0:
                with contextlib.suppress(OSError):
                    failed.append((self._stderr[rank].stat().st_mtime, rank, rc))
        if not failed:
            return None
        _, local, rc = min(failed)
        why = _last_line(self._stderr[local]) or f"exit status {rc}"
        return f"worker rank {self.first_rank + local} failed: {why}"

    def events(self) -> Iterator[dict[str, Any]]:
        # Renewed by every report (progress). Before the first one the workers import torch
        # and set NCCL up, which on a loaded host takes longer than a short --timeout.
        deadline = time.monotonic() + max(self.timeout_s, STARTUP_S)
        while True:
            try:
                line = self._lines.get(timeout=0.2)
            except queue.Empty:
                self.failure = self._crashed()
                if self.failure is None and time.monotonic() > deadline:
                    self.failure = f"timed out after {self.timeout_s:g} s (hung collective?)"
                if self.failure:
                    return
                continue
            if line is None:  # rank 0 closed stdout: it exited
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._procs[0].wait(timeout=10)
                self.failure = self._crashed() or "worker rank 0 stopped without reporting"
                return
            if line.startswith(self.marker + " "):
                deadline = time.monotonic() + self.timeout_s
                yield json.loads(line[len(self.marker) + 1:])

    def close(self, grace_s: float = 0.0) -> None:
        """Kill the workers still running after `grace_s` (they exit by themselves after a
        complete run), with everything they started."""
        end = time.monotonic() + grace_s
        for p in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.0, end - time.monotonic()))
        for p in self._procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGKILL)
        for p in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        if hasattr(self, "_reader"):
            self._reader.join(timeout=5)  # EOF once the workers are gone
        for p in self._procs:
            if p.stdout:
                p.stdout.close()
        for f in self._files:
            f.close()
        self._dir.cleanup()


def int_option(ctx: BenchContext, key: str, default: int) -> int:
    value = ctx.options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"option {key} must be an integer, not {value!r}")
    return int(value)


def _options(ctx: BenchContext) -> tuple[list[str], str]:
    chosen = ctx.options.get("ops", OPS)
    ops = [str(o) for o in chosen] if isinstance(chosen, list | tuple) else [str(chosen)]
    unknown = [o for o in ops if o not in OPS]
    if unknown:
        raise ValueError(f"unknown collective {', '.join(unknown)} (choose from {OPS})")
    dtype = str(ctx.options.get("dtype", "float32"))
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return ops, dtype


def run(ctx: BenchContext) -> Iterator[Measurement]:
    ops, dtype = _options(ctx)
    if ctx.on_gpu and len(ctx.devices) < 2:
        for op in ops:
            yield skipped(SUITE, f"{op}_busbw", UNIT, NEEDS_TWO, params={"op": op})
        return
    if importlib.util.find_spec("torch") is None:
        for op in ops:
            yield skipped(SUITE, f"{op}_busbw", UNIT,
                          "torch is not installed (pip install 'gpuaudit[torch]')",
                          params={"op": op})
        return
    backend = "nccl" if ctx.on_gpu else "gloo"
    n = len(ctx.devices) if ctx.on_gpu else int_option(ctx, "cpu_ranks", 2)
    warmup = int_option(ctx, "warmup", 5 if ctx.on_gpu else 2)
    # ops per timed batch: nccl-tests' default -n; batches: for the spread
    iters = int_option(ctx, "iters", 20 if ctx.on_gpu else 5)
    reps = int_option(ctx, "reps", ctx.pick(5, 10, 20) if ctx.on_gpu else 5)
    lo, hi, factor = sweep_range(ctx)
    items = plan(ops, size_sweep(lo, hi, factor), DTYPES[dtype], n)
    spec = line_rate_gbps(ctx) if ctx.on_gpu else None
    config = {
        "backend": backend, "dtype": dtype, "warmup": warmup, "iters": iters, "reps": reps,
        "items": [[it.op, it.count] for it in items],
        "cuda_indices": [d.cuda_index for d, _ in ctx.devices] or None,
        **{k: ctx.options[k] for k in ("corrupt_rank", "hang_rank", "crash_rank", "hang_at", "seed")
           if k in ctx.options},
    }
    extra = {}
    if backend == "gloo":
        extra["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")
        if sys.platform.startswith("linux"):  # every rank is on this host
            extra["GLOO_SOCKET_IFNAME"] = os.environ.get("GLOO_SOCKET_IFNAME", "lo")

    def params(it: Item) -> Params:
        return {"op": it.op, "size_bytes": it.size_bytes, "dtype": dtype, "ranks": n,
                "backend": backend}

    done: set[int] = set()
    complete = False
    best: dict[str, Measurement] = {}
    sizes_done: dict[str, int] = {}
    workers = Workers(config, n, timeout_s=ctx.timeout_s, extra_env=extra)
    try:
        for event in workers.events():
            kind = event.get("event")
            if kind == "done":
                complete = True
                break
            it = items[int(event["i"])]
            if kind == "start":
                ctx.step(f"collectives {it.op} {human_bytes(it.size_bytes)}")
                continue
            done.add(int(event["i"]))
            if kind == "skip":
                yield skipped(SUITE, f"{it.op}_busbw", UNIT, str(event["reason"]),
                              params=params(it), spec_value=spec)
                continue
            m = _measurement(it, event, n, warmup, spec, params(it))
            yield m
            if m.skipped:
                continue
            sizes_done[it.op] = sizes_done.get(it.op, 0) + 1
            if it.op not in best or (m.value or 0) > (best[it.op].value or 0):
                best[it.op] = m
        failure = workers.failure
    finally:
        workers.close(grace_s=10.0 if complete else 0.0)
    for i, it in enumerate(items):
        if i not in done:
            yield skipped(SUITE, f"{it.op}_busbw", UNIT, failure or "the workers stopped early",
                          params=params(it), spec_value=spec)
    for op in ops:
        if op in best:
            b = best[op]
            yield b.model_copy(update={"name": f"{op}_busbw_peak",
                                       "params": {**b.params, "sizes_measured": sizes_done[op]}})


def _measurement(it: Item, event: dict[str, Any], n: int, warmup: int, spec: float | None,
                 params: Params) -> Measurement:
    times = [float(t) for t in event["times_s"] if float(t) > 0]
    if not times:
        return skipped(SUITE, f"{it.op}_busbw", UNIT, "no valid timing (clock resolution?)",
                       params=params, spec_value=spec)
    algbw = [it.size_bytes / t / 1e9 for t in times]
    factor = bus_factor(it.op, n)
    wrong, checked = int(event["wrong"]), int(event["checked"])
    queued, ops = int(event.get("queued", len(times))), int(event.get("iters", 1))
    notes = []
    if wrong:
        notes.append(f"{wrong} of {checked} elements wrong in the result check")
    if queued < len(times):
        notes.append(f"{len(times) - queued} of {len(times)} batches started before the host "
                     "had queued them: the host may be in those figures")
    return measure(
        SUITE, f"{it.op}_busbw", UNIT, [a * factor for a in algbw], warmup=warmup,
        spec_value=spec, gpu_index=None, verified=wrong == 0, notes=notes,
        params={**params, "algbw_gbps": float(f"{median(algbw):.6g}"),
                "time_us": float(f"{median(times) * 1e6:.6g}"), "busbw_factor": factor,
                "wrong": wrong, "ops_per_batch": ops, "batches": len(times),
                "batches_prequeued": queued,
                # torch.distributed has no out-of-place all_reduce or broadcast; NCCL's speed
                # is the same in place (nccl-tests prints both columns and they agree)
                "in_place": it.op in ("all_reduce", "broadcast")})

