"""Measuring trials with torch: training steps at a batch size and precision, out of memory
caught and the memory given back before the next trial (checked, not assumed)."""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuaudit.workloads.entry import call_model, default_loss, split_batch, takes_keywords
from gpuaudit.workloads.optim import make_optimizer
from gpuaudit.workloads.trainer import to_device

from .search import Trial
from .target import Target

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


def is_oom(exc: BaseException) -> bool:
    return (isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError"
            or "out of memory" in str(exc).lower())


@dataclass
class Runner:
    """Trains `target` on `device` a few steps per trial. The model and optimizer stay; what a
    trial allocates (activations, gradients, the batch) is freed after it, and the allocated
    bytes must come back to where they were before (else the trial is flagged as leaking)."""

    target: Target
    device: Any
    steps: int = 10
    warmup: int = 3
    min_time_s: float = 0.0  # time steps until at least this long (besides `steps`)
    leaks: list[str] = field(default_factory=list)
    _opt: Any = None
    _scaler: Any = None

    def __post_init__(self) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(self.device)
        self.target.model.to(self.device)
        self.target.model.train()
        self._opt, _ = make_optimizer(torch, self.target.model, sgd=False, fused=False,
                                      foreach=None)

    @property
    def cuda(self) -> bool:
        return bool(self.device.type == "cuda")

    def capacity_bytes(self) -> int | None:
        if not self.cuda:
            return None
        return int(self.torch.cuda.get_device_properties(self.device).total_memory)

    def _allocated(self) -> int | None:
        return int(self.torch.cuda.memory_allocated(self.device)) if self.cuda else None

    def _sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def _precision(self, precision: str) -> tuple[Any, Any]:
        """(autocast context factory, whether TF32 is on) for a precision name."""
        torch = self.torch
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        if dtype is None:
            return contextlib.nullcontext, False
        return (lambda: torch.autocast(self.device.type, dtype=dtype)), True

    def _state_bytes(self) -> int:
        """What the optimizer holds (AdamW's moments appear at its first step and stay)."""
        return sum(t.numel() * t.element_size() for st in self._opt.state.values()
                   for t in st.values() if isinstance(t, self.torch.Tensor))

    def measure(self, batch: int, precision: str = "fp32") -> Trial:
        torch = self.torch
        before = self._allocated()
        state_before = self._state_bytes()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        autocast, _ = self._precision(precision)
        scaler = torch.amp.GradScaler(self.device.type) if precision == "fp16" else None
        loss_fn = self.target.loss or default_loss
        times: list[float] = []
        inputs: Any
        tgt: Any
        try:
            inputs, tgt = split_batch(self.target.make_batch(batch), self.target.model)
            keywords = takes_keywords(self.target.model, inputs)
            inputs = to_device(torch, inputs, self.device, False)
            tgt = to_device(torch, tgt, self.device, False)
            t_end = time.monotonic() + self.min_time_s
            i = 0
            while i < self.warmup + self.steps or time.monotonic() < t_end:
                self._sync()
                t0 = time.perf_counter()
                with autocast():
                    loss = loss_fn(call_model(self.target.model, inputs, keywords), tgt)
                (scaler.scale(loss) if scaler else loss).backward()
                self._opt.step(scaler)
                if scaler:
                    scaler.update()
                self._opt.zero_grad(set_to_none=True)
                self._sync()
                if i >= self.warmup:
                    times.append(time.perf_counter() - t0)
                i += 1
                if i > 10 * (self.warmup + self.steps):
                    break
            peak = int(torch.cuda.max_memory_reserved(self.device)) if self.cuda else None
            result = _trial(batch, precision, times, peak)
        except Exception as exc:
            reason = _reason(exc, self._allocated(), self.capacity_bytes())
            result = Trial(batch, precision, ok=False, reason=reason)
            del exc
        finally:
            inputs = tgt = loss = None
        # the optimizer's new state lives as long as the optimizer: not the trial's leak (an
        # H200 run flagged AdamW's 1.07 GB of moments after its first trial)
        grown = self._state_bytes() - state_before
        self.release(None if before is None else before + grown)
        return result

    def release(self, before: int | None) -> None:
        """Give back what the trial held; flag a leak when allocated memory does not return."""
        self._opt.zero_grad(set_to_none=True)
        gc.collect()
        if self.cuda:
            self.torch.cuda.synchronize(self.device)
            self.torch.cuda.empty_cache()
            after = self._allocated()
            if before is not None and after is not None and after > before + (16 << 20):
                self.leaks.append(f"{(after - before) / 1e6:.0f} MB still allocated after a "
                                  "trial")


def _trial(batch: int, precision: str, times: list[float], peak: int | None) -> Trial:
    med = statistics.median(times)
    q = sorted(times)
    spread = (q[int(0.9 * (len(q) - 1))] - q[int(0.1 * (len(q) - 1))]) / med if med else None
    return Trial(batch, precision, ok=True, step_s=med, samples_per_s=batch / med,
                 peak_memory_bytes=peak, spread=spread)


def _reason(exc: BaseException, in_use: int | None, total: int | None) -> str:
    if is_oom(exc):
        text = "out of memory"
        if in_use is not None and total:
            text += f" ({in_use / 1e9:.1f} of {total / 1e9:.1f} GB in use when it failed)"
        return text
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"


def loader_rates(make_loader: Callable[[int], Any], workers: list[int], seconds: float = 3.0,
                 ) -> dict[int, float]:
    """Samples per second each worker count delivers (iterating the loader, nothing else)."""
    rates: dict[int, float] = {}
    for w in workers:
        it = iter(make_loader(w))
        with contextlib.suppress(StopIteration):
            next(it)  # workers start, first batch
        n = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            try:
                b = next(it)
            except StopIteration:
                break
            n += _batch_len(b)
        elapsed = time.perf_counter() - t0
        rates[w] = n / elapsed if elapsed > 0 else 0.0
        del it
    return rates


def _batch_len(b: Any) -> int:
    """Samples in a loader's batch: the first tensor's rows, in a tuple, a list or a mapping
    (a Hugging Face collator's batch is a dict)."""
    if isinstance(b, Mapping):
        b = next(iter(b.values()), None)
    if isinstance(b, tuple | list) and b:
        return _batch_len(b[0])
    return int(b.shape[0]) if hasattr(b, "shape") and len(b.shape) else 1
