"""Inference of one model at one precision: the model prepared once, then each (mode, batch)
timed — single-request latency percentiles and back-to-back throughput.

Modes: `eager`; `cudagraph` (the eager model captured in a CUDA graph and replayed: no Python
or launch cost per kernel); `compile` (torch.compile, inductor, freezing on: BatchNorm folded
into the convolutions, weights constant); `compile+cudagraph` (the same, mode
"reduce-overhead"); `max-autotune` (inductor benchmarks its kernel choices, CUDA graphs on).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuaudit.workloads.entry import Workload, call_model, split_batch, takes_keywords
from gpuaudit.workloads.models import build, call_make_batch
from gpuaudit.workloads.precision import cast_model, float32_matmuls, model_dtype
from gpuaudit.workloads.timing import (
    is_cuda,
    iterations_for,
    latencies_s,
    sync,
    throughput_reps,
)
from gpuaudit.workloads.trainer import to_device

MODES = ("eager", "cudagraph", "compile", "compile+cudagraph", "max-autotune")
COMPILE_MODE = {"compile": None, "compile+cudagraph": "reduce-overhead",
                "max-autotune": "max-autotune"}


class Unsupported(Exception):
    """This precision or mode cannot run for this model here (the message says why)."""


@dataclass
class Prepared:
    workload: Workload
    model: Any
    precision: str
    device: Any
    notes: list[str] = field(default_factory=list)

    def inputs(self, batch: int) -> tuple[Any, ...]:
        import torch

        inputs, _ = split_batch(call_make_batch(self.workload.make_batch, batch, self.device),
                                self.workload.model)
        dtype = model_dtype(torch, self.precision)
        cl = self.workload.image_model and is_cuda(self.device)
        return tuple(to_device(torch, inputs, self.device, cl, dtype))


def prepare(name: str, precision: str, device: Any, *, seq_len: int | None = None) -> Prepared:
    """The model in eval mode, cast to the precision's dtype (channels_last for CNNs on a GPU),
    its Linear layers replaced for fp8/int8."""
    import torch

    torch.manual_seed(0)
    w = build(name, device, seq_len=seq_len)
    model = cast_model(torch, w.model.eval(), precision)
    notes = []
    if w.image_model and is_cuda(device):
        model = model.to(memory_format=torch.channels_last)
    if precision in ("fp8", "int8"):
        from gpuaudit.workloads.quant import quantize

        replaced, total = quantize(model, precision)
        if not replaced:
            raise Unsupported(f"no Linear layer of a shape {precision} kernels take "
                              f"({total} Linear layers)")
        if replaced < total:
            notes.append(f"{replaced} of {total} Linear layers in {precision}, the rest bf16")
    return Prepared(w, model, precision, device, notes)


def _capture(torch: Any, fn: Callable[[], Any]) -> Callable[[], Any]:
    """`fn` captured in a CUDA graph after a warm-up on a side stream; returns the replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


@dataclass
class InferResult:
    mode: str
    batch: int
    latencies_s: list[float]
    throughput: list[float]  # samples/s per repetition
    warmup_s: float  # model compile / graph capture / autotune included
    notes: list[str] = field(default_factory=list)


def run_one(p: Prepared, mode: str, batch: int, *, budget_s: float, backend: str = "inductor"
            ) -> InferResult:
    """Time `mode` at `batch`. Raises Unsupported, or torch's errors (OOM included)."""
    import torch

    cuda = is_cuda(p.device)
    if mode in ("cudagraph", "compile+cudagraph", "max-autotune") and not cuda:
        raise Unsupported("CUDA graphs need a GPU")
    inputs = p.inputs(batch)
    keywords = takes_keywords(p.model, inputs)  # decided once: not inside the timed calls
    notes = list(p.notes)
    t0 = time.perf_counter()
    with torch.no_grad(), float32_matmuls(torch, tf32=p.precision != "fp32"):
        if mode == "eager" or mode == "cudagraph":
            def fn() -> Any:
                return call_model(p.model, inputs, keywords)
            call = _capture(torch, fn) if mode == "cudagraph" else fn
            for _ in range(3):  # cuDNN's algorithm search, lazy initialisation, graph upload
                call()
        else:
            compiled = torch.compile(p.model, backend=backend, mode=COMPILE_MODE[mode],
                                     dynamic=False)
            graphs = mode != "compile" and backend == "inductor"
            # A new step for inductor's CUDA graphs: the previous outputs may be overwritten.
            mark = (getattr(torch.compiler, "cudagraph_mark_step_begin", None) if graphs
                    else None)

            def call() -> Any:
                if mark is not None:
                    mark()
                return call_model(compiled, inputs, keywords)

            if backend == "inductor":
                import torch._inductor.config as inductor_config

                patch: Any = inductor_config.patch(freezing=True)
            else:
                patch = contextlib.nullcontext()
            with patch:
                for _ in range(3):  # compile, then the CUDA-graph recording runs
                    call()
        sync(torch, p.device)
        warm_s = time.perf_counter() - t0
        one = min(latencies_s(torch, p.device, call, 3))
        lat = latencies_s(torch, p.device, call,
                          iterations_for(one, budget_s / 2, 10 if cuda else 3, 500))
        reps = 5 if cuda else 3
        per_rep = iterations_for(one, budget_s / 2 / reps, 3, 200)
        thr = [r * batch for r in throughput_reps(torch, p.device, call, per_rep, reps)]
    return InferResult(mode, batch, lat, thr, warm_s, notes)


def measure_one(p: Prepared, mode: str, batch: int, **kwargs: Any) -> InferResult | str:
    """run_one, or why not (unsupported, out of memory with what it needed, an error); the
    memory (and compiled graphs) given back after each."""
    import torch

    from gpuaudit.errors import BadInputError
    from gpuaudit.workloads.memory import in_use, is_oom, oom_reason, release

    reason: str
    try:
        return run_one(p, mode, batch, **kwargs)
    except (KeyboardInterrupt, BadInputError):
        raise
    except Unsupported as exc:
        reason = str(exc)
    except Exception as exc:
        if is_oom(exc):
            total = (torch.cuda.get_device_properties(p.device).total_memory
                     if is_cuda(p.device) else None)
            reason = oom_reason(str(exc), in_use_bytes=in_use(torch, p.device),
                                total_bytes=total)
        else:
            from gpuaudit.bench.stats import reason_of

            reason = reason_of(exc)
            if _QUANTIZED_DTYPE.get(p.precision, "\0") in str(exc):
                reason = (f"{p.precision}: the model reads a Linear layer's weight outside the "
                          "layer (F.linear on its .weight, as torchvision's Swin does), which "
                          f"the replaced {p.precision} layers cannot serve; {reason}")
    finally:
        release(torch, p.device)
    return reason


# how torch names the replaced layers' weight dtype in its errors
_QUANTIZED_DTYPE = {"int8": "Char", "fp8": "Float8"}


def sweep(p: Prepared, plan: list[tuple[str, int]], step: Callable[[str], None],
          **kwargs: Any) -> Iterator[tuple[str, int, InferResult | str]]:
    for mode, batch in plan:
        step(f"infer {p.workload.name} {p.precision} {mode} batch {batch}")
        yield mode, batch, measure_one(p, mode, batch, **kwargs)
