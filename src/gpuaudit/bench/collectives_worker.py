"""One rank of the collectives suite: `python -m gpuaudit.bench.collectives_worker CONFIG_JSON`.

Started by `gpuaudit.bench.collectives.run`, one process per GPU (NCCL) or per CPU rank (gloo),
with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in the environment. Rank 0 reports on stdout,
one `MARKER {json}` line per event; everything else a library prints there is ignored.

Timing follows nccl-tests (src/common.cu, BenchTime): per size, warm-up ops, a barrier, then
`iters` ops launched back to back and timed as one batch (nccl-tests: a host clock around the
launches and a stream sync; here: two CUDA events around the batch), the time per op being the
batch's time over `iters`, averaged over the ranks (nccl-tests' default `-a 1`). We repeat the
batch `reps` times for a spread; the figure is the median batch. No CUDA graphs: NCCL ops
captured in a graph ran 4–17 % slower than the same ops launched eagerly on the H200s (every
size up to 64 MiB, where graphs were used, and no size above), while nccl-tests launches
eagerly. Python launches an op more slowly than a small NCCL op runs, so before each batch the
GPU is held by a short spin kernel while the host queues the whole batch, then released through
one untimed op that all ranks leave together: the batch then runs back to back on the GPU as
nccl-tests' C loop does, without our host in it (checked: the start event must not have fired
before the last op was queued, else the batch is run again with a longer hold).
The result is checked once afterwards, in a separate op, as `-c 1` does: inputs are small
integers held in floats, generated from the rank and the element index, so every rank can
compute the exact expected output.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings
from typing import Any

# The hold before a batch: shared with the layers timed alone (workloads/timing.py).
from gpuaudit.bench.timing import (
    HOLD_MAX_US,
    HOLD_TRIES,
    hold_us,
    spin_cycles_per_us,
)

MARKER = "GPUAUDIT_COLLECTIVES"
PERIOD = 4099  # the input pattern repeats with this (prime) period, so it is cheap to build
TILE_ELEMENTS = PERIOD * 4096  # ≈16.8 M elements: the pattern block filled/compared at a time
DTYPES = {"float32": 4, "bfloat16": 2}


def per_op_seconds(batch_ms: list[float], iters: int) -> list[float]:
    """Seconds per op of each batch of `iters` back-to-back ops (nccl-tests' time / iters)."""
    if iters < 1:
        raise ValueError("a batch needs at least one op")
    return [ms / 1e3 / iters for ms in batch_ms]


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(f"{MARKER} {json.dumps(event)}\n")
    sys.stdout.flush()


def buffer_elements(op: str, count: int, n: int) -> tuple[int, int]:
    """(input, output) elements per rank for `count` (nccl-tests' per-op count); an output of
    0 means the op works in place on the input."""
    return {
        "all_reduce": (count, 0),
        "broadcast": (count, 0),
        "all_gather": (count, count * n),
        "reduce_scatter": (count * n, count),
        "all_to_all": (count * n, count * n),
    }[op]


def bytes_needed(op: str, count: int, n: int, dtype_size: int) -> int:
    """Device memory one rank needs for `op`: its buffers plus the pattern tiles of the check."""
    inp, out = buffer_elements(op, count, n)
    tile = min(max(inp, out), TILE_ELEMENTS)
    return (inp + out + 2 * tile) * dtype_size + tile  # + the bool tile of the comparison


class Pattern:
    """Rank q's input is base_q[i % PERIOD], values 1..8 (never zero); sums over up to 32 ranks
    stay exact integers even in bfloat16, so a result can be compared with ==."""

    def __init__(self, torch: Any, dtype: Any, device: Any, n: int, seed: int) -> None:
        self.torch = torch
        j = torch.arange(PERIOD, dtype=torch.int64, device=device)
        self.bases = []
        for q in range(n):
            h = (j * 2654435761 + (q + 1) * 40503 * 65537 + seed * 97) % (1 << 32)
            self.bases.append(((h >> 16) % 8 + 1).to(dtype))
        self.total = torch.stack(self.bases).sum(0)  # the all-reduce result's base

    def _tile(self, base: Any, offset: int, length: int) -> Any:
        rolled = self.torch.roll(base, -(offset % PERIOD))
        return rolled.repeat(math.ceil(min(length, TILE_ELEMENTS) / PERIOD))

    def fill(self, buf: Any, base: Any, offset: int = 0) -> None:
        """buf[k] = base[(offset + k) % PERIOD]."""
        if buf.numel() == 0:
            return
        tile = self._tile(base, offset, buf.numel())
        for a in range(0, buf.numel(), tile.numel()):
            m = min(tile.numel(), buf.numel() - a)
            buf[a:a + m].copy_(tile[:m])

    def wrong(self, buf: Any, base: Any, offset: int = 0) -> Any:
        """How many elements of buf differ from the pattern (a tensor, to avoid host syncs)."""
        total = self.torch.zeros((), dtype=self.torch.int64, device=buf.device)
        if buf.numel() == 0:
            return total
        tile = self._tile(base, offset, buf.numel())
        for a in range(0, buf.numel(), tile.numel()):
            m = min(tile.numel(), buf.numel() - a)
            total += (buf[a:a + m] != tile[:m]).sum()
        return total


def collective(dist: Any, op: str, inp: Any, out: Any) -> None:
    # torch's all_reduce and broadcast only work in place (params["in_place"] says so); the
    # others are out of place, like nccl-tests' out-of-place column.
    if op == "all_reduce":
        dist.all_reduce(inp)
    elif op == "broadcast":
        dist.broadcast(inp, src=0)
    elif op == "all_gather":
        (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, inp)
    elif op == "reduce_scatter":
        (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(out, inp)
    elif op == "all_to_all":
        dist.all_to_all_single(out, inp)
    else:
        raise ValueError(f"unknown collective {op!r}")


def expected_wrong(pattern: Pattern, op: str, inp: Any, out: Any, rank: int, n: int,
                   count: int) -> Any:
    """Wrong elements of this rank's result, against the exactly known answer."""
    if op == "all_reduce":
        return pattern.wrong(inp, pattern.total)
    if op == "broadcast":
        return pattern.wrong(inp, pattern.bases[0])
    if op == "all_gather":
        return sum(pattern.wrong(out[q * count:(q + 1) * count], pattern.bases[q])
                   for q in range(n))
    if op == "reduce_scatter":
        return pattern.wrong(out, pattern.total, rank * count)
    # all_to_all: block q of rank r's output is block r of rank q's input
    return sum(pattern.wrong(out[q * count:(q + 1) * count], pattern.bases[q], rank * count)
               for q in range(n))


class Rank:
    def __init__(self, cfg: dict[str, Any]) -> None:
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.cfg = torch, dist, cfg
        self.rank = int(os.environ["RANK"])
        self.n = int(os.environ["WORLD_SIZE"])
        self.cuda = cfg["backend"] == "nccl"
        if self.cuda:
            # LOCAL_RANK: the rank on this host (ranks span hosts in a fleet run)
            local = int(os.environ.get("LOCAL_RANK", self.rank))
            self.device = torch.device("cuda", cfg["cuda_indices"][local])
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        self.dtype = getattr(torch, cfg["dtype"])
        try:  # device_id (torch ≥ 2.3) binds the GPU and sets NCCL up now, not at the first op
            kwargs: dict[str, Any] = {"device_id": self.device} if self.cuda else {}
            dist.init_process_group(cfg["backend"], rank=self.rank, world_size=self.n, **kwargs)
        except TypeError:
            dist.init_process_group(cfg["backend"], rank=self.rank, world_size=self.n)
        self.pattern = Pattern(torch, self.dtype, self.device, self.n, int(cfg.get("seed", 0)))

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def agree(self, ok: bool) -> bool:
        """True when every rank says ok: all must skip a size together or they would hang."""
        flag = self.torch.tensor([1 if ok else 0], dtype=self.torch.int32, device=self.device)
        self.dist.all_reduce(flag, op=self.dist.ReduceOp.MIN)
        return bool(flag.item())

    def free_bytes(self) -> int | None:
        return int(self.torch.cuda.mem_get_info(self.device)[0]) if self.cuda else None

    def item(self, index: int, op: str, count: int) -> dict[str, Any]:
        torch, n = self.torch, self.n
        dsize = DTYPES[self.cfg["dtype"]]
        need = bytes_needed(op, count, n, dsize)
        free = self.free_bytes()
        fits = free is None or need <= 0.9 * free
        bufs = self._alloc(op, count) if fits else None
        if not self.agree(bufs is not None):
            bufs = None
            if self.cuda:
                torch.cuda.empty_cache()
            return {"event": "skip", "i": index, "reason":
                    f"needs {need / 2**30:.1f} GiB of free memory on every GPU"}
        assert bufs is not None  # every rank has room (agreed above)
        result = self._measure(index, op, count, *bufs)
        bufs = None
        if self.cuda:
            torch.cuda.empty_cache()  # cached blocks would look taken to the next fit check
        return result

    def _measure(self, index: int, op: str, count: int, inp: Any, out: Any) -> dict[str, Any]:
        torch, dist, n = self.torch, self.dist, self.n
        self.pattern.fill(inp, self.pattern.bases[self.rank])

        def once() -> None:
            collective(dist, op, inp, out)

        warmup = int(self.cfg["warmup"])
        t0 = time.perf_counter()
        for _ in range(warmup):
            once()
        host_us = (time.perf_counter() - t0) * 1e6 / max(warmup, 1)
        self.sync()
        dist.barrier()
        self.sync()
        times, queued = self._timed(once, int(self.cfg["iters"]), int(self.cfg.get("reps", 5)),
                                    host_us)
        t = torch.tensor(times, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)  # nccl-tests reports the mean over ranks
        mean_times = (t / n).tolist()

        # The check: fresh inputs, one op, every element compared with the exact answer.
        self.pattern.fill(inp, self.pattern.bases[self.rank])
        if out is not inp:
            out.fill_(0)
        once()
        self.sync()
        if self.rank == self.cfg.get("corrupt_rank"):
            out.view(-1)[0] += 1  # a planted fault, for tests
        wrong = expected_wrong(self.pattern, op, inp, out, self.rank, n, count)
        wrong = wrong.reshape(1).to(torch.int64)
        dist.all_reduce(wrong)
        return {"event": "result", "i": index, "times_s": mean_times,
                "wrong": int(wrong.item()), "checked": out.numel() * n,
                "queued": queued, "iters": int(self.cfg["iters"])}

    def _alloc(self, op: str, count: int) -> tuple[Any, Any] | None:
        """(input, output) buffers, the output being the input for in-place ops; None when
        they do not fit."""
        inp_n, out_n = buffer_elements(op, count, self.n)
        try:
            inp = self.torch.empty(inp_n, dtype=self.dtype, device=self.device)
            out = self.torch.empty(out_n, dtype=self.dtype, device=self.device) if out_n else inp
        except (RuntimeError, MemoryError):  # torch.OutOfMemoryError is a RuntimeError
            return None
        return inp, out

    def _batch(self, once: Any, iters: int, hold: float) -> tuple[float, bool, float]:
        """One batch: hold the GPU, queue an untimed op and `iters` timed ones between two
        events. (milliseconds, whether the batch was all queued before the GPU reached it,
        the host's µs per op to queue it)."""
        torch = self.torch
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        torch.cuda._sleep(int(hold * spin_cycles_per_us(torch)))
        t0 = time.perf_counter()
        once()  # all ranks leave this op together: the timed ops start aligned
        start.record()
        for _ in range(iters):
            once()
        end.record()
        host_us = (time.perf_counter() - t0) * 1e6 / (iters + 1)
        queued = not start.query()
        end.synchronize()
        return start.elapsed_time(end), queued, host_us

    def _timed(self, once: Any, iters: int, reps: int, host_us: float
               ) -> tuple[list[float], int]:
        """Seconds per op of `reps` batches of `iters` ops, and how many batches were wholly
        queued before they ran (on gloo, ops return when complete: a host clock times them)."""
        if not self.cuda:
            out = []
            for _ in range(reps):
                t0 = time.perf_counter()
                for _ in range(iters):
                    once()
                out.append((time.perf_counter() - t0) * 1e3)
            return per_op_seconds(out, iters), reps
        batches, queued = [], 0
        # the warm-up's first op may have set something up: never hold longer than 50 ms
        hold = min(hold_us(host_us, iters + 1), HOLD_MAX_US)
        for _ in range(reps):
            for attempt in range(HOLD_TRIES):
                ms, ok, host_us = self._batch(once, iters, hold)
                # every rank must agree to run a batch again, or they would not pair up
                ok = self.agree(ok) if self.n > 1 else ok
                if ok or attempt == HOLD_TRIES - 1:
                    break
                hold *= 4
            batches.append(ms)
            queued += ok
            if ok:  # the next batch holds for what this one took to queue
                hold = hold_us(host_us, iters + 1)
        return per_op_seconds(batches, iters), queued


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore")  # keeps stderr's last line for a real error
    cfg = json.loads((argv or sys.argv)[1])
    rank = Rank(cfg)
    for index, (op, count) in enumerate(cfg["items"]):
        if rank.rank == cfg.get("hang_rank") and index == int(cfg.get("hang_at", 0)):
            while True:  # a planted hang, for tests: the parent must time out and kill us
                time.sleep(3600)
        if rank.rank == cfg.get("crash_rank") and index == int(cfg.get("hang_at", 0)):
            raise RuntimeError("planted crash")  # for tests: the parent must report it
        if rank.rank == 0:
            emit({"event": "start", "i": index})
        result = rank.item(index, op, int(count))
        if rank.rank == 0:
            emit(result)
    rank.dist.barrier()
    rank.dist.destroy_process_group()
    if rank.rank == 0:
        emit({"event": "done"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
