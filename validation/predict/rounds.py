"""A family's targets timed in rounds, and judged at the pace their source was profiled at.

The lent H200 is a KVM guest whose vCPUs change pace by tens of percent within a minute: a
pure-Python loop's rate per quarter second ranged 2,800–4,150 a second on one vCPU, and a
host-bound ConvNeXt step took 13–32 ms within one run of 400 steps (the diagnostic of
docs/predict.md's evidence section). A host-bound target timed alone measures its moment's
host, not the one its source was profiled with. So every target is built and warmed up in
one fresh process and timed in rounds: `ROUNDS` rounds of `ROUND_STEPS` steps of each target
in turn (the order turned by one each round), the recorded precisions among them. A
prediction from a source is then judged against its target's steps in the rounds where the
source itself ran within `PACE_TOLERANCE` of its profiled step: there the host ran at the
pace the prediction starts from. A GPU-bound source matches in every round.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

ROUNDS = 8
ROUND_STEPS = 6
PACE_TOLERANCE = 0.05  # a round's source step within ±5 % of its profiled step
MIN_MATCHED = 2  # rounds at the profiled pace for a pace-matched measurement


def time_in_rounds(configs: list[tuple[str, str, str, int]], device: Any, tiny: bool,
                   log: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """(label, model, precision, batch) each built, warmed up and timed in rounds: per label
    its steps, each round's median step and the median of them all (ms), or its error."""
    import torch

    from gpuaudit.bench.stats import reason_of
    from gpuaudit.workloads.precision import TrainMode, float32_matmuls
    from gpuaudit.workloads.timing import step_times_s
    from gpuaudit.workloads.trainer import Trainer

    trainers: dict[str, tuple[Any, str]] = {}
    out: dict[str, dict[str, Any]] = {}
    for label, model, precision, batch in configs:
        out[label] = {"model": model, "precision": precision, "batch": batch}
        log(f"  build {label}: {model} {precision} batch {batch}")
        try:
            with float32_matmuls(torch, tf32=precision != "fp32"):
                t = Trainer(model, TrainMode(precision), device, batch_size=batch)
                t.warm_up(1 if tiny else 3, 0.0 if tiny else 0.5)
            trainers[label] = (t, precision)
        except Exception as exc:  # one target that cannot run leaves the others timed
            out[label]["error"] = reason_of(exc)[:300]
    rounds = 1 if tiny else ROUNDS
    steps = 2 if tiny else ROUND_STEPS
    times: dict[str, list[list[float]]] = {label: [] for label in trainers}
    order = list(trainers)
    for r in range(rounds if order else 0):
        for label in order[r % len(order):] + order[:r % len(order)]:
            t, precision = trainers[label]
            with float32_matmuls(torch, tf32=precision != "fp32"):
                times[label].append([s * 1e3 for s in step_times_s(torch, device, t.step,
                                                                   steps)])
        log(f"  round {r + 1}/{rounds} timed")
    for label, per_round in times.items():
        flat = [s for chunk in per_round for s in chunk]
        step = statistics.median(flat)
        out[label].update(step_ms=round(step, 4),
                          samples_per_s=round(out[label]["batch"] / (step / 1e3), 4),
                          steps_ms=[round(s, 4) for s in flat],
                          rounds_ms=[round(statistics.median(c), 4) for c in per_round])
    return out


def pace_matched(source_rounds_ms: list[float], target_rounds_ms: list[float],
                 profiled_ms: float) -> tuple[float | None, int]:
    """(the target's median step over the rounds where the source's step was within
    `PACE_TOLERANCE` of `profiled_ms`, or None where fewer than `MIN_MATCHED` were; how many
    rounds matched)."""
    matched = [t for s, t in zip(source_rounds_ms, target_rounds_ms, strict=True)
               if abs(s / profiled_ms - 1) <= PACE_TOLERANCE]
    if len(matched) < MIN_MATCHED:
        return None, len(matched)
    return statistics.median(matched), len(matched)
