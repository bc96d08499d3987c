"""A model's training step at several batch sizes in a plain loop, beside its kernels' time:
how much of each millisecond its kernels gain with the batch its step gains. A step whose
host runs ahead of its device follows its kernels (about 1 ms a ms); one whose device waits
on its host does not (about 0). `predict` replays the profiled step to tell the two apart;
this measures it without the profiler (the MoE's batch ×2 check in docs/predict.md).

Each batch's step (its entry point, bf16 autocast or fp32/tf32, fused AdamW, cudnn.benchmark
on) runs `WARM_UP` steps, then the batches take turns for `ROUNDS` rounds of `ROUND_STEPS`
steps each (order reversed every other round), timed on the host with the device
synchronized at each round's ends; each round's mean step is kept. Then each batch runs 2
steps under torch.profiler: its kernels' time is their summed device time ÷ 2.

    python3 validation/predict/batch_steps.py record OUT.json zoo.moe:build bf16 1,8,16,32
    python3 validation/predict/batch_steps.py summarize OUT.json   (one record, or {"runs": [...]})
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WARM_UP, ROUNDS, ROUND_STEPS, PROFILED = 5, 10, 6, 2
SETTLED = 5  # the last rounds, past the first steps' one-off costs (new shapes, allocations)


def record(entry: str, precision: str, batches: list[int]) -> dict[str, Any]:
    import torch

    from gpuaudit.workloads.precision import float32_matmuls
    from validation.predict.train_step import train_step

    step, _ = train_step(entry, precision, batches)
    with float32_matmuls(torch, tf32=precision != "fp32"):
        rounds, kernels = _measure(step, batches)
    return {"entry": entry, "precision": precision, "gpu": torch.cuda.get_device_name(0),
            "torch": torch.__version__,
            "batches": [{"batch": b, "rounds_ms": rounds[b], "kernels_ms": kernels[b]}
                        for b in batches]}


def _measure(step: Any, batches: list[int]) -> tuple[dict[int, list[float]], dict[int, float]]:
    """Each batch's rounds (mean ms a step) and its kernels' ms a step."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for b in batches:
        for _ in range(WARM_UP):
            step(b)
    rounds: dict[int, list[float]] = {b: [] for b in batches}
    for r in range(ROUNDS):
        for b in batches if r % 2 == 0 else batches[::-1]:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(ROUND_STEPS):
                step(b)
            torch.cuda.synchronize()
            rounds[b].append((time.perf_counter() - t0) / ROUND_STEPS * 1e3)
        print(f"batch_steps: round {r + 1} of {ROUNDS}", file=sys.stderr, flush=True)
    kernels = {}
    for b in batches:
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(PROFILED):
                step(b)
            torch.cuda.synchronize()
        kernels[b] = sum(e.device_time for e in prof.events()
                         if e.device_type == torch.autograd.DeviceType.CUDA) / PROFILED / 1e3
    return rounds, kernels


def settled_ms(row: dict[str, Any]) -> float:
    """The batch's step: the median of its last `SETTLED` rounds."""
    return statistics.median(row["rounds_ms"][-SETTLED:])


def follows(doc: dict[str, Any]) -> list[tuple[int, int, float]]:
    """(batch, next batch, ms the step gained per ms its kernels gained) for each pair of
    consecutive batches, and for the first against the last."""
    rows = doc["batches"]
    pairs = list(itertools.pairwise(rows)) + ([(rows[0], rows[-1])] if len(rows) > 2 else [])
    out = []
    for a, b in pairs:
        dk = b["kernels_ms"] - a["kernels_ms"]
        if dk > 0:
            out.append((a["batch"], b["batch"], (settled_ms(b) - settled_ms(a)) / dk))
    return out


def summarize(doc: dict[str, Any]) -> str:
    lines = [f"{doc['entry']} {doc['precision']} on {doc['gpu']}, torch {doc['torch']}",
             "| batch | step, ms (last rounds' median) | kernels, ms |", "| --- | --- | --- |"]
    lines += [f"| {r['batch']} | {settled_ms(r):.1f} | {r['kernels_ms']:.1f} |"
              for r in doc["batches"]]
    lines += [f"batch {a} → {b}: the step gained {s:.2f} ms per ms of kernels"
              for a, b, s in follows(doc)]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    usage = ("usage: batch_steps.py record OUT.json MODULE:build PRECISION B1,B2,…\n"
             "       batch_steps.py summarize OUT.json")
    if len(argv) == 5 and argv[0] == "record":
        try:
            batches = sorted({int(b) for b in argv[4].split(",")})
        except ValueError:
            batches = []
        if not batches or batches[0] < 1:
            print(f"batch_steps: batches are whole numbers ≥ 1, not {argv[4]!r}",
                  file=sys.stderr)
            return 2
        sys.path[:0] = [str(ROOT), str(ROOT / "src"), str(ROOT / "examples" / "predict")]
        doc = record(argv[2], argv[3], batches)
        Path(argv[1]).write_text(json.dumps(doc, indent=1))
        print(summarize(doc))
        return 0
    if len(argv) == 2 and argv[0] == "summarize":
        try:
            doc = json.loads(Path(argv[1]).read_text())
        except (OSError, ValueError) as exc:
            print(f"batch_steps: cannot read {argv[1]}: {exc}", file=sys.stderr)
            return 2
        print("\n\n".join(summarize(d) for d in doc.get("runs", [doc])))
        return 0
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
