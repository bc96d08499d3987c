"""Workload results as Measurements: names `<model>/<mode>/<figure>`, the figure's samples,
percentiles in params, MFU as the model TFLOP/s' % of the dense datasheet peak."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from gpuaudit.bench.stats import measure, skipped
from gpuaudit.model import Measurement, Params
from gpuaudit.percentile import percentile
from gpuaudit.workloads.flops import FlopCount
from gpuaudit.workloads.results import TrainResult
from gpuaudit.workloads.stats import p50_p90_p99, rates

TRAIN, INFER = "train", "infer"


def single(suite: str, name: str, unit: str, value: float, *, statistic: str,
           gpu_index: int | None, params: Params, notes: tuple[str, ...] = (),
           spec_value: float | None = None) -> Measurement:
    """A figure that is one number by nature (a warm-up time, a peak, a search result): no
    spread, and no "few samples" warning."""
    from gpuaudit.bench.stats import pct_of

    return Measurement(suite=suite, name=name, unit=unit, value=value, statistic=statistic,
                       samples=(value,), gpu_index=gpu_index, params=params, notes=notes,
                       spec_value=spec_value, pct_of_spec=pct_of(value, spec_value))


def _scalars(d: dict[str, Any]) -> Params:
    return {k: v for k, v in d.items() if isinstance(v, str | int | float | bool) or v is None}


def mode_params(r: TrainResult, device: str) -> Params:
    m = r.mode
    return _scalars({**r.params, "model": r.model, "mode": m.id, "precision": m.precision,
                     "compile": m.compile, "fused_optimizer": m.fused,
                     "channels_last": m.channels_last, "batch": r.batch_size,
                     "device": device})


def train_measurements(r: TrainResult, *, peak_tflops: float | None, fp32_rate: float | None,
                       gpu_index: int | None, device: str) -> Iterator[Measurement]:
    """throughput (samples/s), tokens (tokens/s), step_time (ms, p50 with p90/p99),
    model_flops (TFLOP/s; % of spec = MFU), peak_memory (GB), warmup (s)."""
    base = mode_params(r, device)
    prefix = f"{r.model}/{r.mode.id}"
    warm = r.warmup_steps
    notes = tuple(r.notes)
    per_sample = rates(r.batch_size, r.step_times_s)
    p50, p90, p99 = p50_p90_p99(r.step_times_s)
    samples_s = percentile(per_sample, 50)  # the throughput figure's value
    speed = {"speedup_vs_fp32": round(samples_s / fp32_rate, 3)} if fp32_rate else {}
    finite = math.isfinite(r.final_loss)  # NaN or inf: None, and the notes say which
    yield measure(TRAIN, f"{prefix}/throughput", "samples/s", per_sample, warmup=warm,
                  gpu_index=gpu_index, notes=notes,
                  params={**base, **speed, "loss_finite": finite,
                          "final_loss": round(r.final_loss, 4) if finite else None})
    if r.tokens_per_sample:
        yield measure(TRAIN, f"{prefix}/tokens", "tokens/s",
                      rates(r.batch_size * r.tokens_per_sample, r.step_times_s), warmup=warm,
                      gpu_index=gpu_index, params={**base, **speed,
                                                   "tokens_per_step": r.batch_size
                                                   * r.tokens_per_sample})
    yield measure(TRAIN, f"{prefix}/step_time", "ms", [t * 1e3 for t in r.step_times_s],
                  warmup=warm, gpu_index=gpu_index,
                  params={**base, "p50_ms": round(p50 * 1e3, 3), "p90_ms": round(p90 * 1e3, 3),
                          "p99_ms": round(p99 * 1e3, 3)})
    if r.model_flops_per_step:
        tflops = rates(r.model_flops_per_step / 1e12, r.step_times_s)
        mfu = 100 * percentile(tflops, 50) / peak_tflops if peak_tflops else None
        yield measure(TRAIN, f"{prefix}/model_flops", "TFLOP/s", tflops, warmup=warm,
                      gpu_index=gpu_index, spec_value=peak_tflops,
                      notes=() if peak_tflops else ("no datasheet peak here: no MFU",),
                      params={**base, "model_flops_per_step": r.model_flops_per_step,
                              "flops_source": r.flops_source,
                              "mfu_pct": round(mfu, 2) if mfu is not None else None,
                              "peak_precision": r.mode.precision})
    if r.peak_memory_bytes is not None:
        yield single(TRAIN, f"{prefix}/peak_memory", "GB", r.peak_memory_bytes / 1e9,
                     gpu_index=gpu_index, statistic="max",
                     notes=("torch.cuda.max_memory_allocated over warm-up and timed steps",),
                     params=base)
    yield single(TRAIN, f"{prefix}/warmup", "s", r.warmup_s, gpu_index=gpu_index,
                 statistic="once",
                 notes=("wall time of the warm-up steps: compilation and autotuning "
                        "included, excluded from every other figure",),
                 params={**base, "warmup_steps": r.warmup_steps})


def flop_check(model: str, count: FlopCount, batch: int, formula_per_sample: int | None,
               source: str, *, gpu_index: int | None, device: str) -> Measurement:
    """FlopCounterMode's model FLOPs per sample against the formula's (% of spec = agreement).
    Counted: matmuls, convolutions and attention as executed, minus flash attention's
    recomputed QKᵀ."""
    counted = count.model / batch / 1e9
    ref = formula_per_sample / 1e9 if formula_per_sample else None
    return single(TRAIN, f"{model}/flop_count", "GFLOP/sample", counted,
                  gpu_index=gpu_index, statistic="counted", spec_value=ref,
                  notes=(f"spec = {source}; FlopCounterMode over one forward + backward",),
                  params={"model": model, "device": device, "batch": batch,
                           "counted_total_per_sample": count.total // batch,
                           "attention_forward_per_sample": count.attention_forward // batch,
                           "attention_backward_per_sample": count.attention_backward // batch,
                           "formula_per_sample": formula_per_sample})


def train_skipped(model: str, mode_id: str, reason: str, *, gpu_index: int | None,
                  device: str) -> Measurement:
    return skipped(TRAIN, f"{model}/{mode_id}/throughput", "samples/s", reason,
                   gpu_index=gpu_index, params={"model": model, "mode": mode_id,
                                                "device": device})
