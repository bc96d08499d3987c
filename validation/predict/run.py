"""Issue 17's validation on the GPU machine: each prediction beside the measurement it
predicts, in one call (~6 minutes on 2 H200s, nvidia-h200-x2).

    python3 scripts/device_predict.py OUTDIR                          # everything below
    python3 scripts/device_predict.py --phase NAME OPTIONS_JSON OUTFILE   # one phase
    GPUAUDIT_PREDICT_PHASES=R,P1 python3 scripts/device_predict.py OUTDIR  # those alone

Phases (each a process of its own; P0 and P1 at once, one per GPU):

  R   GPUs 0+1: `bench matmul memory collectives` (quick): the machine's rates
  P0  GPU 0: gpt-124m fp32 and bf16 (eager, batch 32×1024), gpt-1.3b bf16 (8×2048), each
      with its op profile (`bench train --op-profile`)
  P1  GPU 1: resnet50 fp32 and bf16 (eager, batch 256) with op profiles
  D   GPUs 0+1: DDP of gpt-124m bf16 eager on 1 and 2 GPUs (the same per-GPU batch)

Then, from those runs only (no other figure), the predictions and the measurement each one
is compared with:

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
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
sys.path.insert(0, str(SRC))
H200_RATES = HERE.parent / "tests" / "fixtures" / "predict" / "h200-2gpu-bench-quick.json"

# Phase limits (s): within one 10-minute device call, R + max(P0, P1) + D + the comparison.
LIMITS = {"R": 100, "P0": 270, "P1": 270, "D": 120}


def gpu_count() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


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


class Phase:
    def __init__(self, name: str, spec: tuple, gpus: str | None, tmp: Path) -> None:
        from gpuaudit.hw.torch_env import apply_safe_env

        self.name, self.out = name, tmp / f"{name}.json"
        self.err = open(tmp / f"{name}.err", "w")  # noqa: SIM115
        env = dict(os.environ)
        apply_safe_env(env)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
        if gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpus
        self.t0 = time.time()
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--phase", name, json.dumps(spec),
             str(self.out)], env=env, stdout=self.err, stderr=subprocess.STDOUT,
            start_new_session=True)

    def wait(self, limit: float) -> dict[str, Any]:
        try:
            rc = self.proc.wait(timeout=max(1.0, limit - (time.time() - self.t0)))
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGINT)  # Ctrl-C: the run is kept, partial
            try:
                rc = self.proc.wait(timeout=25)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                rc = self.proc.wait()
        self.err.close()
        return {"rc": rc, "wall_s": round(time.time() - self.t0, 1)}


# -- the comparisons ---------------------------------------------------------------------------


def cases(ngpu: int) -> list[dict[str, Any]]:
    """(label, source run, workload, change, measured run, measured figure)."""
    if ngpu == 0:
        return [
            {"case": "1 → 2 ranks", "run": "P0", "workload": "gpt-tiny/fp32",
             "change": {"gpus": 2}, "measured": ("D", "gpt-tiny/ddp/n2/throughput")},
            {"case": "fp32 → bf16", "run": "P0", "workload": "gpt-tiny/fp32",
             "change": {"precision": "bf16"}, "measured": ("P0", "gpt-tiny/bf16/throughput")},
            {"case": "bf16 → fp32", "run": "P0", "workload": "gpt-tiny/bf16",
             "change": {"precision": "fp32"}, "measured": ("P0", "gpt-tiny/fp32/throughput")},
            {"case": "gpt-tiny → 124M", "run": "P0", "workload": "gpt-tiny/bf16",
             "change": {"params": 124e6}, "measured": None},
            {"case": "resnet fp32 → bf16", "run": "P1", "workload": "resnet-tiny/fp32",
             "change": {"precision": "bf16"},
             "measured": ("P1", "resnet-tiny/bf16/throughput")},
        ]
    return [
        {"case": "1 → 2 GPUs (DDP)", "run": "P0", "workload": "gpt-124m/bf16",
         "change": {"gpus": 2}, "measured": ("D", "gpt-124m/ddp/n2/throughput")},
        {"case": "fp32 → bf16", "run": "P0", "workload": "gpt-124m/fp32",
         "change": {"precision": "bf16"}, "measured": ("P0", "gpt-124m/bf16/throughput")},
        {"case": "bf16 → fp32", "run": "P0", "workload": "gpt-124m/bf16",
         "change": {"precision": "fp32"}, "measured": ("P0", "gpt-124m/fp32/throughput")},
        {"case": "124M → 1.3B", "run": "P0", "workload": "gpt-124m/bf16",
         "change": {"params": 1.3e9}, "measured": ("P0", "gpt-1.3b/bf16/throughput")},
        {"case": "1.3B → 124M", "run": "P0", "workload": "gpt-1.3b/bf16",
         "change": {"params": 124e6, "batch": 32, "seq_len": 1024},
         "measured": ("P0", "gpt-124m/bf16/throughput")},
        {"case": "resnet50 fp32 → bf16", "run": "P1", "workload": "resnet50/fp32",
         "change": {"precision": "bf16"}, "measured": ("P1", "resnet50/bf16/throughput")},
        {"case": "resnet50 bf16 → fp32", "run": "P1", "workload": "resnet50/bf16",
         "change": {"precision": "fp32"}, "measured": ("P1", "resnet50/fp32/throughput")},
    ]


def compare(docs: dict[str, Any], ngpu: int) -> tuple[list[dict[str, Any]], list[Any]]:
    from gpuaudit.errors import GpuauditError
    from gpuaudit.model import Run, load_run
    from gpuaudit.predict import Change, load_profile, machine_rates, predict
    from gpuaudit.specs.catalog import load_catalog

    specs = load_catalog()
    runs = {k: Run.model_validate(v) for k, v in docs.items() if v}
    rates_run = runs.get("R") if ngpu else load_run(H200_RATES.read_text())
    rates = machine_rates(rates_run, specs) if rates_run else None
    why = ("no rates (phase R failed)" if rates_run is None else
           "no rates: phase R has no uncontended matmul and memory figures")
    rows, preds = [], []
    for c in cases(ngpu):
        row: dict[str, Any] = {"case": c["case"], "from": c["workload"]}
        try:
            if rates is None:
                raise ValueError(why)
            if c["run"] not in runs:
                raise ValueError(f"phase {c['run']} not run")
            run = runs[c["run"]]
            profile = load_profile(run, c["workload"])
            p = predict(profile, rates, Change(**c["change"]), specs)
            preds.append(p.model_dump(mode="json"))
            row.update(predicted=p.samples_per_s, low=p.samples_per_s_low,
                       high=p.samples_per_s_high, band_pct=p.uncertainty_pct,
                       to=f"{p.target.model}/{p.target.mode} × {p.target.gpus}")
        except (GpuauditError, KeyError, ValueError) as exc:
            row["error_text"] = str(exc)[:200]
        if c["measured"] is not None:
            phase, name = c["measured"]
            found = [m for m in (runs.get(phase).measurements if runs.get(phase) else ())
                     if m.name == name and m.value]
            if found:
                row["measured"] = found[0].value
        if row.get("predicted") and row.get("measured"):
            row["error_pct"] = 100 * (row["predicted"] - row["measured"]) / row["measured"]
            row["in_band"] = row["low"] <= row["measured"] <= row["high"]
        rows.append(row)
    return rows, preds


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| case | predicted from | predicted (samples/s) | band | measured | error | "
           "≤ 10 % |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        pred = (f"{r['predicted']:,.4g}" if r.get("predicted") else
                f"failed: {r.get('error_text', '?')}")
        band = f"{r['low']:,.4g}–{r['high']:,.4g}" if r.get("predicted") else ""
        meas = f"{r['measured']:,.4g}" if r.get("measured") else "not measured"
        err = f"{r['error_pct']:+.1f} %" if "error_pct" in r else ""
        ok = ("yes" if abs(r["error_pct"]) <= 10 else "NO") if "error_pct" in r else ""
        out.append(f"| {r['case']} | {r['from']} | {pred} | {band} | {meas} | {err} | {ok} |")
    return "\n".join(out) + "\n"


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
    tmp = Path("/tmp/gpuaudit-predict")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    ngpu = gpu_count()
    spec = phases(ngpu)
    info: dict[str, Any] = {}
    docs: dict[str, Any] = {}
    start = time.time()

    # GPUAUDIT_PREDICT_PHASES=R,P1: these phases alone (the cases that need others fail,
    # saying which phase is missing)
    only = set(filter(None, os.environ.get("GPUAUDIT_PREDICT_PHASES", "").split(",")))

    def run(names: list[str], gpus: list[str | None]) -> None:
        ps = [Phase(n, spec[n], g, tmp) for n, g in zip(names, gpus, strict=True)
              if not only or n in only]
        for p in ps:
            info[p.name] = p.wait(LIMITS[p.name])
            docs[p.name] = json.loads(p.out.read_text()) if p.out.exists() else None
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
    head = (f"# gpuaudit predict validation: {ngpu} GPU(s), "
            f"{time.strftime('%Y-%m-%d %H:%M')}, {info['total']['wall_s']} s\n\n"
            + ("DRY RUN on the CPU: tiny models, the recorded H200 rates; the numbers mean "
               "nothing.\n\n" if ngpu == 0 else ""))
    text = head + table(rows) + "\nphases: " + json.dumps(info) + "\n"
    (out / "summary.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--phase":
        sys.exit(run_phase(sys.argv[2], sys.argv[3], sys.argv[4]))
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "predict-out"))
