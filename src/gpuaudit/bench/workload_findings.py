"""Findings from the workload suites' figures (`bench train`): an input pipeline that cannot
feed the GPU, DDP that scales poorly, a loss that was not finite. Pure functions over
Measurements (no torch), judged by the runner beside the micro benchmarks' stragglers and
contention."""

from __future__ import annotations

from collections.abc import Sequence

from gpuaudit.model import Finding, Measurement, Severity

# Below this DDP efficiency the communication (or a straggler) costs more than it should on
# one box: NVLink all-reduce of a 124M model's gradients overlaps with the backward pass.
POOR_SCALING_PCT = 90.0


def workload_findings(measured: Sequence[Measurement]) -> list[Finding]:
    found: list[Finding] = []
    for m in measured:
        if m.suite == "train" and m.name == "data/jpeg/best" and m.params.get("keeps_up") is False:
            train = m.params.get("train_rate")
            need = m.params.get("workers_needed")
            found.append(Finding(
                code="workloads.input-bound", severity=Severity.WARN, gpu_index=m.gpu_index,
                message=f"the JPEG pipeline delivers {m.value:,.0f} images/s with "
                        f"{m.params.get('workers')} workers on {m.params.get('cpu_cores')} "
                        f"CPU cores; training consumes {train:,.0f} images/s, so the GPU "
                        f"would wait {100 * (1 - (m.value or 0) / float(train or 1)):.0f}% of "
                        "the time",
                advice="Decode on the GPU (torchvision.io.decode_jpeg on cuda, NVIDIA DALI), "
                       "store pre-resized images or a decoded format (FFCV, WebDataset with "
                       "smaller images), or rent more CPU cores per GPU"
                       + (f" (about {need} workers at this per-worker rate)" if need else "")
                       + ".",
                evidence={"loader_rate": m.value, "train_rate": train,
                          "workers": m.params.get("workers"),
                          "cpu_cores": m.params.get("cpu_cores")}))
        if m.suite == "train" and m.name.endswith("/scaling") and m.value is not None \
                and m.value < POOR_SCALING_PCT and int(m.params.get("gpus") or 1) > 1 \
                and m.params.get("device") == "cuda":  # CPU ranks share cores: not a verdict
            found.append(Finding(
                code="workloads.poor-scaling", severity=Severity.WARN,
                message=f"DDP on {m.params.get('gpus')} GPUs reaches {m.value:.1f}% of linear "
                        f"scaling for {m.params.get('model')} ({m.params.get('mode')})",
                advice="Check the GPU↔GPU links (`gpuaudit bench p2p collectives`), that every "
                       "GPU runs at the same speed (stragglers), and that gradient buckets "
                       "overlap with the backward pass; gradient accumulation all-reduces less "
                       "often.",
                evidence={"efficiency_pct": m.value, "gpus": m.params.get("gpus")}))
        if m.suite == "train" and m.name.endswith("/throughput") \
                and m.params.get("loss_finite") is False:
            found.append(Finding(
                code="workloads.loss-not-finite", severity=Severity.WARN,
                gpu_index=m.gpu_index,
                message=f"{m.params.get('model')} ({m.params.get('mode')}): the loss was not "
                        "finite after the timed steps, so they timed arithmetic on NaN or inf",
                advice="Where only a 16-bit mode loses it, its range overflowed (fp16: train "
                       "in bf16, or keep the overflowing operation in fp32); where fp32 "
                       "loses it too, the model's own numerics do (an exp, log or division "
                       "without a guard, a learning rate too high for its scale).",
                evidence={"mode": m.params.get("mode"), "model": m.params.get("model")}))
    return found
