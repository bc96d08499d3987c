"""`gpuaudit predict` on the model zoo (examples/predict/zoo/, manifest.json): record on a GPU,
then predict each case from one recording and compare it with the run that measured it.

    python3 scripts/predict_zoo.py record OUTDIR [--set held_out|development] [--budget-s S]
    python3 scripts/predict_zoo.py compare OUTDIR [--json RESULT] [--table TABLE.md]
    python3 scripts/predict_zoo.py record OUTDIR --tiny      # a CPU dry run (batch 2)

record: the machine's rates (`bench matmul memory`, quick) into OUTDIR/rates.json; then per
family (development first, then held-out) one Run in OUTDIR/runs/NAME.json holding the op
profiles of the recorded precisions (bf16, fp32) at the family's batch and the step times
of each target (tf32; bf16 at ×0.5 and ×2 the batch; bf16 of the size variant), the
profiled traces in OUTDIR/traces/NAME/. A worker process runs the families and is restarted
after a crash; a family that would start after the budget is left out (said in status.json).

compare: every case predicted from its recording (`gpuaudit.predict`, the size change from
the variant's entry point) beside the measurement: OUTDIR/results.json (machine-readable)
and OUTDIR/table.md (the held-out and development tables).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ZOO = ROOT / "examples" / "predict"
MANIFEST = ZOO / "zoo" / "manifest.json"
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ZOO))


def slug(entry: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", entry.split(":")[0].rsplit(".", 1)[-1])


def families(which: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(set, family) in the order they are recorded: development first."""
    man = json.loads(MANIFEST.read_text())
    out = [("development", f) for f in man["development"]] + \
        [("held_out", f) for f in man["held_out"]]
    return [(s, f) for s, f in out if which in (None, s)]


