"""The `predict` entry (`python -m validation run predict`): each prediction beside the
measurement it predicts, in one run (about 6 minutes on 2 H200s).

    python3 validation/predict/run.py OUTDIR                              # everything below
    python3 validation/predict/run.py --phase NAME OPTIONS_JSON OUTFILE   # one phase
    GPUAUDIT_PREDICT_PHASES=R,P1 python3 validation/predict/run.py OUTDIR  # those alone

Phases (each a process of its own; P0 and P1 at once, one per GPU):

  R   GPUs 0+1: `bench matmul memory collectives` (quick): the machine's rates
  P0  GPU 0: gpt-124m fp32 and bf16 (eager, batch 32×1024), gpt-1.3b bf16 (8×2048), each
      with its op profile (`bench train --op-profile`)
  P1  GPU 1: resnet50 fp32 and bf16 (eager, batch 256) with op profiles
  D   GPUs 0+1: DDP of gpt-124m bf16 eager on 1 and 2 GPUs (the same per-GPU batch)

Then, from those runs only (no other figure), the predictions and the measurement each one
is compared with (validation/predict/compare.py):

  1 → 2 GPUs       gpt-124m/bf16 profile --gpus 2            vs D's 2-GPU throughput
  fp32 → bf16      gpt-124m/fp32 profile --precision bf16    vs P0's gpt-124m/bf16
  bf16 → fp32      gpt-124m/bf16 profile --precision fp32    vs P0's gpt-124m/fp32
  124M → 1.3B      gpt-124m/bf16 profile --params 1.3B       vs P0's gpt-1.3b/bf16
  1.3B → 124M      gpt-1.3b/bf16 profile --params 124M       vs P0's gpt-124m/bf16
  resnet50 fp32 → bf16, bf16 → fp32                          vs P1's figures

Writes OUTDIR/summary.md (the table: predicted, measured, error, band), runs.json (every
phase's Run), predictions.json (every Prediction document), log.txt. runs.json and log.txt
are rewritten as each phase finishes, so that a call cut short still returns the phases it
completed. Without a GPU it runs
the same phases with the CPU's tiny models and predicts with the recorded H200 rates
(tests/fixtures/predict/): a dry run of this script, its numbers mean nothing.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
sys.path[:0] = [str(SRC), str(ROOT)]

from validation.phases import Phase, gpu_count  # noqa: E402
from validation.predict.compare import compare, table  # noqa: E402

# Phase limits (s): within one 10-minute device call, R + max(P0, P1) + D + the comparison.
LIMITS = {"R": 100, "P0": 270, "P1": 270, "D": 120}




def phases(ngpu: int) -> dict[str, tuple[list[str], str, dict[str, Any]]]:
    """phase → (suites, profile, options)."""
    if ngpu == 0:
        return {
            "R": (["matmul", "memory"], "quick", {}),
            "P0": (["train"], "standard", {"models": ["gpt-tiny"], "modes": ["fp32", "bf16"],
                                          "parts": ["modes"], "steps": 3,
                                          "op_profile": True}),
            "P1": (["train"], "standard", {"models": ["resnet-tiny"],
                                          "modes": ["fp32", "bf16"], "parts": ["modes"],
                                          "steps": 3, "op_profile": True}),
            "D": (["train"], "full", {"models": ["gpt-tiny"], "parts": ["scaling"],
                                      "scaling_mode": "fp32", "accum": 1, "steps": 3}),
        }
    return {
        "R": (["matmul", "memory", "collectives"], "quick", {}),
        "P0": (["train"], "standard", {"models": ["gpt-124m", "gpt-1.3b"],
                                      "modes": ["fp32", "bf16"], "parts": ["modes"],
                                      "steps": 20, "op_profile": True,
                                      "skip": ["gpt-1.3b/fp32"]}),
        "P1": (["train"], "standard", {"models": ["resnet50"], "modes": ["fp32", "bf16"],
                                      "parts": ["modes"], "steps": 20, "op_profile": True}),
        "D": (["train"], "full", {"models": ["gpt-124m"], "parts": ["scaling"],
                                  "scaling_mode": "bf16", "accum": 1, "steps": 20,
                                  "min_warmup_s": 1.0}),
    }


# -- one phase ---------------------------------------------------------------------------------


def run_phase(name: str, spec_json: str, outfile: str) -> int:
    from gpuaudit.bench.context import Profile
    from gpuaudit.bench.runner import run_bench
    from gpuaudit.hw import take_snapshot

    suites, profile, options = json.loads(spec_json)
    skip = set(options.pop("skip", []))
    machine = take_snapshot()

    def step(text: str) -> None:
        sys.stderr.write(f"[{name} {time.strftime('%H:%M:%S')}] {text}\n")

    runs = []
    if skip and options.get("models"):
        # One model at a time so that a model's modes can be left out (1.3B in fp32: minutes).
        for model in options["models"]:
            modes = [m for m in options["modes"] if f"{model}/{m}" not in skip]
            runs.append(run_bench(suites, machine=machine, profile=Profile(profile),
                                  options={**options, "models": [model], "modes": modes},
                                  step=step))
    else:
        runs.append(run_bench(suites, machine=machine, profile=Profile(profile),
                              options=options, step=step))
    run = runs[0].model_copy(update={
        "measurements": tuple(m for r in runs for m in r.measurements),
        "status": runs[-1].status, "finished_at": runs[-1].finished_at})
    Path(outfile).write_text(run.model_dump_json(indent=1))
    return 0


def keep(out: Path, tmp: Path, info: dict[str, Any], docs: dict[str, Any]) -> None:
    """runs.json and log.txt as they stand: the phases finished so far."""
    (out / "runs.json").write_text(json.dumps({"phases": info, "runs": docs}, indent=1))
    with open(out / "log.txt", "w") as log:
        for name in ("R", "P0", "P1", "D"):
            err = tmp / f"{name}.err"
            if err.exists() and name in info:
                tail = err.read_text(errors="replace").splitlines()[-40:]
                log.write(f"== {name} {info.get(name)}\n" + "\n".join(tail) + "\n")


def main(outdir: str) -> int:
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    # the phases' own files: the harness's scratch folder, else a temporary one
    tmp = Path(tempfile.mkdtemp(prefix="predict-", dir=os.environ.get("VALIDATION_WORK")))
    ngpu = gpu_count()
    spec = phases(ngpu)
    info: dict[str, Any] = {}
    docs: dict[str, Any] = {}
    start = time.time()

    # GPUAUDIT_PREDICT_PHASES=R,P1: these phases alone (the cases that need others fail,
    # saying which phase is missing)
    only = set(filter(None, os.environ.get("GPUAUDIT_PREDICT_PHASES", "").split(",")))

    def run(names: list[str], gpus: list[str | None]) -> None:
        ps = [Phase(Path(__file__), n, spec[n], g, tmp) for n, g in zip(names, gpus, strict=True)
              if not only or n in only]
        for p in ps:
            info[p.name] = p.wait(LIMITS[p.name])
            docs[p.name] = p.run_doc()
            keep(out, tmp, info, docs)  # a call cut after this phase still returns it

    if ngpu >= 2:
        run(["R"], ["0,1"])
        run(["P0", "P1"], ["0", "1"])
        run(["D"], ["0,1"])
    else:
        gpu = "0" if ngpu else None
        for name in ("R", "P0", "P1", "D"):
            if name == "D" and ngpu == 1:
                continue
            run([name], [gpu])
    info["total"] = {"wall_s": round(time.time() - start, 1), "gpus": ngpu}
    keep(out, tmp, info, docs)
    rows, preds = compare(docs, ngpu)
    (out / "predictions.json").write_text(json.dumps({"rows": rows, "predictions": preds},
                                                     indent=1))
    head = (f"{ngpu} GPU(s), {info['total']['wall_s']} s.\n\n"
            + ("DRY RUN on the CPU: tiny models, the recorded H200 rates; the numbers mean "
               "nothing.\n\n" if ngpu == 0 else ""))
    text = head + table(rows)  # the phases' exit codes and times: runs.json
    (out / "summary.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--phase":
        sys.exit(run_phase(sys.argv[2], sys.argv[3], sys.argv[4]))
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "predict-out"))
