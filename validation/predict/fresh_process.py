"""Does the zoo's way of timing targets cost a host-bound source anything, and how does a fresh
process's pace move after it builds them? The figures `rounds.py` cites for its settling time
(tests/fixtures/predict/zoo/fresh-process-h200.json).

Per family, in a fresh process with its 8 targets built and warmed up as the recorder builds
them (`zoo.case_list`): the bf16 and fp32 sources alone, 8 × 6 steps each; the targets in 8
rounds as the recorder times them (6 steps of each in turn); the same with 3 untimed steps
before each turn's 6; the sources alone again. Each 6 steps' median is kept, in the order run,
and per position in a turn the median over the rounds.

    PYTHONPATH=src:examples/predict python3 validation/predict/fresh_process.py OUT.json \
        [recsys,gru,lstm,convnext,mlp]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ROUNDS, STEPS, WARM = 8, 6, 3


def family(name: str) -> dict[str, Any]:
    """One family's phases, in this process."""
    import importlib

    import torch

    sys.path[:0] = [str(ROOT / "src"), str(ROOT / "examples" / "predict"), str(ROOT)]
    from gpuaudit.workloads.precision import TrainMode, float32_matmuls
    from gpuaudit.workloads.timing import step_times_s
    from gpuaudit.workloads.trainer import Trainer
    from validation.predict.zoo import case_list, families, slug

    torch.backends.cudnn.benchmark = True  # as bench train runs
    fam = {slug(f["entry"]): f for _, f in families()}[name]
    mod, fn = fam["entry"].split(":")
    batch = int(getattr(importlib.import_module(mod), fn)().get("batch_size", 32))
    dev = torch.device("cuda")
    trainers = {}
    for label, model, precision, b in case_list(fam, batch, False):
        with float32_matmuls(torch, tf32=precision != "fp32"):
            t = Trainer(model, TrainMode(precision), dev, batch_size=b)
            t.warm_up(3, 0.5)
        trainers[label] = (t, precision)

    def turn(label: str, warm: int = 0) -> list[float]:
        t, precision = trainers[label]
        with float32_matmuls(torch, tf32=precision != "fp32"):
            if warm:
                step_times_s(torch, dev, t.step, warm)
            return [s * 1e3 for s in step_times_s(torch, dev, t.step, STEPS)]

    def rounds(warm: int) -> dict[str, list[list[float]]]:
        order, got = list(trainers), {label: [] for label in trainers}
        for r in range(ROUNDS):
            for label in order[r % len(order):] + order[:r % len(order)]:
                got[label].append(turn(label, warm))
        return got

    def medians(chunks: list[list[float]]) -> list[float]:
        return [round(statistics.median(c), 3) for c in chunks]

    alone = {src: [turn(src) for _ in range(ROUNDS)] for src in ("bf16", "fp32")}
    plain, warmed = rounds(0), rounds(WARM)
    again = {src: [turn(src) for _ in range(ROUNDS)] for src in ("bf16", "fp32")}
    return {"batch": batch, **{src: {
        "alone": medians(alone[src]), "rounds": medians(plain[src]),
        "rounds_warm": medians(warmed[src]), "alone_again": medians(again[src]),
        "by_position": [round(statistics.median(c[i] for c in plain[src]), 3)
                        for i in range(STEPS)]} for src in ("bf16", "fp32")}}


def main(out: str, names: str = "recsys,gru,lstm,convnext,mlp") -> int:
    found: dict[str, Any] = {}
    for name in names.split(","):  # each in a fresh process, as the recorder's targets are
        p = subprocess.run([sys.executable, __file__, "--family", name], capture_output=True,
                           text=True)
        lines = p.stdout.strip().splitlines()
        found[name] = json.loads(lines[-1]) if p.returncode == 0 and lines else \
            {"error": p.stderr[-500:]}
        print(name, "done" if "error" not in found[name] else "failed", flush=True)
    Path(out).write_text(json.dumps({"families": found}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--family"]:
        print(json.dumps(family(sys.argv[2])))
        sys.exit(0)
    sys.exit(main(*sys.argv[1:3]))
