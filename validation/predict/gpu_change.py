"""`gpuaudit predict --gpu` measured: zoo families recorded on an H100 SXM and on an H200 SXM,
each predicted on the other GPU from one recording (its own machine's matmul and memory
rates; the other GPU's from its datasheet × the efficiencies measured here, as `predict`
does without a run of it) beside the step measured there.

Every step recorded on both GPUs is predicted, from each recording kept as a fixture. A
step is scored where the device binds it on both GPUs: its step at batch 1 (the host's time
to issue a step, with the device's at batch 1) under 0.8 of its step at the recorded batch
on each, so at least a fifth of it grows with the work (predict's own threshold for saying
a step follows its host). The others follow their loan's host, not the GPU: `predict`
keeps the recorded host (and says so), and the two loans' hosts ran batch-1 steps 1.7–2.8×
apart (`predict-zoo-h100`); they are listed apart, with that reading.

The measurement on each GPU is the median over every recording of the zoo whose timing
controls kept the family's step (`tests/fixtures/predict/zoo-results.json` on the H200,
`zoo-results-h100.json` on the H100).

H200 recordings of families not yet recorded on the H100 (AHEAD) are predicted there ahead
of any measurement and the figures kept (`register`); once those families are recorded on
the H100, the table sets the kept figures beside the steps measured there.

    PYTHONPATH=src python3 validation/predict/gpu_change.py      # prints the markdown tables
    PYTHONPATH=src python3 validation/predict/gpu_change.py register "WHEN, ON WHAT"
"""

from __future__ import annotations

import functools
import json
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
from gpuaudit.predict.engine import HOST_BOUND_GPU_NOTE  # noqa: E402

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


# The step at batch 1 ÷ the step at the recorded batch at or above which the host binds it
# (`predict.engine.HOST_BOUND_GPU_NOTE` as a share of the step the device does not hold).
HOST_BINDS = 1 - HOST_BOUND_GPU_NOTE

FAMILIES = {  # the zoo's family name and workload by the fixture's module name
    "bert": ("BERT on nn.TransformerEncoder (post-norm)", "bert-encoder"),
    "convnext": ("ConvNeXt", "convnext-s"),
    "recsys": ("DLRM-style recommender (EmbeddingBag)", "dlrm"),
    "mixer": ("MLP-Mixer S/16", "mixer-s16"), "unet": ("U-Net segmentation CNN", "unet-seg"),
    "moe": ("mixture-of-experts decoder", "moe-8x"),
    "lstm": ("bidirectional LSTM tagger", "lstm-tagger"),
    "mobilenet": ("MobileNetV2 (depthwise, batch norm)", "mobilenet-v2"),
    "diffusion": ("diffusion U-Net (GroupNorm, nn.MultiheadAttention)", "diffusion-unet"),
    "cnn": ("ResNet-18 at 64 px (batch norm)", "resnet18-64px"),
    "mlp": ("deep MLP (tabular)", "tabular-mlp")}
H100_RUNS = ("bert", "convnext", "recsys", "mixer", "unet", "moe", "lstm", "mobilenet",
             "diffusion", "cnn", "mlp")
# The H200 recordings kept as fixtures of the families recorded on the H100 (the latest
# where there are two); of the H100's, each family's first.
H200_RUNS = {"convnext": "convnext-h200-run", "recsys": "recsys-held-h200-run",
             "unet": "unet-h200-run", "lstm": "lstm-held-h200-run",
             "mobilenet": "mobilenet-held-h200-run"}
# H200 recordings of families not yet recorded on the H100: predicted there before any
# measurement, the figures kept in REGISTERED (`register`), compared once recorded.
AHEAD = {"diffusion": "diffusion-held-h200-run", "cnn": "cnn-run", "mlp": "mlp-run"}
REGISTERED = PREDICT / "gpu-change-registered.json"
# predict's own note that the step it kept follows its host (`HOST_BOUND_GPU_NOTE`)
HOST_WAITS = re.compile(r"the device waits on the host (\d+)% of this step")


