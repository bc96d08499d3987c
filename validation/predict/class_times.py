"""Each unit class's device time in a model's training step, measured in the step itself: the
reference a size change's class ratios are checked against (`predict.retarget`,
`predict.convfit`; tests/fixtures/predict/zoo/size-class-times-h200.json).

Each model's step (its entry point, bf16 autocast or fp32/tf32, fused AdamW, cudnn.benchmark
on) runs 8 steps to warm up, then 5 under torch.profiler; each aten operator's own (self)
device time is summed by class and divided by 5. Convolutions are `*conv*` operators and
their backward, norms the batch, group and layer norms and their backward.

    python3 validation/predict/class_times.py OUT.json zoo.unet:build@bf16 zoo.unet:build_large@bf16
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WARM_UP, PROFILED = 8, 5


def op_class(name: str) -> str | None:
    name = name.lower()
    if not name.startswith("aten::"):
        return None
    if "conv" in name and "batch" not in name:
        return "conv"
    if any(n in name for n in ("batch_norm", "group_norm", "layer_norm")):
        return "norm"
    return None


def class_ms(entry: str, precision: str) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from gpuaudit.workloads.precision import float32_matmuls
    from validation.predict.train_step import train_step

    step_at, (batch,) = train_step(entry, precision)

    def step() -> None:
        step_at(batch)

    with float32_matmuls(torch, tf32=precision != "fp32"):
        for _ in range(WARM_UP):
            step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(PROFILED):
                step()
            torch.cuda.synchronize()
    by: dict[str, float] = {}
    for e in prof.key_averages():
        cls = op_class(e.key)
        if cls is not None:
            by[cls] = by.get(cls, 0.0) + e.self_device_time_total / 1e3 / PROFILED
    return {"precision": precision, "class_ms": {k: round(v, 4) for k, v in by.items()}}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or any(spec.count("@") != 1 for spec in argv[1:]):
        print("usage: class_times.py OUT.json MODULE:build@PRECISION [...]", file=sys.stderr)
        return 2
    sys.path[:0] = [str(ROOT), str(ROOT / "src"), str(ROOT / "examples" / "predict")]
    out, specs = Path(argv[0]), [spec.rsplit("@", 1) for spec in argv[1:]]
    if len({entry for entry, _ in specs}) < len(specs):  # its file keys each model once
        print("class_times: each model once a run (another precision in a run of its own)",
              file=sys.stderr)
        return 2
    models: dict[str, Any] = {}
    t0 = time.time()
    for entry, precision in specs:
        models[entry] = class_ms(entry, precision)
        print(f"[{time.time() - t0:.0f} s] {entry}@{precision}: {models[entry]['class_ms']}",
              flush=True)
    out.write_text(json.dumps({"models": models}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
