"""Does a launch-bound step's pace follow where its threads run? One training step at batch 1
(40 × Linear 256 + LayerNorm + GELU and torch's default AdamW: hundreds of kernels too small
to outlast their launches) timed in processes of their own, one after another: free, then
pinned to each vCPU in turn with `taskset -c N`, then pinned again and free again. Each
process warms up 15 steps, times 60 (each synchronized), and says its median, 10th and 90th
percentile, the CPU its main thread ran on, the machine's steal and idle share over the
timing and its load.

    python3 validation/predict/pin_pace.py record OUT.json [--interleave]   # on a GPU, 3-4 min
    python3 validation/predict/pin_pace.py step TAG              # one process's line
    python3 validation/predict/pin_pace.py summarize FILE.json

Pinned, the main thread and the threads torch starts (the autograd engine's device thread
runs every CUDA backward) share one vCPU; free, they hand work to each other across vCPUs.
docs/predict.md's figures come from tests/fixtures/predict/zoo/pin-pace-h100.json (every free
process before the pinned ones) and pin-pace-turns-h100-a.json and -b.json (two
`--interleave` recordings on a later loan).
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TIMED, WARM_UP = 60, 15


def _cpu_times() -> list[int]:
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]  # user nice system idle … steal


def _processor() -> int:
    """The CPU the calling thread last ran on (/proc/self/stat's 39th field)."""
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


def step(tag: str) -> dict[str, Any]:
    import torch
    from torch import nn

    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(40):
        layers += [nn.Linear(256, 256), nn.LayerNorm(256), nn.GELU()]
    model = nn.Sequential(*layers).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(1, 256, device="cuda")

    def one() -> None:
        opt.zero_grad(set_to_none=True)
        model(x).sum().backward()
        opt.step()

    for _ in range(WARM_UP):
        one()
    torch.cuda.synchronize()
    before, times, cpus = _cpu_times(), [], set()
    for _ in range(TIMED):
        t = time.perf_counter()
        one()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        cpus.add(_processor())
    d = [b - a for a, b in zip(before, _cpu_times(), strict=True)]
    times.sort()
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    return {"tag": tag, "affinity": sorted(os.sched_getaffinity(0))[:4], "ran_on": sorted(cpus),
            "median_ms": round(1e3 * times[TIMED // 2], 3),
            "p10_ms": round(1e3 * times[TIMED // 10], 3),
            "p90_ms": round(1e3 * times[TIMED * 9 // 10], 3),
            "steal_share": round(d[7] / max(1, sum(d)), 4),
            "idle_share": round(d[3] / max(1, sum(d)), 4), "loadavg": load}


def plan(cpus: list[int], interleave: bool = False) -> list[tuple[str, int | None]]:
    """The processes' order: four free, each vCPU pinned, the first and last again, two free;
    or, `interleave`, free and pinned by turns over every other vCPU, so that a host whose
    pace drifts over the minutes weighs on both alike."""
    if interleave:
        return [p for i, c in enumerate(cpus[::2], 1) for p in ((f"free{i}", None),
                                                                 (f"core{c}", c))]
    return ([(f"free{i}", None) for i in range(1, 5)] + [(f"core{c}", c) for c in cpus]
            + [(f"again{c}", c) for c in dict.fromkeys((cpus[0], cpus[-1]))]
            + [(f"free{i}", None) for i in (5, 6)])


def record(out: str, interleave: bool = False) -> int:
    lines = []
    for tag, cpu in plan(sorted(os.sched_getaffinity(0)), interleave):
        pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
        try:
            p = subprocess.run([*pin, sys.executable, __file__, "step", tag],
                               capture_output=True, text=True, timeout=120)
            said = p.stdout.strip().splitlines()[-1:]
            line = json.loads(said[0]) if said else {"tag": tag, "error": p.stderr[-400:]}
        except subprocess.TimeoutExpired:
            line = {"tag": tag, "error": "no line in 120 s"}
        lines.append(line)
        print(json.dumps(line), flush=True)
        Path(out).write_text(json.dumps({"runs": lines}, indent=1))  # kept as it goes
    return 0


def summarize(path: str) -> dict[str, Any]:
    """Free against pinned: each group's medians (ms), and the vCPUs whose pinned median
    stood apart from the rest (over 1.5× their median)."""
    runs = [r for r in json.loads(Path(path).read_text())["runs"] if "median_ms" in r]
    free = [r["median_ms"] for r in runs if r["tag"].startswith("free")]
    pinned = {r["tag"]: r["median_ms"] for r in runs if not r["tag"].startswith("free")}
    mid = statistics.median(pinned.values())
    slow = sorted(t for t, ms in pinned.items() if ms > 1.5 * mid)
    return {"free_ms": free, "pinned_median_ms": mid,
            "pinned_ms": [min(pinned.values()), max(pinned.values())],
            "pinned_rest_ms": sorted(pinned[t] for t in pinned if t not in slow),
            "slow_vcpus": slow,
            "steal": max(r["steal_share"] for r in runs),
            "turns": _turns(runs)}


def _turns(runs: list[dict[str, Any]]) -> dict[str, int]:
    """Each free process against the pinned one right after it (an `--interleave` recording):
    in how many of those pairs the pinned one ran faster. A host whose pace drifts over the
    minutes moves both of a pair alike."""
    pairs = [(a["median_ms"], b["median_ms"]) for a, b in itertools.pairwise(runs)
             if a["tag"].startswith("free") and b["tag"].startswith("core")]
    return {"pairs": len(pairs), "pinned_faster": sum(b < a for a, b in pairs)}


def main(argv: list[str]) -> int:
    if argv[:1] == ["step"] and len(argv) == 2:
        print(json.dumps(step(argv[1])))
        return 0
    if argv[:1] == ["record"] and len(argv) in (2, 3) and argv[2:] in ([], ["--interleave"]):
        return record(argv[1], argv[2:] == ["--interleave"])
    if argv[:1] == ["summarize"] and len(argv) == 2:
        print(json.dumps(summarize(argv[1]), indent=1))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