def _case(m: str, run: str, precision: str, src: str, dst: str) -> Case:
    family, workload = FAMILIES[m]
    return Case(family, run, f"{workload}/{precision}", src, dst)


def _cases() -> tuple[Case, ...]:
    runs = [(m, f"{m}-held-h100-run", "h100-sxm", "h200-sxm") for m in H100_RUNS] + \
        [(m, run, "h200-sxm", "h100-sxm") for m, run in H200_RUNS.items()]
    return tuple(_case(m, run, prec, src, dst)
                 for m, run, src, dst in runs for prec in ("fp32", "bf16"))


AHEAD_CASES = tuple(_case(m, run, prec, "h200-sxm", "h100-sxm")
                    for m, run in AHEAD.items() for prec in ("fp32", "bf16"))
CASES = _cases()


@functools.cache
def _all_controls(gpu: str) -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(RESULTS[gpu].read_text())["controls"])


def _controls(family: str, gpu: str, precision: str) -> list[dict[str, Any]]:
    return [c for c in _all_controls(gpu) if c["family"] == family
            and c["precision"] == precision and c.get("profiled_run_ms")]


def measured_ms(family: str, gpu: str, precision: str = "fp32") -> tuple[float, int]:
    """The family's step on `gpu` as the zoo's recordings timed it (the median of their
    profiled runs) and how many recordings timed it."""
    steps = [c["profiled_run_ms"] for c in _controls(family, gpu, precision)]
    if not steps:
        raise LookupError(f"no recording of {family} {precision} on {gpu}")
    return statistics.median(steps), len(steps)


def batch1_share(family: str, gpu: str, precision: str) -> float | None:
    """The step at batch 1 ÷ the step at the recorded batch on `gpu` (the median over its
    recordings): near 1, the host's issuing binds the step."""
    got = [c["host_recorded_ms"] / c["profiled_run_ms"]
           for c in _controls(family, gpu, precision) if c.get("host_recorded_ms")]
    return statistics.median(got) if got else None


def batch1_shares(family: str, gpus: tuple[str, str], precision: str) -> list[float | None]:
    return [batch1_share(family, gpu, precision) for gpu in gpus]


@functools.cache
def _specs_and_rates(gpu: str) -> tuple[Any, Any]:
    """The spec catalog and `gpu`'s measured rates, read once for every case."""
    from gpuaudit.model.schema import read_run
    from gpuaudit.predict import machine_rates
    from gpuaudit.specs.catalog import load_catalog

    specs = load_catalog()
    rates = machine_rates(read_run(RATES[gpu]), specs)
    assert rates is not None, f"{RATES[gpu]} holds no rates"
    return specs, rates


@functools.cache
def _run(name: str) -> Any:
    from gpuaudit.model.schema import read_run

    return read_run(next((PREDICT / "zoo").glob(f"{name}.json*")))


def predicted(case: Case) -> Any:
    from gpuaudit.predict import Change, load_profile, predict

    specs, rates = _specs_and_rates(case.source)
    return predict(load_profile(_run(case.run), case.workload), rates,
                   Change(gpu=case.target), specs)


def against(row: dict[str, Any]) -> dict[str, Any]:
    """A predicted step (`family`, `workload`, `from`, `to`, `predicted_ms`, `low_ms`,
    `high_ms`) beside the step measured on its target GPU; LookupError where none was."""
    precision = row["workload"].split("/")[1]
    got, n = measured_ms(row["family"], row["to"], precision)
    shares = batch1_shares(row["family"], (row["from"], row["to"]), precision)
    return {**row, "measured_ms": got, "recordings": n,
            "error_pct": 100 * (row["predicted_ms"] / got - 1),
            "in_band": row["low_ms"] <= got <= row["high_ms"], "batch1_share": shares,
            "device_bound": all(s is not None and s < HOST_BINDS for s in shares)}


