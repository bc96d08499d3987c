#!/usr/bin/env python3
"""The monitor's own cost: CPU time per tick for 8 GPUs, from a replayed trace (the budget:
at most 1 % of one core at a 1 s interval).

    python3 validation/monitor/cost.py [--ticks 600] [--gpus 8]

The trace is the real 2-GPU H200 recording, busy (GPM readings, a process per GPU), widened to
8 GPUs. Replay answers from memory, so this measures our side of each tick (decoding, records,
rules, idle policy, history) and not NVML's own time in the driver; that part needs the GPU
machine. Prints CPU ms per tick and % of one core at 1 s for: the sampler alone, the sampler
with rules and idle policy, and all of that with history in SQLite.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # for tests.telemetry_traces

from tests import telemetry_traces as tt

from gpuaudit.hw.telemetry import Sampler
from gpuaudit.hw.telemetry_trace import TraceReplay
from gpuaudit.store import Store
from gpuaudit.telemetry.idle import IdlePolicy
from gpuaudit.telemetry.monitor import Monitor, replay_times
from gpuaudit.telemetry.rules import Evaluator, load_shipped_rules


def busy_trace(ticks: int, gpus: int) -> dict:
    trace = tt.idle_trace("h200-2gpu", ticks)
    for frame in trace["frames"]:
        tt.busy(frame["calls"], 0)
        tt.busy(frame["calls"], 1, pid=4243)
    return tt.widen(trace, gpus)


def cpu_per_tick(trace: dict, *, rules: bool, idle: bool, history: Store | None) -> float:
    src = TraceReplay(trace)
    mon = Monitor(Sampler(src, hostname="bench", interval_s=1.0),
                  evaluator=Evaluator(load_shipped_rules()) if rules else None,
                  idle=IdlePolicy() if idle else None, history=history)
    n = 0
    start = time.process_time()
    for now in replay_times(src, threading.Event()):
        mon.tick(now)
        n += 1
    return (time.process_time() - start) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=600)
    ap.add_argument("--gpus", type=int, default=8)
    args = ap.parse_args()
    trace = busy_trace(args.ticks, args.gpus)
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"{args.gpus} GPUs, {args.ticks} ticks")
    with tempfile.TemporaryDirectory() as tmp, Store(f"sqlite:///{tmp}/m.db") as store:
        for name, kw in (("sampler", dict(rules=False, idle=False, history=None)),
                         ("+ rules", dict(rules=True, idle=False, history=None)),
                         ("+ rules + idle policy", dict(rules=True, idle=True, history=None)),
                         ("+ history (SQLite)", dict(rules=True, idle=True, history=store))):
            ms = cpu_per_tick(trace, **kw) * 1000
            print(f"{name:24s} {ms:7.2f} ms CPU per tick = {ms / 10:5.2f} % of one core at 1 s")


if __name__ == "__main__":
    main()
