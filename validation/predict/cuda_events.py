"""Timing a call on the GPU with CUDA events, for the sweeps and probes here, and the probes'
command line."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def mean_ms(fn: Callable[[], Any], calls: int, warm_up: int = 3) -> float:
    """`fn`'s mean time over `calls` calls queued back to back, after `warm_up` untimed."""
    import torch

    for _ in range(warm_up):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls


def median_ms(fn: Callable[[], Any], calls: int, warm_up: int = 3) -> float:
    """`fn`'s median time over `calls` calls, each timed alone (synchronized between)."""
    import torch

    for _ in range(warm_up):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(calls):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def probe_main(argv: list[str], usage: str, measure: Callable[[], dict[str, Any]]) -> int:
    """`PROBE OUT.json`: what `measure` returns, written to OUT.json; else `usage` and 2."""
    if len(argv) != 1:
        print(usage, file=sys.stderr)
        return 2
    Path(argv[0]).write_text(json.dumps(measure(), indent=1))
    return 0
