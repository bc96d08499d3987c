"""A family's targets timed in rounds, judged at the pace their source was profiled at, and
the timing controls that show how far that pace moved.

The lent H200 is a KVM guest whose vCPUs change pace by tens of percent within a minute: a
pure-Python loop's rate per quarter second ranged 2,800–4,150 a second on one vCPU, and a
host-bound ConvNeXt step took 13–32 ms within one run of 400 steps (`hostpace.py`). A
host-bound target timed alone measures its moment's host, not the one its source was
profiled with. So every target is built and warmed up in one fresh process and timed in
rounds: `ROUND_STEPS` steps of each target in turn (the order turned by one each round), the
recorded precisions among them, for at least `ROUNDS` rounds and more (up to `MAX_ROUNDS`)
while they have taken less than `ROUNDS_S`: a family whose steps are short gets more rounds
for its source to meet its profiled pace in. A prediction is then judged against its
target's steps in the rounds where its source ran within `PACE_TOLERANCE` of its profiled
step, the pace the prediction starts from. The host's pace moves faster than a round,
though: a host-bound source's round medians follow its targets' only loosely
(`round_pace.py`), so those rounds leave out the source's far-off ones more than they pick
the host's pace. A source the GPU binds matches in every round and controls nothing: a
host-bound target of it (fp32 → bf16 of a step that autocast makes host-bound) is measured
at whatever pace its rounds had. The source's step at batch 1 (the host's own time) was
tried as a second control: six steps of it moved too much a round to match in more than one
or two of eight, even for steps the GPU binds.

A fresh process can run host-bound steps slower for its first seconds after building its
targets: on one loan a ConvNeXt bf16 step took 15–20 ms in the first 2 s after the build and
12–15 ms after, a GRU bf16 step 16 ms for its first 10 s and 12.3 ms after, while the
GPU-bound fp32 steps held within 2 % (`fresh_process.py`; on the next loan the DLRM's
step sped up so, 6.5 to 4.7 ms, and ConvNeXt's slowed, 18 to 26 ms: the host's pace moves
both ways). So the rounds are first run untimed for `SETTLE_S` (their medians kept as
`settle_ms`, to show the drift).

The fresh process holds every target of a family at once, so on CUDA it also keeps the
caching allocator's counters after each timed round (`ALLOCATOR`): a process that runs out of
cached blocks frees them all and retries, synchronizing, and its host-bound steps slow with
no change of the host's own pace.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

ROUNDS = 8  # at least; more while the timed rounds have taken less than ROUNDS_S
ROUNDS_S = 30.0
MAX_ROUNDS = 48
ROUND_STEPS = 6
PACE_TOLERANCE = 0.05  # a round's source step within ±5 % of its profiled step
MIN_MATCHED = 2  # rounds at the profiled pace for a pace-matched measurement
SETTLE_S = 15.0  # untimed rounds after the build, before the timed ones


def time_in_rounds(configs: list[tuple[str, str, str, int]], device: Any, tiny: bool,
                   log: Callable[[str], None],
                   save: Callable[[dict[str, dict[str, Any]]], None] = lambda _: None,
                   settle_s: float | None = None) -> dict[str, dict[str, Any]]:
    """(label, model, precision, batch) each built, warmed up, run untimed in rounds for
    `settle_s` (`SETTLE_S`; none for a tiny run) and timed in rounds: per label its steps, each
    round's median step and the median of them all (ms), or its error. `save` gets what is
    timed so far after each round (a process stopped by its budget keeps the rounds it
    finished)."""
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
    steps = 2 if tiny else ROUND_STEPS
    order = list(trainers)

    def one_round(r: int, into: dict[str, list[list[float]]]) -> None:
        for label in order[r % len(order):] + order[:r % len(order)]:
            t, precision = trainers[label]
            with float32_matmuls(torch, tf32=precision != "fp32"):
                ms = [s * 1e3 for s in step_times_s(torch, device, t.step, steps)]
            into.setdefault(label, []).append(ms)

    settle: dict[str, list[list[float]]] = {}
    end = time.monotonic() + (settle_s if settle_s is not None else 0.0 if tiny else SETTLE_S)
    while order and time.monotonic() < end:
        one_round(len(settle.get(order[0], ())), settle)
    if settle:
        log(f"  {len(settle[order[0]])} rounds untimed to settle")
    for label, per_round in settle.items():
        out[label]["settle_ms"] = [round(statistics.median(c), 4) for c in per_round]
    least, most = (1, 1) if tiny else (ROUNDS, MAX_ROUNDS)
    times: dict[str, list[list[float]]] = {label: [] for label in trainers}
    start, r = time.monotonic(), 0
    while order and (r < least or (r < most and time.monotonic() - start < ROUNDS_S)):
        one_round(r, times)
        r += 1
        if r <= least or r % 8 == 0:
            log(f"  round {r} timed")
        for label, per_round in times.items():
            out[label].update(_summary(out[label]["batch"], per_round))
        if (now := allocator_counters(torch, device)) is not None:
            per = out.setdefault(ALLOCATOR, {})
            for k, v in now.items():
                per.setdefault(k, []).append(v)
        save(out)
    return out


# The caching allocator's counters after each timed round (`allocator_counters`), under this
# key beside the targets': a fresh process holds every target of a family at once, and one
# that runs out of cached blocks frees them all and retries, synchronizing, on the host's time.
ALLOCATOR = "allocator"
_COUNTERS = {"num_alloc_retries": "alloc_retries", "num_device_alloc": "device_allocs",
             "num_device_free": "device_frees", "reserved_bytes.all.peak": "reserved_peak_bytes"}


def allocator_counters(torch: Any, device: Any) -> dict[str, int] | None:
    """The CUDA caching allocator's cumulative counters on `device` (retries after a failed
    allocation, cudaMalloc and cudaFree calls, the peak reserved bytes); None off CUDA."""
    from gpuaudit.workloads.timing import is_cuda

    if not is_cuda(device):
        return None
    stats = torch.cuda.memory_stats(device)
    return {name: int(stats.get(key, 0)) for key, name in _COUNTERS.items()}


def _summary(batch: int, per_round: list[list[float]]) -> dict[str, Any]:
    flat = [s for chunk in per_round for s in chunk]
    step = statistics.median(flat)
    return {"step_ms": round(step, 4), "samples_per_s": round(batch / (step / 1e3), 4),
            "steps_ms": [round(s, 4) for s in flat],
            "rounds_ms": [round(statistics.median(c), 4) for c in per_round]}


def at_pace(source_rounds_ms: list[float], profiled_ms: float) -> list[bool]:
    """Per round, whether the source's step was within `PACE_TOLERANCE` of its profiled one."""
    return [abs(ms / profiled_ms - 1) <= PACE_TOLERANCE for ms in source_rounds_ms]


