"""`gpuaudit predict --gpu` measured: zoo families recorded on an H100 SXM and on an H200 SXM,
each predicted on the other GPU from one recording (its own machine's matmul and memory
rates; the other GPU's from its datasheet × the efficiencies measured here, as `predict`
does without a run of it) beside the step measured there.

The cases are the steps the device binds on both (fp32 at the recorded batch): a host-bound
step moves with the host, not the GPU, and `predict` keeps the recorded host (it says so),
so BERT's and ConvNeXt's bf16 steps and the DLRM's are left out; the H100's lent host ran
their steps at batch 1 1.7–2.8× slower than the H200's (`predict-zoo-h100`).

The measurement on the H200 is the median over every recording of the zoo whose timing
controls kept the family's fp32 step (`tests/fixtures/predict/zoo-results.json`: 11 of BERT,
within 0.3 % of it; 10 of ConvNeXt, within 0.4 % but the 8th's, 2.1 % under); on the H100
the one recording's (`zoo-results-h100.json`).

    PYTHONPATH=src python3 validation/predict/gpu_change.py      # prints the markdown table
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
PREDICT = ROOT / "tests" / "fixtures" / "predict"
RATES = {"h100-sxm": PREDICT / "h100-1gpu-bench-quick.json.gz",
         "h200-sxm": PREDICT / "h200-1gpu-bench-quick.json"}
RESULTS = {"h100-sxm": PREDICT / "zoo-results-h100.json",
           "h200-sxm": PREDICT / "zoo-results.json"}


@dataclass(frozen=True)
class Case:
    family: str  # as the zoo's results name it
    run: str  # tests/fixtures/predict/zoo/RUN.json.gz
    workload: str
    source: str  # the GPU it was recorded on
    target: str


CASES = (
    Case("BERT on nn.TransformerEncoder (post-norm)", "bert-held-h100-run",
         "bert-encoder/fp32", "h100-sxm", "h200-sxm"),
    Case("ConvNeXt", "convnext-held-h100-run", "convnext-s/fp32", "h100-sxm", "h200-sxm"),
    Case("ConvNeXt", "convnext-h200-run", "convnext-s/fp32", "h200-sxm", "h100-sxm"),
)


def measured_ms(family: str, gpu: str, precision: str = "fp32") -> tuple[float, int]:
    """The family's step on `gpu` as the zoo's recordings timed it (the median of their
    profiled runs) and how many recordings timed it."""
    controls = json.loads(RESULTS[gpu].read_text())["controls"]
    steps = [c["profiled_run_ms"] for c in controls
             if c["family"] == family and c["precision"] == precision
             and c.get("profiled_run_ms")]
    if not steps:
        raise LookupError(f"no recording of {family} {precision} on {gpu}")
    return statistics.median(steps), len(steps)


def predicted(case: Case) -> Any:
    from gpuaudit.model.schema import read_run
    from gpuaudit.predict import Change, load_profile, machine_rates, predict
    from gpuaudit.specs.catalog import load_catalog

    specs = load_catalog()
    run = read_run(PREDICT / "zoo" / f"{case.run}.json.gz")
    rates = machine_rates(read_run(RATES[case.source]), specs)
    assert rates is not None, f"{RATES[case.source]} holds no rates"
    return predict(load_profile(run, case.workload), rates, Change(gpu=case.target), specs)


def rows() -> list[dict[str, Any]]:
    out = []
    for case in CASES:
        p = predicted(case)
        got, n = measured_ms(case.family, case.target)
        src, _ = measured_ms(case.family, case.source)
        out.append({"family": case.family, "workload": case.workload, "from": case.source,
                    "to": case.target, "recorded_ms": p.measured_step_ms,
                    "source_median_ms": src, "predicted_ms": p.step_ms,
                    "low_ms": p.step_ms_low, "high_ms": p.step_ms_high, "measured_ms": got,
                    "recordings": n, "error_pct": 100 * (p.step_ms / got - 1),
                    "in_band": p.step_ms_low <= got <= p.step_ms_high})
    return out


def table(found: list[dict[str, Any]]) -> str:
    lines = ["| family | step | recorded on | its step | predicted on | predicted | band | "
             "measured there | error |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in found:
        lines.append(
            f"| {r['family']} | {r['workload'].split('/')[1]} | {r['from']} | "
            f"{r['recorded_ms']:.2f} ms | {r['to']} | {r['predicted_ms']:.2f} ms | "
            f"{r['low_ms']:.1f}–{r['high_ms']:.1f} | {r['measured_ms']:.2f} ms "
            f"({r['recordings']}) | **{r['error_pct']:+.1f} %**"
            f"{'' if r['in_band'] else ' (out of band)'} |")
    within = sum(abs(r["error_pct"]) <= 10 for r in found)
    return (f"`gpuaudit predict --gpu` measured, {within} of {len(found)} within 10 % "
            "(the step in ms; measured there: the median of the zoo's recordings that timed "
            "it, how many in brackets):\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    print(table(rows()), end="")