def log(out: Path, text: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {text}"
    print(line, flush=True)
    with open(out / "log.txt", "a") as f:
        f.write(line + "\n")


# --- the worker: one family at a time ----------------------------------------------------------


def _bench(options: dict[str, Any], machine: Any, out: Path) -> Any:
    from gpuaudit.bench.context import Profile
    from gpuaudit.bench.runner import run_bench

    return run_bench(["train"], machine=machine, profile=Profile.STANDARD, options=options,
                     step=lambda text: log(out, f"  {text}"))


def measure(model: str, precision: str, batch: int, tiny: bool) -> dict[str, Any]:
    """One case's steady-state step, timed alone (no op profile): median of the timed steps."""
    import statistics

    import torch

    from gpuaudit.workloads.precision import TrainMode
    from gpuaudit.workloads.train import measure_mode

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # as bench train runs (workloads.plan.target)
    result = measure_mode(model, TrainMode(precision), device, batch_size=batch,
                          steps=2 if tiny else 10, warmup_steps=1 if tiny else 3,
                          min_warmup_s=0.0 if tiny else 0.5, count=False)
    if isinstance(result, str):
        return {"error": result[:300]}
    step = statistics.median(result.step_times_s)
    return {"step_ms": round(step * 1e3, 4), "samples_per_s": round(batch / step, 4),
            "steps_ms": [round(t * 1e3, 4) for t in result.step_times_s],
            "peak_memory_gb": (round(result.peak_memory_bytes / 1e9, 3)
                               if result.peak_memory_bytes is not None else None)}


def record_family(fam: dict[str, Any], out: Path, machine: Any, tiny: bool) -> dict[str, Any]:
    """The family's op profiles (bf16, fp32: one Run) and its target cases' steps."""
    import importlib

    import torch

    mod, fn = fam["entry"].split(":")
    built = getattr(importlib.import_module(mod), fn)()
    batch = 2 if tiny else int(built.get("batch_size", 32))
    del built
    name = slug(fam["entry"])
    info: dict[str, Any] = {"family": fam["family"], "entry": fam["entry"], "batch": batch,
                            "size_entry": fam["size"], "cases": {}}
    t0 = time.time()
    try:
        run = _bench({"models": [fam["entry"]], "modes": ["bf16", "fp32"], "batch_size": batch,
                      "op_profile": True, "op_profile_traces": str(out / "traces" / name),
                      "parts": ["modes"], "steps": 2 if tiny else 10,
                      "min_warmup_s": 0.0 if tiny else 0.5, "warmup_steps": 1 if tiny else 3},
                     machine, out)
        (out / "runs" / f"{name}.json").write_text(run.model_dump_json())
        info["recorded"] = {"wall_s": round(time.time() - t0, 1),
                            "skipped": [m.skipped_reason for m in run.measurements
                                        if m.skipped_reason]}
    except Exception as exc:  # the family's recording failed: its cases cannot be predicted
        info["recorded"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        return info
    cases = [("tf32", fam["entry"], "tf32", batch), ("bf16 x0.5", fam["entry"], "bf16",
                                                       max(1, batch // 2)),
             ("bf16 x2", fam["entry"], "bf16", batch * 2), ("size", fam["size"], "bf16", batch)]
    for label, model, precision, b in cases:
        if tiny and precision == "tf32":
            continue
        t1 = time.time()
        log(out, f"  measure {label}: {model} {precision} batch {b}")
        try:
            found = measure(model, precision, b, tiny)
        except Exception as exc:
            found = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        info["cases"][label] = {"model": model, "precision": precision, "batch": b,
                                "wall_s": round(time.time() - t1, 1), **found}
    return info


def worker(out: Path, names: list[str], tiny: bool) -> int:
    from gpuaudit.hw import take_snapshot

    machine = take_snapshot()
    by_name = {slug(f["entry"]): f for _, f in families()}
    for name in names:
        t0 = time.time()
        log(out, f"family {name}")
        info = record_family(by_name[name], out, machine, tiny)
        info["wall_s"] = round(time.time() - t0, 1)
        (out / "status" / f"{name}.json").write_text(json.dumps(info, indent=1))
        log(out, f"family {name} done in {info['wall_s']} s")
    return 0


# --- the parent: rates, then the worker (restarted after a crash) ------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), str(ZOO),
                                                    env.get("PYTHONPATH")) if p)
    return env


def record(out: Path, which: str | None, budget_s: float, tiny: bool) -> int:
    t_start = time.time()
    for sub in ("runs", "status", "traces"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    if not tiny:
        log(out, "rates: bench matmul memory (quick)")
        rates = subprocess.run([sys.executable, "-m", "gpuaudit", "bench", "matmul", "memory",
                                "--json", "--no-save"], capture_output=True, text=True,
                               env=_env(), timeout=120)
        (out / "rates.json").write_text(rates.stdout)
        log(out, f"rates: exit {rates.returncode} ({time.time() - t_start:.0f} s)")
    todo = [slug(f["entry"]) for _, f in families(which)]
    while todo:
        left = budget_s - (time.time() - t_start)
        if left < 20:
            log(out, f"budget spent: not recorded {', '.join(todo)}")
            break
        proc = subprocess.Popen([sys.executable, __file__, "worker", str(out), *todo,
                                 *(["--tiny"] if tiny else [])], env=_env(),
                                start_new_session=True)
        try:
            proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        done = {p.stem for p in (out / "status").glob("*.json")}
        if todo and todo[0] not in done and proc.returncode not in (0, None):
            log(out, f"worker exit {proc.returncode} in {todo[0]}: skipped")
            done.add(todo[0])
        todo = [n for n in todo if n not in done]
    (out / "status.json").write_text(json.dumps(
        {"wall_s": round(time.time() - t_start, 1), "not_recorded": todo}, indent=1))
    return 0


def pack(out: Path, dest: Path, limit: int = 15 * 2**20, most: int = 7) -> int:
    """OUTDIR's files into at most `most` tars of at most `limit` bytes each in `dest` (the
    device machine sends back 8 files of 16 MiB): results first, traces after."""
    import tarfile

    files = [p for p in sorted(out.rglob("*")) if p.is_file()]
    files.sort(key=lambda p: (p.parts[len(out.parts)] == "traces", str(p)))
    bins: list[list[Path]] = [[]]
    size = 0
    for f in files:
        n = f.stat().st_size
        if bins[-1] and size + n > limit:
            bins.append([])
            size = 0
        bins[-1].append(f)
        size += n
    for i, group in enumerate(bins[:most]):
        with tarfile.open(dest / f"zoo-{i}.tar", "w") as tar:
            for f in group:
                tar.add(f, arcname=str(f.relative_to(out.parent)))
    if len(bins) > most:
        print(f"pack: {sum(len(b) for b in bins[most:])} files left out (over {most} tars)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("record", "worker", "compare", "pack"))
    ap.add_argument("out")
    ap.add_argument("names", nargs="*")
    ap.add_argument("--set", choices=("held_out", "development"))
    ap.add_argument("--budget-s", type=float, default=540.0)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--rates")
    args = ap.parse_args()
    out = Path(args.out)
    if args.what == "worker":
        return worker(out, args.names, args.tiny)
    if args.what == "record":
        return record(out, args.set, args.budget_s, args.tiny)
    if args.what == "pack":
        return pack(out, Path(args.names[0]))
    from zoo_compare import compare  # scripts/zoo_compare.py

    return compare(out, args.rates)


if __name__ == "__main__":
    sys.exit(main())
