"""A model ready to train in one mode (`Trainer`): built, warmed up (compile, autotune), its
step and its FLOPs; the same step serves one rank of a DDP run. `train` times it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from gpuaudit.workloads.entry import default_loss, split_batch, takes_keywords
from gpuaudit.workloads.flops import FlopCount, count_flops
from gpuaudit.workloads.models import build, call_make_batch
from gpuaudit.workloads.optim import make_optimizer
from gpuaudit.workloads.precision import (
    TrainMode,
    autocast_dtype,
    check_scaler,
    check_weights,
    weights_precision,
)
from gpuaudit.workloads.timing import sync


def to_device(torch: Any, x: Any, device: Any, channels_last: bool,
              dtype: Any = None) -> Any:
    """The tensors of `x` (in tuples, lists and dicts too) on `device`; the floating ones in
    `dtype` where given (an inference model cast to it). NumPy arrays become tensors first,
    as a DataLoader's collate makes them."""
    if type(x).__name__ == "ndarray" and type(x).__module__ == "numpy":
        x = torch.as_tensor(x)
    if isinstance(x, tuple | list):
        return type(x)(to_device(torch, v, device, channels_last, dtype) for v in x)
    if isinstance(x, dict):
        return {k: to_device(torch, v, device, channels_last, dtype) for k, v in x.items()}
    if isinstance(x, torch.Tensor):
        x = x.to(device, non_blocking=True)
        if dtype is not None and x.is_floating_point():
            x = x.to(dtype)
        if channels_last and x.dim() == 4 and x.is_floating_point():
            x = x.contiguous(memory_format=torch.channels_last)
    return x


class Trainer:
    """A model ready to train in one mode: `step()` is one optimizer step of `accum`
    micro-batches. `wrap` turns the eager module into what runs (DDP for a rank)."""

    def __init__(self, model: str, mode: TrainMode, device: Any, *, batch_size: int | None,
                 seq_len: int | None = None, compile_backend: str = "inductor",
                 compile_mode: str | None = None,
                 wrap: Callable[[Any], Any] | None = None) -> None:
        import torch

        from gpuaudit.workloads.nets import WithLoss

        self.torch, self.mode, self.device = torch, mode, device
        torch.manual_seed(0)
        self.workload = w = build(model, device, seq_len=seq_len, batch_size=batch_size)
        if not any(q.requires_grad for q in w.model.parameters()) and w.loss is None:
            # a custom loss may train something of its own; the model alone has nothing
            raise ValueError("the model has no trainable parameters (all frozen or none): "
                             "nothing to train; `bench infer` measures it")
        self.notes: list[str] = []
        held = weights_precision(torch, w.model)
        check_weights(mode.precision, held)
        check_scaler(torch, mode.precision, w.model)
        if held is not None:
            w.params = {**(w.params or {}), "weights": held}
            self.notes.append(f"the model's weights are {held} (its build made them so): pure "
                              f"{held} training, no float32 master weights")
        if mode.channels_last and w.image_model:
            w.model = w.model.to(memory_format=torch.channels_last)
        elif mode.channels_last:
            self.notes.append("channels_last applies to image models only: ignored")
        self.inputs, self.target = self.data_at(w.batch_size)
        self.net = WithLoss(w.model, w.loss or default_loss, takes_keywords(w.model, self.inputs))
        self.ddp = wrap(self.net) if wrap else None
        front = self.ddp if self.ddp is not None else self.net
        self.runner = (torch.compile(front, backend=compile_backend, mode=compile_mode)
                       if mode.compile else front)
        self.opt, note = make_optimizer(torch, self.net, sgd=w.image_model, fused=mode.fused)
        if note:
            self.notes.append(note)
        self.amp = autocast_dtype(torch, mode.precision)
        self.scaler = (torch.amp.GradScaler(device.type) if mode.precision == "fp16" else None)
        self.last_loss: Any = None

    def data_at(self, batch: int) -> tuple[Any, Any]:
        """The model's (inputs, target) made at `batch` and on the device, the inputs in
        channels_last where the mode has it."""
        w, torch = self.workload, self.torch
        inputs, target = split_batch(call_make_batch(w.make_batch, batch, self.device), w.model)
        return (to_device(torch, inputs, self.device, self.mode.channels_last),
                to_device(torch, target, self.device, False))

    def _autocast(self) -> Any:
        if self.amp is None:
            return contextlib.nullcontext()
        return self.torch.autocast(self.device.type, dtype=self.amp)

    def step(self, accum: int = 1, mark: Callable[[str], None] | None = None) -> None:
        """`mark(phase)` is called as each phase (forward, backward, optimizer) is queued:
        the op profile times the phases with it."""
        for i in range(accum):
            quiet = self.ddp is not None and i < accum - 1  # all-reduce on the last only
            with self.ddp.no_sync() if quiet else contextlib.nullcontext():
                with self._autocast():
                    loss = self.runner(*self.inputs, self.target)
                    if accum > 1:
                        loss = loss / accum
                if mark:
                    mark("forward")
                (self.scaler.scale(loss) if self.scaler else loss).backward()
                if mark:
                    mark("backward")
        self.opt.step(self.scaler)
        if self.scaler:
            self.scaler.update()
        self.opt.zero_grad(set_to_none=True)
        if mark:
            mark("optimizer")
        self.last_loss = loss

    def count_flops(self) -> FlopCount:
        """FlopCounterMode over one eager forward + backward (no optimizer step)."""
        def once() -> None:
            with self._autocast():
                loss = self.net(*self.inputs, self.target)
            loss.backward()

        counted = count_flops(once)
        self.opt.zero_grad(set_to_none=True)
        return counted

    def warm_up(self, steps: int, min_s: float, accum: int = 1) -> tuple[float, int]:
        """Run `steps` steps, more until `min_s` has passed (clocks settle, autotuning ends);
        returns (seconds, steps run)."""
        t0 = time.perf_counter()
        done = 0
        while done < steps or time.perf_counter() - t0 < min_s:
            self.step(accum)
            sync(self.torch, self.device)
            done += 1
            if done >= 10 * max(steps, 1):
                break
        return time.perf_counter() - t0, done