def rows() -> list[dict[str, Any]]:
    out = []
    for case in CASES:
        p = predicted(case)
        out.append(against({"family": case.family, "workload": case.workload,
                            "from": case.source, "to": case.target,
                            "recorded_ms": p.measured_step_ms, "predicted_ms": p.step_ms,
                            "low_ms": p.step_ms_low, "high_ms": p.step_ms_high}))
    return out


def _measured_cells(r: dict[str, Any]) -> str:
    """The measured step, the error and the steps at batch 1, as the tables show them."""
    return (f"{r['measured_ms']:.2f} ms ({r['recordings']}) | **{r['error_pct']:+.1f} %**"
            f"{'' if r['in_band'] else ' (out of band)'} | "
            + " / ".join(f"{x:.2f}" if x is not None else "—" for x in r["batch1_share"]))


def _table(found: list[dict[str, Any]]) -> list[str]:
    lines = ["| family | step | recorded on | its step | predicted on | predicted | band | "
             "measured there | error | step at batch 1 ÷ step, each GPU |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in found:
        lines.append(
            f"| {r['family']} | {r['workload'].split('/')[1]} | {r['from']} | "
            f"{r['recorded_ms']:.2f} ms | {r['to']} | {r['predicted_ms']:.2f} ms | "
            f"{r['low_ms']:.1f}–{r['high_ms']:.1f} | {_measured_cells(r)} |")
    return lines


def table(found: list[dict[str, Any]]) -> str:
    scored = [r for r in found if r["device_bound"]]
    host = [r for r in found if not r["device_bound"]]
    within = sum(abs(r["error_pct"]) <= 10 for r in scored)
    inside = sum(r["in_band"] for r in scored)
    return (f"`gpuaudit predict --gpu` measured on the steps the device binds on both GPUs: "
            f"{within} of {len(scored)} within 10 %, {inside} inside their band (the step "
            "in ms; measured there: the median of the zoo's recordings that timed it, how "
            "many in brackets; a step is the device's where its step at batch 1 is under "
            f"{HOST_BINDS:.1f} of it on both GPUs):\n\n" + "\n".join(_table(scored)) +
            f"\n\nThe {len(host)} steps the host binds on either GPU, which follow that "
            "loan's host, not the GPU (`predict` keeps the recorded host and says so):\n\n" +
            "\n".join(_table(host)) + "\n")


def register(when: str) -> dict[str, Any]:
    """The AHEAD steps predicted on the other GPU, to keep before any is measured there."""
    out = []
    for case in AHEAD_CASES:
        p = predicted(case)
        out.append({"family": case.family, "run": case.run, "workload": case.workload,
                    "from": case.source, "to": case.target, "predicted_ms": p.step_ms,
                    "low_ms": p.step_ms_low, "high_ms": p.step_ms_high,
                    "notes": list(p.notes)})
    return {"about": f"predicted {when}, before any measurement of these steps there",
            "rows": out}


def registered() -> str:
    """The kept figures beside the step measured there, where it has been."""
    doc = json.loads(REGISTERED.read_text())
    lines = ["| family | step | predicted on | predicted | band | measured there | error | "
             "step at batch 1 ÷ step, each GPU | predict said |", "|" + " --- |" * 9]
    for r in doc["rows"]:
        try:
            seen = _measured_cells(against(r))
        except LookupError:
            seen = "not yet recorded | — | —"
        waits = next((m[1] for n in r["notes"] if (m := HOST_WAITS.search(n))), None)
        lines.append(f"| {r['family']} | {r['workload'].split('/')[1]} | {r['to']} | "
                     f"{r['predicted_ms']:.2f} ms | {r['low_ms']:.1f}–{r['high_ms']:.1f} | "
                     f"{seen} | "
                     f"{f'its device waits on the host {waits} %' if waits else '—'} |")
    return (f"Steps recorded on the H200 only, {doc['about']} (the figures kept in "
            f"{REGISTERED.relative_to(ROOT)}):\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["register"]:  # register WHEN: keeps AHEAD's figures
        REGISTERED.write_text(json.dumps(register(sys.argv[2]), indent=1) + "\n")
    else:
        print(table(rows()) + "\n" + registered(), end="")
