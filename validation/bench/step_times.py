#!/usr/bin/env python3
"""Where a long gpuaudit command spends its time: run it as users do and write, as it goes,
the wall time at which each progress step began (one line each, flushed: the fast exit after
`run` keeps them); then, with --report, the time from each step to the next, summed by phase.

    python3 validation/bench/step_times.py STEPS.txt run --db sqlite:///runs.db
    python3 validation/bench/step_times.py --report STEPS.txt START_EPOCH END_EPOCH

START and END are the shell's clock around the command (process start to exit): the first
line of the report is Python's start and the imports before the first step, the last is
saving, printing and exiting after the last step.
"""

from __future__ import annotations

import itertools
import sys
import time


def record(path: str, argv: list[str]) -> None:
    out = open(path, "a", buffering=1)  # noqa: SIM115 - open until the process ends
    import gpuaudit.cli.machine as machine

    step = machine._Bar.step

    def logged(self: object, text: str) -> None:
        out.write(f"{time.time():.3f} {text}\n")
        step(self, text)  # type: ignore[arg-type]

    machine._Bar.step = logged  # type: ignore[method-assign]
    sys.argv = ["gpuaudit", *argv]
    from gpuaudit.cli.entry import main

    main()


def phase(text: str) -> str:
    """'matmul bf16: shape search' → 'matmul bf16'; 'looking for other work …' → 'looks'."""
    if text.startswith("looking for other work"):
        return "contention looks"
    if text.startswith("collectives"):
        return "collectives"
    if text.startswith(("matmul", "train", "infer", "host")):
        return " ".join(text.split(":")[0].split()[:2])
    return text.split(":")[0]


def report(path: str, start: float, end: float) -> None:
    steps = []
    with open(path) as f:
        for line in f:
            stamp, _, text = line.rstrip("\n").partition(" ")
            steps.append((float(stamp), text))
    totals: dict[str, float] = {"process start, imports": (steps[0][0] if steps else end)
                                - start}
    for (t, text), (t_next, _) in itertools.pairwise(steps):
        totals[phase(text)] = totals.get(phase(text), 0.0) + (t_next - t)
    if steps:
        totals[f"{phase(steps[-1][1])}, then findings, save, print, exit"] = end - steps[-1][0]
    print(f"wall {end - start:.1f} s from process start; by phase (s):")
    for key, seconds in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"  {seconds:6.2f}  {key}")


if __name__ == "__main__":
    if sys.argv[1] == "--report":
        report(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
    else:
        record(sys.argv[1], sys.argv[2:])
