"""A model's host work per step at batch 1 and at its batch, per precision, on a GPU: the
figures `workloads.hosttime.held_host` and `predict.grouped.held_ratio` cite
(tests/fixtures/predict/zoo/lstm-host-at-batch-h200.json, from a probe that issued the
steps the same way).

Per precision (bf16, fp32, tf32) and batch (1 and the model's own), in one process: the
step timed in 6 rounds of 6 steps, every setting in turn each round (the host's pace moves
within a minute on the lent H200), then five steps each issued while a spin kernel holds
the device (the host's time to issue it: no launch waits on a kernel), then the kernels of
one step from the profiler (last: a process that has profiled launches slower).

    PYTHONPATH=src:examples/predict python3 validation/predict/host_at_batch.py OUT.json \
        [zoo.lstm:build]
"""

from __future__ import annotations

import importlib
import json
import statistics
import sys
import time
from typing import Any

PRECISIONS = ("bf16", "fp32", "tf32")
ROUNDS, STEPS, ISSUED = 6, 6, 5
HOLD_S = 0.2


def main(out: str, entry: str = "zoo.lstm:build") -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from gpuaudit.bench.timing import spin_cycles_per_us
    from gpuaudit.workloads.precision import TrainMode, float32_matmuls
    from gpuaudit.workloads.timing import step_times_s
    from gpuaudit.workloads.trainer import Trainer

    torch.backends.cudnn.benchmark = True  # as bench train runs
    dev = torch.device("cuda")
    mod, fn = entry.split(":")
    batch = int(getattr(importlib.import_module(mod), fn)().get("batch_size", 32))
    settings = [(p, b) for p in PRECISIONS for b in (batch, 1)]
    trainers = {}
    for p, b in settings:
        with float32_matmuls(torch, tf32=p != "fp32"):
            t = Trainer(entry, TrainMode(p), dev, batch_size=b)
            t.warm_up(3, 0.5)
        trainers[(p, b)] = t
    rows: dict[tuple[str, int], dict[str, Any]] = {k: {"step_rounds_ms": []} for k in settings}
    for _ in range(ROUNDS):
        for (p, b), t in trainers.items():
            with float32_matmuls(torch, tf32=p != "fp32"):
                ms = [s * 1e3 for s in step_times_s(torch, dev, t.step, STEPS)]
            rows[(p, b)]["step_rounds_ms"].append(round(statistics.median(ms), 3))
    cycles = spin_cycles_per_us(torch)
    for (p, b), t in trainers.items():
        issued = []
        with float32_matmuls(torch, tf32=p != "fp32"):
            for _ in range(ISSUED):
                torch.cuda.synchronize()
                torch.cuda._sleep(int(HOLD_S * 1e6 * cycles))
                t0 = time.perf_counter()
                t.step()
                issued.append(round((time.perf_counter() - t0) * 1e3, 3))
                torch.cuda.synchronize()
        rows[(p, b)]["issued_held_ms"] = issued
    for (p, b), t in trainers.items():
        with float32_matmuls(torch, tf32=p != "fp32"), \
                profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t.step()
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        rows[(p, b)].update(kernels=len(kernels),
                            kernel_ms=round(sum(e.device_time for e in kernels) / 1e3, 3))
    table = [{"precision": p, "batch": b, **r} for (p, b), r in rows.items()]
    for r in table:
        print(f"{r['precision']} batch {r['batch']}: step "
              f"{statistics.median(r['step_rounds_ms']):.2f} ms, issued with the device held "
              f"{statistics.median(r['issued_held_ms']):.2f} ms, {r['kernels']} kernels",
              flush=True)
    with open(out, "w") as f:
        json.dump({"entry": entry, "device": torch.cuda.get_device_name(), "rows": table}, f,
                  indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
