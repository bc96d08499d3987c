"""Why does the fp32 recording's process read the bf16 step's host work higher than the bf16
recording's own process? An fp32 → bf16 prediction takes the bf16 ÷ fp32 ratio of the steps
issued with the device held (`workloads.hosttime.held_host`) in the fp32 process; on an H100
three host-bound bf16 steps ran at the bf16 process's figure, 8–17 % under the fp32
process's (docs/predict.md, "On an H100").

Each condition runs in a process of its own, per family:

- `fp32`, `bf16`: a Trainer in that precision warmed and timed at its batch as `bench train`
  times it, then the held rounds of every precision;
- `fp32-emptied`: as `fp32`, the caching allocator emptied before the held rounds (its
  blocks were cut for fp32's activations);
- `fp32-second-model`: as `fp32`, then a second model built in bf16 in the same process and
  its held rounds (the first model's state set apart from the process's).

Each gives the held rounds' bf16 ÷ fp32 and tf32 ÷ bf16 ratios (the median of the rounds'
ratios, as `predict` reads them) and each precision's step in a loop at the batch, in rounds,
the way the fresh process that measures a target times it: where the conditions' ratios
part, the one whose ratio the loop's pace (host-bound steps) follows names the cause. The
tf32 ÷ bf16 pair is the LSTM's: its held rounds read tf32 at 1.06–1.10× bf16 where its
steps ran at 0.92–0.97× (docs/predict.md, "On an H100").

    PYTHONPATH=src:examples/predict python3 validation/predict/autocast_probe.py OUT.json \
        [zoo.recsys:build zoo.convnext:build] [--rounds 16] [--timeout-s 150] [--batch-size N]
        [--conditions fp32,bf16,...]
    python3 validation/predict/autocast_probe.py --table KEPT.json    # a kept result's table

OUT.json is written after every condition (Ctrl-C keeps what ran). On a CPU nothing is held
and the ratios are empty: a dry run of the plumbing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

CONDITIONS = ("fp32", "bf16", "fp32-emptied", "fp32-second-model")
ENTRIES = ("zoo.recsys:build", "zoo.convnext:build")
LOOP_ROUNDS, LOOP_STEPS = 8, 6
LOOPED = ("bf16", "fp32", "tf32")  # each round starts one later: each leads as often
ROOT = Path(__file__).resolve().parents[2]


def ratio(held: dict[str, list[float]], of: str = "bf16", over: str = "fp32") -> float | None:
    """The median of the rounds' `of` ÷ `over` times, as `predict` reads them; None where
    either is missing."""
    from gpuaudit.predict.grouped import paired_ratio

    got = paired_ratio(tuple(held.get(over, ())), tuple(held.get(of, ())))
    return got[0] if got is not None else None


def worker(entry: str, condition: str, rounds: int, batch: int | None = None
           ) -> dict[str, Any]:
    """One condition in this process (see the module docstring), at the family's batch
    unless `batch` says another."""
    import torch

    from gpuaudit.workloads.hosttime import eager_step, held_host
    from gpuaudit.workloads.precision import TrainMode, float32_matmuls
    from gpuaudit.workloads.timing import step_times_s
    from gpuaudit.workloads.trainer import Trainer

    torch.backends.cudnn.benchmark = True  # as bench train runs
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    own = condition.split("-")[0]
    with float32_matmuls(torch, tf32=False):
        t = Trainer(entry, TrainMode(own), dev, batch_size=batch)
        t.warm_up(3, 0.5)
        own_ms = [s * 1e3 for s in step_times_s(torch, dev, t.step, 30)]  # the timing pass
    if condition == "fp32-emptied" and dev.type == "cuda":
        torch.cuda.empty_cache()
    timed = t
    if condition == "fp32-second-model":
        timed = Trainer(entry, TrainMode("bf16"), dev, batch_size=batch)
        timed.warm_up(3, 0.5)
    notes: list[str] = []
    held = held_host(timed, notes, 3 * statistics.median(own_ms), rounds)
    loop: dict[str, list[float]] = {p: [] for p in LOOPED}
    steps = {p: eager_step(timed, p) for p in loop}
    for i in range(LOOP_ROUNDS):
        for p in LOOPED[i % 3:] + LOOPED[:i % 3]:
            with float32_matmuls(torch, tf32=p != "fp32"):
                ms = [s * 1e3 for s in step_times_s(torch, dev, steps[p], LOOP_STEPS)]
            loop[p].append(round(statistics.median(ms), 4))
    held_lists = {p: list(v) for p, v in held.items()}
    return {"entry": entry, "condition": condition, "device": str(dev),
            "batch": timed.workload.batch_size, "held_ms": held_lists,
            "held_ratio": ratio(held_lists), "held_tf32_ratio": ratio(held_lists, "tf32", "bf16"),
            "loop_ms": loop, "loop_ratio": ratio(loop),
            "loop_tf32_ratio": ratio(loop, "tf32", "bf16"), "notes": notes}


def run(out: Path, entries: list[str], rounds: int, timeout_s: float,
        batch: int | None = None, conditions: tuple[str, ...] = CONDITIONS) -> int:
    rows: list[dict[str, Any]] = []
    paths = [str(ROOT), str(ROOT / "src"), str(ROOT / "examples" / "predict"),
             *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    try:
        for entry in entries:
            for cond in conditions:
                print(f"{entry} {cond}", flush=True)
                try:
                    # as a module from the root: run as a file, its folder's zoo.py
                    # would shadow the zoo's package
                    done = subprocess.run(
                        [sys.executable, "-m", "validation.predict.autocast_probe", "--worker",
                         entry, cond, str(rounds), str(batch or 0)],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
                    row = (json.loads(done.stdout.splitlines()[-1]) if done.returncode == 0
                           else {"entry": entry, "condition": cond,
                                 "error": (done.stderr.strip().splitlines() or ["?"])[-1]})
                except subprocess.TimeoutExpired:
                    row = {"entry": entry, "condition": cond,
                           "error": f"timed out after {timeout_s:.0f} s"}
                rows.append(row)
                out.write_text(json.dumps(rows, indent=1))
    except KeyboardInterrupt:
        print(f"interrupted: {len(rows)} kept in {out}", file=sys.stderr)
    print(summary(rows))
    return 0


def summary(rows: list[dict[str, Any]]) -> str:
    """A table: per family and condition, the held and the loop's bf16 ÷ fp32 and tf32 ÷
    bf16 ratios (a row kept before the loop timed tf32 reads its held one alone)."""
    def fmt(x: float | None) -> str:
        return f"{x:.3f}" if x is not None else "—"

    out = ["| family | condition | held bf16 ÷ fp32 | loop bf16 ÷ fp32 | held tf32 ÷ bf16 | "
           "loop tf32 ÷ bf16 | note |", "|" + " --- |" * 7]
    for r in rows:
        held, loop = r.get("held_ms", {}), r.get("loop_ms", {})
        out.append(f"| {r['entry']} | {r['condition']} | {fmt(r.get('held_ratio'))} | "
                   f"{fmt(r.get('loop_ratio'))} | {fmt(ratio(held, 'tf32', 'bf16'))} | "
                   f"{fmt(ratio(loop, 'tf32', 'bf16'))} | {r.get('error', '')} |")
    return "\n".join(out)


def main() -> int:
    if sys.argv[1:2] == ["--worker"]:
        entry, cond, rounds, batch = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        print(json.dumps(worker(entry, cond, rounds, batch or None)))
        return 0
    if sys.argv[1:2] == ["--table"]:  # a kept result: {"about": ..., "rows": [...]}
        doc = json.loads(Path(sys.argv[2]).read_text())
        print(f"{doc['about']}:\n\n{summary(doc['rows'])}\n")
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("entries", nargs="*", default=list(ENTRIES))
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--timeout-s", type=float, default=150.0)
    ap.add_argument("--batch-size", type=int, help="another batch than the family's (a CPU "
                    "dry run)")
    ap.add_argument("--conditions", default=",".join(CONDITIONS),
                    help=f"which of {', '.join(CONDITIONS)} to run, in order")
    a = ap.parse_args()
    conditions = tuple(c for c in a.conditions.split(",") if c)
    if not conditions or set(conditions) - set(CONDITIONS):
        ap.error(f"--conditions: each of {', '.join(CONDITIONS)}")
    return run(a.out, a.entries, a.rounds, a.timeout_s, a.batch_size, conditions)


if __name__ == "__main__":
    sys.exit(main())
