"""The `predict` entry's comparisons: each prediction made from one phase's recorded run beside
the run that measured it (validation/predict/run.py records the phases on a GPU). Importable
(the replay tests read recorded runs through it) and a command that replays recorded runs:

    python3 validation/predict/compare.py RUNS.json [RUNS.json ...] [--label NAME ...]
        [--drop-contention-marks N]   # the run (1-based) whose rates were wrongly marked

prints one table: each case's error per run (predicted vs measured samples/s).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
H200_RATES = ROOT / "tests" / "fixtures" / "predict" / "h200-2gpu-bench-quick.json"


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




def replay_table(labels: list[str], rows: list[list[dict[str, Any]]]) -> str:
    """One row per case, one column per run: the error, marked where it is over 10 %
    (inside the band or not); blank where the run does not hold the case."""
    order: list[str] = []
    for run_rows in rows:
        order += [r["case"] for r in run_rows if r["case"] not in order
                  and "error_pct" in r]
    out = ["| case | " + " | ".join(labels) + " |",
           "| --- |" + " --- |" * len(labels)]
    for case in order:
        cells = []
        for run_rows in rows:
            r = next((r for r in run_rows if r["case"] == case and "error_pct" in r), None)
            if r is None:
                cells.append("")
                continue
            mark = "" if abs(r["error_pct"]) <= 10 else (
                " (in band)" if r["in_band"] else " (NO)")
            cells.append(f"{r['error_pct']:+.1f} %{mark}".replace("-", "−"))
        out.append(f"| {case} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def recorded_on(docs: dict[str, Any]) -> str:
    """When, on which GPUs and driver the phases of one runs.json were recorded."""
    run = next((r for r in docs.values() if r), None)
    if run is None:
        return "no phase recorded"
    gpus = [g["name"] for g in run["machine"].get("gpus", [])]
    kinds = ", ".join(f"{gpus.count(k)}× {k}" for k in sorted(set(gpus))) or "no GPU"
    return (f"recorded {run['started_at'][:10]} on {kinds}, driver "
            f"{run['machine'].get('driver_version')}; phases "
            + ", ".join(k for k, v in docs.items() if v))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="validation/predict/compare.py")
    ap.add_argument("runs", nargs="+", type=Path, help="runs.json of a `predict` entry's run")
    ap.add_argument("--label", action="append", default=[], help="a column's name, in order")
    ap.add_argument("--drop-contention-marks", type=int, action="append", default=[],
                    help="the run (1-based) whose rates phase's contention marks are removed")
    a = ap.parse_args(argv)
    labels = a.label or [p.name.removesuffix(".json").removesuffix("-runs") for p in a.runs]
    if len(labels) != len(a.runs):
        print("compare: one --label per run", file=sys.stderr)
        return 2
    all_rows, lines = [], []
    for i, path in enumerate(a.runs, 1):
        try:
            docs = json.loads(path.read_text())["runs"]
        except (OSError, ValueError, KeyError) as exc:
            print(f"compare: {path}: not a predict entry's runs.json ({exc})", file=sys.stderr)
            return 2
        if i in a.drop_contention_marks and docs.get("R"):
            for m in docs["R"]["measurements"]:
                m["contention"] = None
        all_rows.append(compare(docs, 1)[0])
        lines.append(f"- {labels[i - 1]}: {recorded_on(docs)}" + (
            " (its rates' contention marks removed: the GPM reading of that day counted our "
            "own kernels)" if i in a.drop_contention_marks else ""))
    print("Each case predicted from one phase's recorded run and compared with the run that "
          "measured it (samples/s, error of the prediction):\n\n" + "\n".join(lines) + "\n")
    print(replay_table(labels, all_rows), end="")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    sys.exit(main())
