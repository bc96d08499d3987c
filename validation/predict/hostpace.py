"""How steady is the host's pace on this machine, pinned to one CPU or not? A pure-Python
loop's rate per quarter second (15 s free, 15 s pinned to one CPU of the first NUMA node),
then three host-bound zoo steps (ConvNeXt, the LSTM, the diffusion U-Net in bf16), each
timed in three fresh processes (free, pinned with taskset, free): their median, quartiles
and extremes.

    PYTHONPATH=src:examples/predict python3 -m validation.predict.hostpace all [OUTDIR]
    PYTHONPATH=src:examples/predict python3 -m validation.predict.hostpace model \
        ENTRY PRECISION BATCH STEPS
    python3 -m validation.predict.hostpace turns FILE   # `model` runs taken by turns

(as a module from the repository's root: run as a script, this folder's `zoo.py` would stand
before the zoo's package `zoo`).

The figures of docs/predict.md's model-zoo evidence ("the lent machine's host changes its
pace within a minute") come from it, on a GPU; its JSON goes to OUTDIR/hostpace.json
(/tmp by default).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STEPS = (("zoo.convnext:build", "bf16", 128, 400), ("zoo.lstm:build", "bf16", 128, 300),
         ("zoo.diffusion:build", "bf16", 64, 200))


def cpu_pace(seconds: float) -> list[float]:
    """A fixed piece of pure-Python work's rate (a second) in each quarter second."""
    out = []
    end = time.time() + seconds
    while time.time() < end:
        t, n = time.perf_counter(), 0
        while time.perf_counter() - t < 0.25:
            sum(range(20000))
            n += 1
        out.append(n / (time.perf_counter() - t))
    return out


def model_steps(entry: str, precision: str, batch: int, steps: int) -> dict[str, Any]:
    """One zoo step timed back to back, as bench train times it."""
    import torch

    from gpuaudit.workloads.precision import TrainMode
    from gpuaudit.workloads.train import measure_mode

    torch.backends.cudnn.benchmark = True
    r = measure_mode(entry, TrainMode(precision), torch.device("cuda"), batch_size=batch,
                     steps=steps, warmup_steps=3, min_warmup_s=0.5, count=False)
    if isinstance(r, str):
        return {"error": r}
    return {"steps_ms": [round(x * 1e3, 3) for x in r.step_times_s],
            "cpus": len(os.sched_getaffinity(0))}


def summary(v: list[float]) -> str:
    q = statistics.quantiles(v, n=4)
    return (f"median {statistics.median(v):.2f} quartiles {q[0]:.2f}–{q[2]:.2f} "
            f"range {min(v):.2f}–{max(v):.2f}")


def turns(runs: list[dict[str, Any]], skip: int = 10) -> dict[str, dict[str, Any]]:
    """`model` runs of several steps taken by turns, each in a fresh process: per entry, each
    process's median step past its first `skip` and how far those medians spread (half their
    range ÷ their median, as a percentage)."""
    medians: dict[str, list[float]] = {}
    for r in runs:
        medians.setdefault(r["entry"], []).append(statistics.median(r["steps_ms"][skip:]))
    return {e: {"medians_ms": m, "spread_pct": 50 * (max(m) - min(m)) / statistics.median(m)}
            for e, m in medians.items()}


def main() -> int:
    if sys.argv[1:2] == ["turns"]:
        with open(sys.argv[2]) as f:
            print(json.dumps(turns(json.load(f)["runs"]), indent=1))
        return 0
    if sys.argv[1:2] == ["model"]:
        entry, precision, batch, steps = sys.argv[2:6]
        print(json.dumps(model_steps(entry, precision, int(batch), int(steps))))
        return 0
    from gpuaudit.hw.cpus import numa_cpus

    allowed = sorted(os.sched_getaffinity(0))
    first = next(iter(numa_cpus().values()), allowed)  # the lent machine has one node
    core = first[min(2, len(first) - 1)]
    res: dict[str, Any] = {"numa_node_cpus": first, "pinned_cpu": core}
    res["cpu_free"] = cpu_pace(15)
    os.sched_setaffinity(0, {core})
    res["cpu_pinned"] = cpu_pace(15)
    os.sched_setaffinity(0, set(allowed))
    for k in ("cpu_free", "cpu_pinned"):
        print(k, "loops/s", summary(res[k]), flush=True)
    res["runs"] = []
    for entry, precision, batch, steps in STEPS:
        for pin in ("", f"taskset -c {core} ", ""):
            p = subprocess.run(f"{pin}{sys.executable} -m validation.predict.hostpace model "
                               f"{entry} {precision} {batch} {steps}", shell=True,
                               capture_output=True, text=True, cwd=ROOT)
            lines = p.stdout.strip().splitlines()
            r = json.loads(lines[-1]) if lines else {"error": p.stderr[-800:]}
            r.update(entry=entry, pinned=bool(pin))
            res["runs"].append(r)
            what = summary(r["steps_ms"]) + " ms" if "steps_ms" in r else r["error"]
            print(entry, "pinned" if pin else "free", what, flush=True)
    with open(os.path.join(sys.argv[2] if len(sys.argv) > 2 else "/tmp", "hostpace.json"),
              "w") as f:
        json.dump(res, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
