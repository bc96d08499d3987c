"""One training step of the user's model, counted unit by unit for another size
(`predict.retarget`): built on PyTorch's meta device (shapes, no memory, no arithmetic) and
run through `workloads.tally`. A model that cannot run there (data-dependent shapes:
`nonzero`, routing by value; a build that reads a value) is counted on the CPU with real
tensors where its step is small enough and the count ends in time, and refused with the
reason where not.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gpuaudit.errors import BadInputError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Counted:
    """One training step's work per unit group (class, unit name), as `workloads.tally`
    counts it."""

    name: str
    flops: dict[tuple[str, str], float]
    bytes: dict[tuple[str, str], float]
    shapes: dict[str, list[tuple[int, int, int, int, int, float]]]  # class → shapes
    ops: int
    params: int
    buckets: list[tuple[int, float]]
    calls: dict[tuple[str, str], int] | None = None  # forward calls per unit group
    counted_on: str = "meta"  # or "cpu": a model whose shapes follow its data
    # batch norm's bytes per unit group by each call's channels (`tally.batch_norm_channels`)
    channel_bytes: dict[tuple[str, str], dict[int, float]] | None = None
    # each scaled_dot_product_attention call as the model made it, whatever kernel ran it
    # (the meta device runs its math: the T×S scores its traffic counts, which a fused
    # kernel never writes): (batch × heads, query tokens, key tokens, head size, causal)
    # → calls
    attention: dict[tuple[int, int, int, int, bool], int] | None = None


# A model the meta device cannot run (shapes that follow its data) is counted on the CPU with
# real tensors when its step is this small: seconds on a workstation's cores, minutes on two
# (there the zoo's MoE counted at 21–28 GFLOP/s). Its estimate is 6 × parameters × tokens
# (or samples), an upper bound for sparse experts.
CPU_COUNT_FLOP = 5e12
# ... and for as long as this: the estimate is far short for a model that uses each weight
# many times a sample (convolutions, sequence models: 100–400× for the zoo's), and the CPU's
# rate is the model's (on 2 cores a Conformer with depthwise convolutions and CTC loss had
# not counted its 3.7 TFLOP in ten minutes). The count says how far it is every
# `PROGRESS_S`.
CPU_COUNT_S = 300.0
PROGRESS_S = 15.0
# what a user whose size change cannot be counted does instead
RECORD_IT = "record that size itself (gpuaudit bench train --model {spec} --op-profile)"


def count(spec: str, batch: int) -> Counted:
    """One fp32 training step of `spec` at `batch`, counted on the meta device, or, for a
    model whose shapes follow its data (top-k routing by value) or whose build cannot run
    there (a parametrization that reads a value), on the CPU with real tensors when its step
    is small enough (`CPU_COUNT_FLOP`) and its count ends in time (`CPU_COUNT_S`)."""
    from gpuaudit.workloads.metakernels import register

    register()
    try:
        with _autocast_takes_meta():
            return _count_on(spec, batch, "meta")
    except _NeedsData as exc:
        why = (f"its shapes follow its data: {exc.reason}" if exc.flop is not None else
               f"it could not be built on the meta device: {exc.reason}")
        if exc.flop is not None and exc.flop > CPU_COUNT_FLOP:
            raise _too_much(spec, f"it cannot be counted on the meta device ({exc.reason}): "
                                  "its shapes follow its data", exc.flop, CPU_COUNT_FLOP) from None
        # seconds to minutes on a few cores: said before it starts, then how far it is
        log.info("counting %s on the CPU with real tensors (%s)%s", spec, why,
                 "" if exc.flop is None else
                 f": one training step of about {exc.flop / 1e12:.2g} TFLOP")
        # a model not built on meta is of unknown size: its step is weighed once built
        limit = CPU_COUNT_FLOP if exc.flop is None else None
    try:
        return _count_on(spec, batch, "cpu", limit)
    except _NeedsData as exc:
        raise BadInputError(f"--model {spec}: it could not be counted on the CPU either "
                            f"({exc.reason})") from None


def _too_much(spec: str, why: str, flop: float, limit: float) -> BadInputError:
    return BadInputError(f"--model {spec}: {why}, and a step of about {flop / 1e12:.0f} TFLOP "
                         f"is too much to count on the CPU (the limit is {limit / 1e12:.0f}): "
                         + RECORD_IT.format(spec=spec))


@contextlib.contextmanager
def _autocast_takes_meta() -> Iterator[None]:
    """A region a model keeps in float32 is written `torch.autocast(x.device.type,
    enabled=False)` (rotary embeddings, routers' softmax), which on the meta device raises
    "unsupported scalarType": autocast knows no meta device. There it is taken as the CPU's,
    which changes nothing on meta tensors (they carry no autocast key; the count is fp32)."""
    import torch

    cls = torch.amp.autocast_mode.autocast
    init = cls.__init__

    def on_cpu_for_meta(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
        init(self, "cpu" if device_type == "meta" else device_type, *args, **kwargs)

    cls.__init__ = on_cpu_for_meta  # type: ignore[method-assign]
    try:
        yield
    finally:
        cls.__init__ = init  # type: ignore[method-assign]


class _NeedsData(Exception):
    """The meta device could not count it: `flop` its step's estimate, None where the model
    could not even be built there."""

    def __init__(self, reason: str, flop: float | None) -> None:
        super().__init__(reason)
        self.reason, self.flop = reason, flop


def _count_on(spec: str, batch: int, where: str, limit: float | None = None) -> Counted:
    """The count on `where`; `limit`: the most FLOPs (6 × parameters × samples or tokens) a
    step may have, refused before it runs. Under one seed, the caller's random state kept: a
    model whose work follows its data (an MoE's routing of random tokens through random
    weights) counts the same every time."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return _count_seeded(spec, batch, where, limit)


def _count_seeded(spec: str, batch: int, where: str, limit: float | None) -> Counted:
    import torch

    from gpuaudit.workloads.buckets import ddp_buckets
    from gpuaudit.workloads.calls import recording
    from gpuaudit.workloads.entry import (
        as_workload,
        default_loss,
        resolve,
        split_batch,
        takes_keywords,
    )
    from gpuaudit.workloads.nets import WithLoss
    from gpuaudit.workloads.optim import make_optimizer
    from gpuaudit.workloads.tally import count_ops
    from gpuaudit.workloads.trainer import to_device

    build = resolve(spec)
    device = torch.device(where)
    net = None
    try:
        with device:
            w = as_workload(build(), spec)
        batch_data = _make_batch(w.make_batch, batch, where)
        with device:
            inputs, target = to_device(torch, split_batch(batch_data, w.model), device, False)
            net = WithLoss(w.model, w.loss or default_loss, takes_keywords(w.model, inputs))
            if any(isinstance(p, torch.nn.parameter.UninitializedParameter)
                   for p in net.parameters()):
                with torch.no_grad():  # lazy layers take their shapes at the first call,
                    net(*inputs, target)  # which initializes them: not a step's work
        flop = _step_flop(net, batch, w.tokens_per_sample)
        if limit is not None and flop > limit:
            raise _too_much(spec, "it could not be built on the meta device", flop, limit)
        opt, _ = make_optimizer(torch, net, sgd=False, fused=False)

        def step() -> None:
            with device:  # tensors the model makes in forward land beside its parameters
                net(*inputs, target).backward()
            # outside: some torch releases make the optimizer's step counter with no device
            # given, which the meta context would put on meta, where `.item()` fails
            opt.step()

        calls: list[Any] = []

        def recorded() -> None:
            with recording(calls, frozenset({"scaled_dot_product_attention"})):
                step()

        tally = count_ops(recorded, on_op=_Watch(spec) if where == "cpu" else None)
    except BadInputError:
        raise
    except Exception as exc:
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        if net is None and where != "meta":
            raise BadInputError(f"--model {spec}: it could not be built on the {where} "
                                f"device ({reason})") from None
        raise _NeedsData(reason, None if net is None else
                         _step_flop(net, batch, w.tokens_per_sample)) from None
    shapes: dict[str, list[tuple[int, int, int, int, int, float]]] = defaultdict(list)
    for (cls, m, n, k, b, size), (_, f) in tally.shapes.items():
        shapes[cls].append((m, n, k, b, size, float(f)))
    params = list(net.parameters())
    return Counted(spec, {k: float(v) for k, v in tally.group_flops.items()},
                   {k: float(v) for k, v in tally.group_bytes.items()}, dict(shapes),
                   tally.total_ops, sum(p.numel() for p in {id(p): p for p in params}.values()),
                   ddp_buckets(params), dict(tally.group_calls), counted_on=where,
                   channel_bytes={k: {c: float(b) for c, b in v.items()}
                                  for k, v in tally.group_channel_bytes.items()},
                   attention=attention_calls(calls))


def attention_calls(calls: list[Any]) -> dict[tuple[int, int, int, int, bool], int]:
    """The recorded `scaled_dot_product_attention` calls' shapes (`Counted.attention`): query
    (…, T, Q) and key (…, S, Q), its leading dimensions multiplied; `is_causal` as given."""
    out: dict[tuple[int, int, int, int, bool], int] = defaultdict(int)
    for c in calls:
        if c.name != "scaled_dot_product_attention":
            continue
        args = list(c.args) + [None] * 6
        q, k = c.kwargs.get("query", args[0]), c.kwargs.get("key", args[1])
        causal = c.kwargs.get("is_causal", args[5])
        if not (hasattr(q, "shape") and hasattr(k, "shape")) or len(q.shape) < 2:
            continue
        lead = math.prod(int(d) for d in q.shape[:-2])
        out[(lead, int(q.shape[-2]), int(k.shape[-2]), int(q.shape[-1]), bool(causal))] += 1
    return dict(out)


def _make_batch(make_batch: Any, batch: int, where: str) -> Any:
    """The batch made on `where`; for the meta device, where the data is drawn by value
    (nanoGPT's `get_batch` slices a token stream at random offsets, which meta tensors do not
    have), made on the CPU instead, to be taken to meta: its shapes are what counts."""
    import torch

    from gpuaudit.workloads.models import call_make_batch

    try:
        with torch.device(where):
            return call_make_batch(make_batch, batch, where)
    except Exception:
        if where != "meta":
            raise
    return call_make_batch(make_batch, batch, "cpu")


def _step_flop(net: Any, batch: int, tokens_per_sample: int | None) -> float:
    """A training step's FLOPs as 6 × parameters × samples (or tokens): an upper bound for
    sparse experts."""
    return 6.0 * sum(p.numel() for p in net.parameters()) * batch * (tokens_per_sample or 1)


class _Watch:
    """Called after each operator of a count on the CPU: says how far it is every
    `PROGRESS_S`, and stops it past `CPU_COUNT_S` with the reason."""

    def __init__(self, spec: str) -> None:
        self.spec, self.ops = spec, 0
        self.start = self.said = time.monotonic()

    def __call__(self) -> None:
        self.ops += 1
        now = time.monotonic()
        if now - self.said >= PROGRESS_S:
            self.said = now
            log.info("counting %s on the CPU: %d operators in %.0f s", self.spec, self.ops,
                     now - self.start)
        if now - self.start > CPU_COUNT_S:
            raise BadInputError(f"--model {self.spec}: its step could not be counted on the "
                                f"meta device, and counting it on the CPU took over "
                                f"{CPU_COUNT_S:.0f} s ({self.ops} operators so far): "
                                + RECORD_IT.format(spec=self.spec))

