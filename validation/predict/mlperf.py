"""`gpuaudit predict` across GPU models, on paper: NVIDIA's published MLPerf Inference v4.0
results on H200 taken as the recorded run, `gpuaudit predict`'s GPU change (the same engine,
`--gpu h100-sxm`) applied to them, and the prediction set beside NVIDIA's published H100
result for the same benchmark, scenario and software round.

    PYTHONPATH=src python3 validation/predict/mlperf.py        # prints the markdown table

What is known (every figure below names its file in mlcommons/inference_results_v4.0,
closed/NVIDIA): the results (`results/<system>/<benchmark>/Offline/performance/run_1/
mlperf_log_summary.txt`), each system's batch, precision and parallelism
(`configs/<benchmark>/Offline/__init__.py`), Llama 2 70B's output tokens per sample (the
H200 summary's tokens/s ÷ samples/s). What is assumed, and swept: the mean input length (the
logs do not give it) and GPT-J's mean output (69 tokens, from a v4.1 GPT-J summary's
inferred tokens/s ÷ samples/s). The step of a sample: its prefill and decode matmuls (2 FLOPs
per weight per token, at the fp8 matmul rate measured on our H200) and its decode traffic (the
weights once per decode step shared by the batch, plus its KV cache at the mean context, at
the memory rate measured on our H200), both classes scaled by one factor so that they add up
to the published H200 time per sample. The prediction then moves that step to the H100 SXM:
matmuls at its datasheet fp8 peak × the efficiency measured here (the same peak as the H200's:
the same time), traffic at its bandwidth (Habitat's γ = 1: 4800 → 3350 GB/s).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
RATES = ROOT / "tests" / "fixtures" / "predict" / "h200-2gpu-bench-quick.json"
V40 = "mlcommons/inference_results_v4.0, closed/NVIDIA/results"


@dataclass(frozen=True)
class Case:
    name: str
    gpus: int
    weights_gb: float  # fp8 weights, one byte per parameter
    matmul_params: float
    kv_bytes_per_token: float  # fp8 KV cache: 2 × layers × KV heads × head size
    batch: int  # the H200 system's gpu_batch_size (per engine)
    gpus_per_engine: int
    inputs: tuple[int, ...]  # mean input tokens, swept (not published)
    output: float  # mean output tokens
    h200: float  # published samples/s, all GPUs
    h100: float
    source_h200: str
    source_h100: str
    h100_config: str


CASES = (
    Case("GPT-J 6B, Offline, 1 GPU", 1, 6.05, 5.84e9, 2 * 28 * 4096, 396, 1, (600, 900, 1200),
         69.0, 30.7624, 31.0737,
         f"{V40}/H200-SXM-141GBx1_TRT/gptj-99 (30.7624 samples/s)",
         f"{V40}/DGX-H100_H100-SXM-80GBx1_TRT/gptj-99.9 (31.0737; the 99 log is not in the "
         "repository: NVIDIA's 99.9 config is the 99 one)",
         "batch 192, fp8, TP1"),
    Case("GPT-J 6B, Offline, 8 GPUs", 8, 6.05, 5.84e9, 2 * 28 * 4096, 396, 1, (600, 900, 1200),
         69.0, 241.285, 239.895,
         f"{V40}/H200-SXM-141GBx8_TRT/gptj-99.9 (241.285 samples/s)",
         f"{V40}/DGX-H100_H100-SXM-80GBx8_TRT/gptj-99.9 (239.895)", "batch 192, fp8, TP1"),
    Case("Llama 2 70B, Offline, 8 GPUs", 8, 69.0, 68.7e9, 2 * 80 * 8 * 128, 806, 1,
         (200, 300, 500), 27738.3 / 94.6223, 94.6223, 74.699,
         f"{V40}/H200-SXM-141GBx8_TRT/llama2-70b-99.9 (94.62 samples/s, 27,738 tokens/s)",
         f"{V40}/DGX-H100_H100-SXM-80GBx8_TRT/llama2-70b-99.9 (74.70 samples/s, 21,806 "
         "tokens/s)", "batch 896 per TP2 pair, fp8"),
)


def sample_profile(case: Case, inputs: int, rates: object):
    """One sample's step on the H200, as a recorded profile would hold it."""
    from gpuaudit.predict.engine import memory_seconds
    from gpuaudit.predict.profile import OpWork, StepProfile

    roofs = rates.roofs  # type: ignore[attr-defined]
    flops = 2 * case.matmul_params * (inputs + case.output)
    context = inputs + case.output / 2
    traffic = case.output * (case.weights_gb * 1e9 / case.batch
                             + case.kv_bytes_per_token * context)
    gemm = OpWork(cls="gemm", ms=0.0, flops=flops, bytes=0.0)
    mem = OpWork(cls="elementwise", ms=0.0, flops=0.0, bytes=traffic)
    ideal_gemm = flops / (roofs.matmul("fp8") * 1e12) * 1e3
    ideal_mem = memory_seconds(mem, roofs) * 1e3
    per_gpu = case.h200 / case.gpus  # samples/s of one GPU
    step = 1e3 / per_gpu
    scale = step / (ideal_gemm + ideal_mem)
    classes = {"gemm": gemm.with_(ms=ideal_gemm * scale),
               "elementwise": mem.with_(ms=ideal_mem * scale)}
    return StepProfile(
        run_id="mlperf-v4.0-h200", workload=f"{case.name}/fp8", model=case.name, mode="fp8",
        precision="fp8", compiled=False, batch=1, tokens_per_sample=None, step_ms=step,
        busy_ms=step, idle_ms=0.0, phases_ms={}, grad_bytes=0, param_count=0,
        ops_per_step=0, buckets=(), classes=classes, model_params={}, device="cuda",
        kernel_source="MLPerf v4.0 published result, split by the roofline",
        # what one engine holds: its weights share and its batch's KV cache at the context
        peak_memory_gb=(case.weights_gb / case.gpus_per_engine
                        + case.batch * case.kv_bytes_per_token * context / 1e9))


def main() -> int:
    from gpuaudit.model import load_run
    from gpuaudit.predict import Change, machine_rates, predict
    from gpuaudit.specs.catalog import load_catalog

    specs = load_catalog()
    rates = machine_rates(load_run(RATES.read_text()), specs)
    assert rates is not None
    print("| benchmark | input tokens (assumed) | memory share on H200 | predicted H100 | "
          "published H100 | error |")
    print("| --- | --- | --- | --- | --- | --- |")
    for case in CASES:
        for inputs in case.inputs:
            prof = sample_profile(case, inputs, rates)
            share = prof.classes["elementwise"].ms / prof.step_ms
            p = predict(prof, rates, Change(gpu="h100-sxm"), specs)
            got = p.samples_per_s * case.gpus
            err = 100 * (got - case.h100) / case.h100
            fits = "" if not any("may not fit" in n for n in p.notes) else \
                f" (flagged: {prof.peak_memory_gb:.0f} GB at the H200's batch)"
            print(f"| {case.name} | {inputs} | {share:.0%} | {got:,.4g}{fits} "
                  f"({p.samples_per_s_low * case.gpus:,.4g}–"
                  f"{p.samples_per_s_high * case.gpus:,.4g}) | {case.h100:,.4g} | "
                  f"{err:+.1f} % |")
    print()
    for case in CASES:
        print(f"- {case.name}: H200 {case.source_h200}; H100 {case.source_h100}; the H100 "
              f"system ran {case.h100_config}, the H200 batch {case.batch}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