def pace_matched(source_rounds_ms: list[float], target_rounds_ms: list[float],
                 profiled_ms: float) -> tuple[float | None, int]:
    """(the target's median step over the rounds where its source ran at its profiled pace,
    or None where fewer than `MIN_MATCHED` did; how many did)."""
    matched = [t for t, ok in zip(target_rounds_ms, at_pace(source_rounds_ms, profiled_ms),
                                  strict=True) if ok]
    if len(matched) < MIN_MATCHED:
        return None, len(matched)
    return statistics.median(matched), len(matched)


def judged(cases: dict[str, Any], key: str, src: str, prof: Any) -> dict[str, Any]:
    """The target's throughput to judge a prediction from `prof` (recorded in `src`) by:
    where it was timed in rounds beside its source, over the rounds where the source ran at
    its profiled pace (above), with the median of all rounds beside it; else its timing
    as it is."""
    c = cases[key]
    if not (c.get("rounds_ms") and cases.get(src, {}).get("rounds_ms")):
        return {"measured": c["samples_per_s"]}
    ms, n = pace_matched(cases[src]["rounds_ms"], c["rounds_ms"], prof.step_ms)
    return {"measured": c["batch"] / (ms / 1e3) if ms else c["samples_per_s"],
            "measured_all": c["samples_per_s"], "rounds": len(c["rounds_ms"]),
            "rounds_at_pace": n, "pace_matched": ms is not None}


def timing_controls(family: str, found: list[tuple[int, Any]]) -> list[dict[str, Any]]:
    """The recorded precisions' step in the profiled run beside the same step timed in a
    fresh process: the harness's own check that profiling left the source's timing alone,
    and, timed in rounds, how far the host's pace moved and how often it was the profiled
    one."""
    run = next((r for _i, (r, _s) in reversed(found) if r is not None), None)
    out = []
    for prof in run.op_profiles if run is not None else ():
        cases = next((st["cases"] for _j, (_r, st) in reversed(found)
                      if st["cases"].get(prof.precision, {}).get("step_ms")), None)
        if cases:
            mine = cases[prof.precision]
            fresh = mine["step_ms"]
            host = cases.get(f"{prof.precision} batch 1", {}).get("step_ms")
            row = {"family": family, "precision": prof.precision,
                   "profiled_run_ms": prof.step_ms, "fresh_ms": fresh,
                   "ratio": round(prof.step_ms / fresh, 3),
                   "host_recorded_ms": prof.host_step_ms, "host_fresh_ms": host}
            if mine.get("rounds_ms"):
                per = mine["rounds_ms"]
                row.update(rounds_low_ms=min(per), rounds_high_ms=max(per),
                           rounds_at_pace=sum(at_pace(per, prof.step_ms)),
                           rounds=len(per))
            else:  # recordings before the rounds: the first timed again after the others
                row["fresh_again_ms"] = cases.get(f"{prof.precision} again", {}).get("step_ms")
            if retries := cases.get(ALLOCATOR, {}).get("alloc_retries"):
                row["alloc_retries"] = retries[-1]  # the process's, by its last timed round
            out.append(row)
    return out
