"""Does a tiny-launch probe follow the host's pace, so that it could tell which rounds ran at
a profiled pace where the source's own step cannot (a source the GPU binds)? Per model and
fresh process, for 12 s: the probe (2,000 in-place adds on a 16-element tensor, µs a launch)
before and after 6 eager bf16 training steps at batch 1 (the host's own time), round after
round. `summarize` gives per process the medians and the rounds' correlation of probe and
step, and how far normalizing by the probe brings the processes' medians together.

    PYTHONPATH=src:examples/predict python3 validation/predict/launch_probe.py record OUT.json
    python3 validation/predict/launch_probe.py summarize OUT.json

docs/predict.md's figures come from tests/fixtures/predict/zoo/launch-probe-h200.json.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from typing import Any

MODELS = ("bert", "mobilenet", "diffusion")
PROCESSES = 3
SECONDS = 12.0
PROBE_LAUNCHES = 2000
STEPS = 6


def one_process(name: str) -> list[tuple[float, float, float]]:
    """(probe before, probe after, median step at batch 1 in ms) per round, in this process."""
    import torch

    from gpuaudit.workloads.entry import default_loss, load, split_batch

    w = load(f"zoo.{name}:build")
    model = w.model.cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    inputs, target = split_batch(w.make_batch(1))
    inputs, target = tuple(t.cuda() for t in inputs), target.cuda()
    loss_fn = w.loss or default_loss  # as `bench train` trains it

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(*inputs), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    x = torch.ones(16, device="cuda")

    def probe() -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(PROBE_LAUNCHES):
            x.add_(1.0)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / PROBE_LAUNCHES * 1e6

    for _ in range(5):
        step()
    rows = []
    end = time.time() + SECONDS
    while time.time() < end:
        before, times = probe(), []
        for _ in range(STEPS):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        rows.append((round(before, 3), round(probe(), 3), round(statistics.median(times), 3)))
    return rows


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per model: each process's median probe (µs), median step (ms) and the rounds'
    correlation of the two; the spread of the processes' median steps and of their median
    step ÷ median probe (max ÷ min − 1)."""
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r["model"] for r in runs):
        procs = []
        for r in (r for r in runs if r["model"] == name):
            probe = [(a + b) / 2 for a, b, _ in r["rows"]]
            step = [s for *_, s in r["rows"]]
            procs.append({"probe_us": statistics.median(probe), "step_ms": statistics.median(step),
                          "r": statistics.correlation(probe, step), "rounds": len(step)})
        steps = [p["step_ms"] for p in procs]
        ratios = [p["step_ms"] / p["probe_us"] for p in procs]
        out[name] = {"processes": procs, "step_spread": max(steps) / min(steps) - 1,
                     "normalized_spread": max(ratios) / min(ratios) - 1}
    return out


def main() -> int:
    what, arg = sys.argv[1], sys.argv[2]  # arg: a zoo model for "one", else the JSON file
    if what == "one":
        print(json.dumps({"model": arg, "rows": one_process(arg)}), flush=True)
        return 0
    if what == "record":
        runs = []
        for n in range(PROCESSES):
            for name in MODELS:
                p = subprocess.run([sys.executable, __file__, "one", name], capture_output=True,
                                   text=True, timeout=120)
                if p.returncode == 0:
                    runs.append(dict(json.loads(p.stdout.splitlines()[-1]), process=n + 1))
                else:
                    print(name, "failed:", p.stderr[-400:], file=sys.stderr)
        with open(arg, "w") as f:
            json.dump(runs, f)
        return 0
    with open(arg) as f:
        print(json.dumps(summarize(json.load(f)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
