"""The `predict-zoo` entry: `gpuaudit predict` on the model zoo (examples/predict/zoo/,
manifest.json): record on a GPU, then, anywhere, predict each case from one recording and
compare it with the run that measured it.

    python3 validation/predict/zoo.py record OUTDIR [--set held_out|development] [--budget-s S]
    python3 validation/predict/zoo.py record OUTDIR --tiny    # a CPU dry run (batch 2)
    python3 validation/predict/zoo.py record OUTDIR2 --cases-only [--only NAME,...]
    python3 validation/predict/zoo.py compare OUTDIR [--also OUTDIR2] [--rates RUN.json]
    python3 validation/predict/zoo.py table RESULTS.json [--all]  # a compare's tables
    python3 validation/predict/zoo.py pack OUTDIR DEST        # OUTDIR into tars of ≤ 15 MiB
    python3 validation/predict/zoo.py merge PUBLISHED.json OUTDIR/results.json LABEL

record: the machine's rates (`bench matmul memory`, quick) into OUTDIR/rates.json; then per
family (development first, then held-out), in a process of its own, one Run in
OUTDIR/runs/NAME.json holding the op profiles of the recorded precisions (bf16, fp32) at the
family's batch, the profiled traces in OUTDIR/traces/NAME/; then, once that process has
exited, in a fresh one, each target timed in rounds beside the others (bf16 and fp32 again,
tf32, bf16 at ×0.5 and ×2 the batch, bf16 of the size variant: `rounds`) in
OUTDIR/cases/NAME.json: a process that ran the profiler times host-bound steps long, and the
host's pace moves within a minute. A family that would start after the budget is
left out (said in status.json); one that started keeps at least `TARGETS_MIN_S` for its
targets, past the budget if need be, unless the budget stopped its profile before either
precision (nothing to predict them from). `--cases-only`: the targets alone, to compare beside an
earlier recording's profiles (`compare EARLIER --also THIS`).

compare: every case predicted from its recording (`gpuaudit.predict`, the size change from
the variant's entry point) beside the measurement, taken in the rounds where its source ran
at its profiled pace: OUTDIR/results.json (machine-readable) and OUTDIR/table.md (the
held-out and development tables, `zoo_tables`). `--unpaired`: a recording whose held rounds
were each timed beside a round at batch 1 predicted from their median as well
(results-*-unpaired.json), to set the two readings of the host's work side by side.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ZOO = ROOT / "examples" / "predict"
MANIFEST = ZOO / "zoo" / "manifest.json"
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ZOO))
sys.path.insert(0, str(ROOT))


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


# A host-bound step on the lent H200 moved within one run (an MoE step 76-140 ms over ten
# steps): the profiled run's step is the median of 30.
TIMED_STEPS = 30
# A family profiled within the budget keeps at least this long for its targets past it: a
# profile whose targets the budget cut compares its two precisions only (on one H200 a
# Mixer's targets, given the 23 s left, timed no round; a family's took 23–90 s).
TARGETS_MIN_S = 120.0


def _bench(options: dict[str, Any], machine: Any, out: Path) -> Any:
    from gpuaudit.bench.context import Profile
    from gpuaudit.bench.runner import run_bench

    return run_bench(["train"], machine=machine, profile=Profile.STANDARD, options=options,
                     step=lambda text: log(out, f"  {text}"))


def case_list(fam: dict[str, Any], batch: int, tiny: bool) -> list[tuple[str, str, str, int]]:
    """(label, model, precision, batch) of every measured target: the recorded precisions
    again (timed here, away from the profiler, as every round's pace control), tf32, bf16 at
    ×0.5 and ×2, bf16 of the size variant, and the recorded precisions at batch 1 (the
    recorded host time's control)."""
    cases = [("bf16", fam["entry"], "bf16", batch), ("fp32", fam["entry"], "fp32", batch),
             ("tf32", fam["entry"], "tf32", batch),
             ("bf16 x0.5", fam["entry"], "bf16", max(1, batch // 2)),
             ("bf16 x2", fam["entry"], "bf16", batch * 2), ("size", fam["size"], "bf16", batch),
             ("bf16 batch 1", fam["entry"], "bf16", 1),
             ("fp32 batch 1", fam["entry"], "fp32", 1)]
    return [c for c in cases if not (tiny and c[2] in ("tf32", "fp32"))]


def measure_cases(out: Path, name: str, batch: int, tiny: bool) -> int:
    """The family's targets timed in rounds in this (fresh) process (`rounds`), into
    OUTDIR/cases/NAME.json. A process that has run torch's profiler keeps paying for it (the
    host slower per launch: a batch-32 BERT step measured there took 51 ms against 33 ms at
    batch 64 before it), so no target is timed in the process that profiled."""
    import torch

    from validation.predict.rounds import time_in_rounds

    fam = {slug(f["entry"]): f for _, f in families()}[name]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # as bench train runs (workloads.plan.target)
    t0 = time.time()

    def save(found: dict[str, Any]) -> None:
        (out / "cases" / f"{name}.json").write_text(
            json.dumps({**found, "wall_s": round(time.time() - t0, 1)}, indent=1))

    save(time_in_rounds(case_list(fam, batch, tiny), device, tiny, lambda t: log(out, t), save))
    return 0


def _read_cases(out: Path, name: str) -> dict[str, Any]:
    path = out / "cases" / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _cases_in_child(out: Path, name: str, batch: int, tiny: bool,
                    timeout_s: float | None = None) -> dict[str, Any]:
    (out / "cases").mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, __file__, "cases", str(out), name, "--batch",
                           str(batch), *(["--tiny"] if tiny else [])], env=_env(),
                          timeout=timeout_s)
    found = _read_cases(out, name)
    if proc.returncode != 0:
        found["error"] = f"the measuring process exited {proc.returncode}"
    return found


def _cases_after(out: Path, name: str, tiny: bool, left_s: float) -> None:
    """The family's targets, timed in a fresh process after its worker has exited, into its
    status (a family whose recording failed has none to compare), within what is left of the
    budget and at least `TARGETS_MIN_S`."""
    path = out / "status" / f"{name}.json"
    info = json.loads(path.read_text())
    recorded = info.get("recorded", {})
    if "error" in recorded:
        return
    if recorded.get("op_profiles") == []:
        # the budget stopped the profile before its first precision: no case can be
        # predicted, so its targets would spend device time on nothing
        log(out, f"family {name}: no op profile recorded ({recorded.get('status')}): "
                 f"targets not timed")
        return
    t0 = time.time()
    try:
        info["cases"] = _cases_in_child(out, name, info["batch"], tiny,
                                        timeout_s=max(left_s, TARGETS_MIN_S))
    except subprocess.TimeoutExpired:
        info["cases"] = {**_read_cases(out, name), "error": "the budget ran out"}
    info["cases_process"] = "fresh, after the profiling process exited"
    info["wall_s"] = round(info.get("wall_s", 0.0) + time.time() - t0, 1)
    path.write_text(json.dumps(info, indent=1))
    log(out, f"family {name}: targets timed in {time.time() - t0:.0f} s")


def record_family(fam: dict[str, Any], out: Path, machine: Any, tiny: bool,
                  cases_too: bool = True, profile: bool = True) -> dict[str, Any]:
    """The family's op profiles (bf16, fp32: one Run) and its targets' steps (measured in a
    process of their own). `profile` False: the targets only."""
    import importlib

    mod, fn = fam["entry"].split(":")
    built = getattr(importlib.import_module(mod), fn)()
    batch = 2 if tiny else int(built.get("batch_size", 32))
    del built
    name = slug(fam["entry"])
    info: dict[str, Any] = {"family": fam["family"], "entry": fam["entry"], "batch": batch,
                            "size_entry": fam["size"], "cases": {}}
    t0 = time.time()
    if profile:
        try:
            run = _bench({"models": [fam["entry"]], "modes": ["bf16", "fp32"],
                          "batch_size": batch, "op_profile": True,
                          "op_profile_traces": str(out / "traces" / name), "parts": ["modes"],
                          "steps": 2 if tiny else TIMED_STEPS,
                          "min_warmup_s": 0.0 if tiny else 0.5,
                          "warmup_steps": 1 if tiny else 3}, machine, out)
            (out / "runs" / f"{name}.json").write_text(run.model_dump_json())
            info["recorded"] = {"wall_s": round(time.time() - t0, 1), "status": run.status,
                                "op_profiles": [p.precision for p in run.op_profiles],
                                "skipped": [m.skipped_reason for m in run.measurements
                                            if m.skipped_reason]}
        except Exception as exc:  # the family's recording failed: its cases cannot be predicted
            info["recorded"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            return info
    if cases_too:
        info["cases"] = _cases_in_child(out, name, batch, tiny)
        info["cases_process"] = "fresh"
    return info


def worker(out: Path, names: list[str], tiny: bool, profiles_only: set[str],
           cases_only: bool = False) -> int:
    from gpuaudit.hw import take_snapshot

    machine = take_snapshot()
    by_name = {slug(f["entry"]): f for _, f in families()}
    for name in names:
        t0 = time.time()
        log(out, f"family {name}")
        info = record_family(by_name[name], out, machine, tiny,
                             cases_too=name not in profiles_only, profile=not cases_only)
        info["wall_s"] = round(time.time() - t0, 1)
        (out / "status" / f"{name}.json").write_text(json.dumps(info, indent=1))
        log(out, f"family {name} done in {info['wall_s']} s")
    return 0


# --- the parent: rates, then one worker process a family -------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), str(ZOO),
                                                    env.get("PYTHONPATH")) if p)
    return env


def record(out: Path, which: str | None, budget_s: float, tiny: bool,
           only: list[str] | None = None, profiles_only: set[str] | None = None,
           rates: bool = True, cases_only: bool = False, pin: int | None = None) -> int:
    t_start = time.time()
    for sub in ("runs", "status", "traces"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    if pin is not None:
        # every process of the recording on one vCPU, inherited by each child: a launch-bound
        # step ran at about half its free time so on the lent H100 (validation/predict/
        # pin_pace.py); the profiling and the fresh processes then share that placement
        os.sched_setaffinity(0, {pin})
        log(out, f"pinned to vCPU {pin}")
    if not tiny and rates and not cases_only:
        log(out, "rates: bench matmul memory (quick)")
        rates = subprocess.run([sys.executable, "-m", "gpuaudit", "bench", "matmul", "memory",
                                "--json", "--no-save"], capture_output=True, text=True,
                               env=_env(), timeout=120)
        (out / "rates.json").write_text(rates.stdout)
        log(out, f"rates: exit {rates.returncode} ({time.time() - t_start:.0f} s)")
    todo = only or [slug(f["entry"]) for _, f in families(which)]
    profiles_only = profiles_only or set()
    while todo:
        left = budget_s - (time.time() - t_start)
        if left < 20:
            log(out, f"budget spent: not recorded {', '.join(todo)}")
            break
        # one family a process: a profile's cost stays with the process that ran it. The
        # worker profiles only; its targets are timed once it has exited, so that no process
        # that ran the profiler (nor its idle CUDA context) is alive beside them.
        proc = subprocess.Popen([sys.executable, __file__, "worker", str(out), todo[0],
                                 *(["--tiny"] if tiny else []), "--profiles-only", todo[0],
                                 *(["--cases-only"] if cases_only else [])], env=_env(),
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
        if todo[0] not in done:
            log(out, f"worker exit {proc.returncode} in {todo[0]}: skipped")
            done.add(todo[0])
        elif todo[0] not in profiles_only:
            _cases_after(out, todo[0], tiny, budget_s - (time.time() - t_start))
        todo = [n for n in todo if n not in done]
    (out / "status.json").write_text(json.dumps(
        {"wall_s": round(time.time() - t_start, 1), "not_recorded": todo, "pinned_cpu": pin},
        indent=1))
    return 0


# --- compare: each case predicted from one recording, beside the run that measured it -------

# (label, source precision, change, the measurement: the target timed alone, or for the
# recorded precisions, where a recording has no such timing, the profiled run's step)
CASES = (
    ("bf16 → fp32", "bf16", {"precision": "fp32"}, ("profile", "fp32")),
    ("bf16 → tf32", "bf16", {"precision": "tf32"}, ("case", "tf32")),
    ("fp32 → bf16", "fp32", {"precision": "bf16"}, ("profile", "bf16")),
    ("fp32 → tf32", "fp32", {"precision": "tf32"}, ("case", "tf32")),
    ("batch ×0.5", "bf16", {"batch": 0.5}, ("case", "bf16 x0.5")),
    ("batch ×2", "bf16", {"batch": 2.0}, ("case", "bf16 x2")),
    ("size", "bf16", {"model": True}, ("case", "size")),
)


def _predict_case(run: Any, prof: Any, change: dict[str, Any], status: dict[str, Any],
                  rates: Any, specs: Any, unpaired: bool = False) -> Any:
    from gpuaudit.predict import Change, load_profile, predict

    profile = load_profile(run, prof.workload)
    if unpaired:  # the held rounds' median as the host's base, as if timed apart
        profile = dataclasses.replace(profile, record=profile.record.model_copy(
            update={"host_held_paired": False}))
    if "batch" in change:
        return predict(profile, rates, Change(batch=max(1, round(prof.batch * change["batch"]))),
                       specs)
    if "model" in change:
        return predict(profile, rates, Change(model=status["size_entry"]), specs)
    return predict(profile, rates, Change(precision=change["precision"]), specs)


def predicted_fields(p: Any, measured: float, source_ms: float) -> dict[str, Any]:
    """A case's row as its prediction `p` fills it, beside its `measured` samples/s (its
    source's profiled step `source_ms`)."""
    return {"predicted": p.samples_per_s, "low": p.samples_per_s_low,
            "high": p.samples_per_s_high, "band_pct": p.uncertainty_pct, "step_ms": p.step_ms,
            "measured_from_step_ms": source_ms, "notes": list(p.notes),
            "to": f"{p.target.model}/{p.target.mode} batch {p.target.batch_per_gpu}",
            "classes": {c.op_class: [round(c.measured_ms, 3), round(c.predicted_ms, 3)]
                        for c in p.classes},
            "error_pct": 100 * (p.samples_per_s - measured) / measured,
            "in_band": p.samples_per_s_low <= measured <= p.samples_per_s_high}


def _found(out: Path, name: str) -> tuple[Any, dict[str, Any]] | None:
    """A folder's run of the family (None in a targets-only recording) and its status."""
    from gpuaudit.model import load_run

    status_file, run_file = out / "status" / f"{name}.json", out / "runs" / f"{name}.json"
    if not status_file.exists():
        return None
    run = load_run(run_file.read_text()) if run_file.exists() else None
    return run, json.loads(status_file.read_text())


def _caught(prof: Any) -> bool:
    """Whether an op profile holds device time: one whose profiler recorded no kernels (see
    gpuaudit.predict.checks) is passed over for an earlier folder's."""
    return any(c.ms_per_step > 0 for c in prof.classes)


def compare(outs: list[Path], rates_path: str | None, which: str | None = None,
            unpaired: bool = False) -> int:
    """Each case predicted from its recording beside its measurement. With several recording
    folders, the source profile comes from the last one that holds it, and the measurement
    from the last one that timed the target (a targets-only recording, `--cases-only`, times
    them again beside an earlier profile); the folders must be of one machine model.
    `unpaired`: held rounds timed beside the rounds at batch 1 read as if timed apart (their
    median the host's base), written apart, to compare the two readings on one recording."""
    from gpuaudit.errors import GpuauditError
    from gpuaudit.model import load_run
    from gpuaudit.predict import machine_rates
    from gpuaudit.specs.catalog import load_catalog
    from validation.predict.rounds import judged, timing_controls
    from validation.predict.zoo_tables import control_table, table

    specs = load_catalog()
    rates_file = Path(rates_path or outs[0] / "rates.json")
    if not rates_file.is_file():  # a --tiny recording or one made with --no-rates has none
        print(f"compare: no {rates_file}: give the machine's rates with --rates RUN.json",
              file=sys.stderr)
        return 2
    rates_run = load_run(rates_file.read_text())
    rates = machine_rates(rates_run, specs)
    if rates is None:
        print("compare: the rates run has no usable matmul and memory figures")
        return 2
    rows: list[dict[str, Any]] = []
    controls: list[dict[str, Any]] = []
    for kind, fam in families(which):
        name = slug(fam["entry"])
        found = [(i, f) for i, out in enumerate(outs) if (f := _found(out, name)) is not None]
        if not any(run is not None for _, (run, _s) in found):
            rows.append({"set": kind, "family": fam["family"], "case": "all",
                         "error": "not recorded"})
            continue
        controls += timing_controls(fam["family"], found)
        for label, src, change, (where, key) in CASES:
            row: dict[str, Any] = {"set": kind, "family": fam["family"], "case": label}
            source = next(((i, run, status) for i, (run, status) in reversed(found)
                           if run is not None and any(p.precision == src and _caught(p)
                                                      for p in run.op_profiles)), None)
            # a target timed in a process of its own first, the profiled run's timing after
            timed = next(((j, status["cases"],
                           str(status.get("cases_process", "")).startswith("fresh"))
                          for j, (_r, status) in reversed(found)
                          if status["cases"].get(key, {}).get("samples_per_s")), None)
            if source is not None and timed is None and where == "profile":
                meas = next((p for p in source[1].op_profiles if p.precision == key), None)
                timed = (source[0], {key: {"samples_per_s": meas.batch / (meas.step_ms / 1e3)}},
                         False) if meas else None
            if source is None or timed is None:
                row["error"] = "no recording holds both its source and its measurement"
                rows.append(row)
                continue
            i, run, status = source
            profs = {p.precision: p for p in run.op_profiles}
            row.update({"recording": outs[i].parent.name, "from": profs[src].workload,
                        "measured_in": outs[timed[0]].parent.name, "measured_fresh": timed[2],
                        **judged(timed[1], key, src, profs[src])})
            measured = row["measured"]
            try:
                p = _predict_case(run, profs[src], change, status, rates, specs, unpaired)
            except (GpuauditError, ValueError, KeyError, TypeError) as exc:
                row["refused"] = str(exc)[:300]
                rows.append(row)
                continue
            row.update(predicted_fields(p, measured, profs[src].step_ms))
            rows.append(row)
    doc = {"rates": {"run_id": rates.run_id, "basis": list(rates.roofs.basis)}, "rows": rows,
           "controls": controls}
    tail = (f"-{which}" if which else "") + ("-unpaired" if unpaired else "")
    out = outs[-1]
    (out / f"results{tail}.json").write_text(json.dumps(doc, indent=1))
    text = table(rows) + control_table(controls)
    (out / f"table{tail}.md").write_text(text)
    print(text)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("record", "worker", "cases", "compare", "table", "pack",
                                     "reparse", "merge"))
    ap.add_argument("out")
    ap.add_argument("names", nargs="*")
    ap.add_argument("--set", choices=("held_out", "development"))
    ap.add_argument("--budget-s", type=float, default=540.0)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--rates")
    ap.add_argument("--only", help="families to record, in this order (NAME,NAME)")
    ap.add_argument("--profiles-only", default="",
                    help="families whose target cases are not measured again (NAME,NAME)")
    ap.add_argument("--no-rates", action="store_true")
    ap.add_argument("--all", action="store_true",
                    help="table: every recording's tables as published, not the current ones")
    ap.add_argument("--unpaired", action="store_true",
                    help="compare: paired held rounds read as their median (results-*-unpaired)")
    ap.add_argument("--cases-only", action="store_true",
                    help="record: the targets only, no profiles (compare with --also)")
    ap.add_argument("--batch", type=int, help="cases: the family's batch")
    ap.add_argument("--pin", type=int, metavar="CPU",
                    help="record: every process of the recording on this one vCPU")
    ap.add_argument("--also", action="append", default=[],
                    help="compare: a later recording folder, preferred where it holds a case")
    args = ap.parse_args()
    out = Path(args.out)
    skip_cases = {n for n in args.profiles_only.split(",") if n}
    if args.what == "worker":
        return worker(out, args.names, args.tiny, skip_cases, args.cases_only)
    if args.what == "cases":
        return measure_cases(out, args.names[0], args.batch, args.tiny)
    if args.what == "record":
        known = {slug(f["entry"]) for _, f in families(args.set)}
        if unknown := [n for n in (args.only or "").split(",") + sorted(skip_cases)
                       if n and n not in known]:
            ap.error(f"--only/--profiles-only: no family {', '.join(unknown)} in "
                     f"{args.set or 'either set'} (families: {', '.join(sorted(known))})")
        if args.pin is not None and args.pin not in os.sched_getaffinity(0):
            ap.error(f"--pin {args.pin}: not a vCPU this process may run on "
                     f"({', '.join(map(str, sorted(os.sched_getaffinity(0))))})")
        return record(out, args.set, args.budget_s, args.tiny,
                      args.only.split(",") if args.only else None, skip_cases,
                      not args.no_rates, args.cases_only, args.pin)
    if args.what == "reparse":
        from validation.predict.zoo_files import reparse

        return reparse(out)
    if args.what == "table":
        from validation.predict.zoo_tables import show

        return show(out, args.all)
    if args.what == "pack":
        from validation.predict.zoo_files import pack

        return pack(out, Path(args.names[0]))
    if args.what == "merge":
        from validation.predict.zoo_files import merge

        if len(args.names) != 2:
            ap.error("merge PUBLISHED.json RESULTS.json LABEL")
        return merge(out, Path(args.names[0]), args.names[1])
    return compare([out, *map(Path, args.also)], args.rates, args.set, args.unpaired)


if __name__ == "__main__":
    sys.exit(main())
