"""One training mode of one model, measured: a `Trainer` built and warmed up, its steps timed,
its FLOPs counted, its op profile captured when asked (`predict`), its kernels listed."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gpuaudit.workloads.hosttime import HostTime, host_time
from gpuaudit.workloads.memory import in_use, is_oom, oom_reason, release
from gpuaudit.workloads.opcapture import capture
from gpuaudit.workloads.precision import TrainMode, float32_matmuls
from gpuaudit.workloads.results import TrainResult
from gpuaudit.workloads.timing import (
    is_cuda,
    profiled,
    release_cupti_after_profiling,
    step_times_s,
    sync,
)
from gpuaudit.workloads.trainer import Trainer


def run_mode(model: str, mode: TrainMode, device: Any, *, batch_size: int | None, steps: int,
             warmup_steps: int, min_warmup_s: float, count: bool, seq_len: int | None = None,
             compile_backend: str = "inductor", compile_mode: str | None = None,
             profile_to: str | None = None, op_profile: bool = False,
             keep_trace: str | None = None, host_step: bool = False,
             host: HostTime | None = None) -> TrainResult:
    """One mode built, warmed up and timed. `host_step`: also the host's own time per step
    (`hosttime.host_time`), for an op profile taken later in the process; `op_profile`:
    the op profile too, with `host` as its host time where measured before."""
    import torch

    with float32_matmuls(torch, tf32=mode.precision != "fp32"):
        if is_cuda(device):
            torch.cuda.reset_peak_memory_stats(device)
        t = Trainer(model, mode, device, batch_size=batch_size, seq_len=seq_len,
                    compile_backend=compile_backend, compile_mode=compile_mode)
        warm_s, warm_n = t.warm_up(warmup_steps, min_warmup_s)
        counted = t.count_flops() if count else None
        times = step_times_s(torch, device, t.step, steps)
        loss = float(t.last_loss.detach().float().item())
        host_now = host_time(t, t.notes) if host_step else None
        peak = int(torch.cuda.max_memory_allocated(device)) if is_cuda(device) else None
        if profile_to:
            kernel_table(torch, device, t.step, f"{model} {mode.id}", profile_to)
        ops = capture(t, keep_trace=keep_trace, host=host) if op_profile else None
    w = t.workload
    per_step = (w.train_flops_per_sample * w.batch_size if w.train_flops_per_sample
                else (counted.model if counted else None))
    source = w.flops_source if w.train_flops_per_sample else "FlopCounterMode"
    notes = list(t.notes)
    if not math.isfinite(loss):
        notes.append(f"loss is {loss} (fp16 overflow or a diverging model)")
    return TrainResult(model=w.name, mode=mode, batch_size=w.batch_size,
                       tokens_per_sample=w.tokens_per_sample, step_times_s=times,
                       warmup_s=warm_s, warmup_steps=warm_n, peak_memory_bytes=peak,
                       final_loss=loss, model_flops_per_step=per_step, flops_source=source,
                       flop_count=counted, notes=notes, params=dict(w.params or {}),
                       expected_count_per_sample=w.expected_count_per_sample, ops=ops,
                       host=host_now)


def measure_mode(model: str, mode: TrainMode, device: Any, **kwargs: Any) -> TrainResult | str:
    """run_mode, or why it could not run (out of memory with what it needed, or the error);
    either way the memory is given back before the next mode."""
    import torch

    from gpuaudit.errors import BadInputError

    reason: str | None = None
    try:
        return run_mode(model, mode, device, **kwargs)
    except (KeyboardInterrupt, BadInputError):
        raise
    except Exception as exc:
        if is_oom(exc):
            total = (torch.cuda.get_device_properties(device).total_memory
                     if is_cuda(device) else None)
            reason = oom_reason(str(exc), in_use_bytes=in_use(torch, device),
                                total_bytes=total)
        else:
            from gpuaudit.bench.stats import reason_of

            reason = reason_of(exc)
    finally:
        release(torch, device)
    return reason


def kernel_table(torch: Any, device: Any, fn: Callable[[], Any], title: str, path: str,
                 steps: int = 3, rows: int = 18) -> None:
    """Append the `rows` kernels that took the most device time over `steps` calls of `fn`
    (torch.profiler) to `path`: where a figure falls short, this says why."""
    from torch.profiler import ProfilerActivity

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if is_cuda(device) else [])
    release_cupti_after_profiling()
    with profiled(acts) as prof:
        for _ in range(steps):
            fn()
        sync(torch, device)
    keys = (["self_device_time_total", "self_cuda_time_total"] if is_cuda(device)
            else ["self_cpu_time_total"])
    table, key = "", keys[0]
    for key in keys:  # torch renamed cuda → device time in 2.4
        try:
            table = prof.key_averages().table(sort_by=key, row_limit=rows,
                                              max_name_column_width=70)
            break
        except (AttributeError, KeyError):
            continue
    with open(path, "a") as f:
        f.write(f"== {title}: {steps} steps, sorted by {key}\n{table}\n")
