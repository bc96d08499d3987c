"""The step's matmul-bound, normalization and embedding units timed alone: each distinct
call, forward + backward (the gradients its step took), replayed with fresh tensors of its
shapes, strides and dtypes (its integer tensors' own values) in each precision of
`TIMED_PRECISIONS` (each with the dtypes that precision family's own step fed it, under its
autocast, TF32 as it has it: off for fp32) and at each batch size of `BATCH_SCALES` × the
recorded one in the recorded precision (the dimensions that follow the batch are those that
differ between the step counted at the recorded batch and at another one); the convolutions
also at `widen.WIDTH_SCALE` × their channels, in the recorded precision (what a wider model's
would take: `predict.convfit`).

A precision or batch change moves a group's time by the ratio of these times (Σ count × time
there ÷ Σ count × time here), as the convolutions' and batch norm's layers timed alone did on
the H200 (within 2 % of their steps' own ratios). Calls are timed back to back with the host
held out (`timing.held_call_ms`), a long call one at a time; within a wall-clock budget
shared out among the settings, the units that hold the most of the step's work first, the
recorded precision first.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import Callable
from typing import Any

from gpuaudit.model.opprofile import (
    ACTIVATION,
    BATCH_SCALES,
    TIMED_PRECISIONS,
    TimedUnit,
    UnitTime,
)
from gpuaudit.workloads.calls import Call, TensorSpec, dense_strides, first_tensor
from gpuaudit.workloads.widen import WIDTH_SCALE, widened

MAX_UNITS = 32
# all units, all settings, at least; GPU, CPU. On one H200 a unit's timing took about 0.2 s
# (its replay's tensors, cuDNN's autotuning, the held calls): 5 s covered one setting of 25
# units, and 15 s left ConvNeXt's, a U-Net's and a mixture of experts' units (21–32 of them)
# untimed at one batch or both, their batch changes moved by counted traffic instead.
BUDGET_S = {True: 15.0, False: 0.6}
PER_TIMING_S = {True: 0.2, False: 0.0}  # the budget grows past BUDGET_S by this a timing
# The wall clock the settings may take together, past that budget: a timing's own cost is
# its replay's tensors and, for a shape the step never ran (another precision, another
# batch), cuDNN's autotuning. On slow hosts a timing at ×2 took 1–1.4 s, and a budget of
# 0.2 s a timing left ConvNeXt 3 of its 21 units timed at ×2 and 6 in tf32.
CAP_S = {True: 60.0, False: 0.6}
COVER = 0.98  # past MAX_UNITS units, time them until this share of the estimated cost is held
# A unit's forward and backward launch about four kernels, each taking no less than about
# 2.5 µs on an H200 (`predict.groups.FLOOR_US`): a small layer costs its launches, not its
# FLOPs (the diffusion U-Net's time-embedding projections, 25 MFLOP a call).
UNIT_FLOOR_S = 10e-6
LONG_CALL_MS = 1.0  # a call this long is timed one at a time (its launches are negligible)


def _family(precision: str) -> str:
    return ACTIVATION.get(precision, "float32")


def _scaled_shape(spec: TensorSpec, alt: TensorSpec | None, batch: int, alt_batch: int,
                  scale: float) -> tuple[int, ...] | None:
    """The tensor's shape at `scale` × the recorded batch: each dimension that differed at
    `alt_batch` moved along the line through both points; None where that cannot be said."""
    if scale == 1.0:
        return spec.shape
    if alt is None or len(alt.shape) != len(spec.shape):
        return None
    out = []
    for here, there in zip(spec.shape, alt.shape, strict=True):
        if here == there:
            out.append(here)
            continue
        per = (here - there) / (batch - alt_batch)
        out.append(max(1, round(here + per * batch * (scale - 1))))
    return tuple(out)


def _grad_like(torch: Any, out: Any, stride: tuple[int, ...] | None) -> Any:
    """A random gradient for `out` in the memory format the step's backward brought
    (`stride`'s order, dense at `out`'s shape), or `out`'s own where it brought none or an
    expanded one (a sum's)."""
    if stride is None or len(stride) != out.dim() or 0 in stride:
        return torch.randn_like(out)
    return torch.empty_strided(tuple(out.shape), dense_strides(tuple(out.shape), stride),
                               dtype=out.dtype, device=out.device).normal_()


def _tensor(torch: Any, device: Any, spec: TensorSpec, shape: tuple[int, ...], dtype: str
            ) -> Any:
    dt = getattr(torch, dtype)
    stride = spec.stride if shape == spec.shape else dense_strides(shape, spec.stride)
    t = torch.empty_strided(shape, stride, dtype=dt, device=device)
    if spec.values is not None:
        v = spec.values
        for d, n in enumerate(shape):
            if v.dim() > d and v.shape[d] != n:
                reps = [1] * v.dim()
                reps[d] = math.ceil(n / v.shape[d])
                v = v.repeat(*reps).narrow(d, 0, n)
        t.copy_(v.to(device).to(dt))
    elif t.is_floating_point():
        t.normal_()
    else:
        t.zero_()
    return t.requires_grad_(spec.requires_grad and t.is_floating_point())


def _build(torch: Any, device: Any, tree: Any, alt_tree: Any, dtypes: Any, batch: int,
           alt_batch: int, scale: float, leaves: list[Any]) -> Any:
    """`tree` with tensors made for it (`dtypes`: the same tree in the family to time)."""
    if isinstance(tree, TensorSpec):
        shape = _scaled_shape(tree, alt_tree if isinstance(alt_tree, TensorSpec) else None,
                              batch, alt_batch, scale)
        if shape is None:
            raise ValueError("no batch dimension found")
        dtype = dtypes.dtype if isinstance(dtypes, TensorSpec) else tree.dtype
        t = _tensor(torch, device, tree, shape, dtype)
        if t.requires_grad:
            leaves.append(t)
        return t
    if isinstance(tree, list | tuple):
        alts = alt_tree if isinstance(alt_tree, list | tuple) and \
            len(alt_tree) == len(tree) else [None] * len(tree)
        dts = dtypes if isinstance(dtypes, list | tuple) and len(dtypes) == len(tree) \
            else [None] * len(tree)
        return type(tree)(_build(torch, device, v, a, d, batch, alt_batch, scale, leaves)
                          for v, a, d in zip(tree, alts, dts, strict=True))
    if isinstance(tree, dict):
        return {k: _build(torch, device, v, (alt_tree or {}).get(k), (dtypes or {}).get(k),
                          batch, alt_batch, scale, leaves) for k, v in tree.items()}
    if scale != 1.0 and alt_tree is not None and alt_tree != tree and \
            isinstance(tree, int | list | tuple):
        raise ValueError("a non-tensor argument follows the batch")
    return tree


def _offsets_continued(torch: Any, call: Call, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """`embedding_bag(weight, input, offsets, …)` at another batch: its lookups' values are
    repeated (`_tensor`), so each repeat of its bags' offsets starts where the lookups
    before it end (repeated as they are, the offsets would start at 0 again: out of order,
    an error on a CPU and undefined on a GPU)."""
    spec = call.args[2] if len(call.args) > 2 else None
    if not isinstance(spec, TensorSpec) or spec.values is None or len(spec.shape) != 1 or \
            not isinstance(call.args[1], TensorSpec) or len(call.args[1].shape) != 1:
        raise ValueError("embedding_bag without 1-D offsets: not replayed at another batch")
    offsets = args[2]
    n, known = offsets.shape[0], spec.values
    looked_up = call.args[1].shape[0]
    tiles = [known + k * looked_up for k in range(math.ceil(n / known.shape[0]))]
    offsets.copy_(torch.cat(tiles)[:n].to(offsets.device, offsets.dtype))
    return args


RNN_MODULES = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN", "rnn_relu": "RNN"}
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _rnn(torch: Any, device: Any, call: Call, args: tuple[Any, ...], scale: float
         ) -> tuple[Any, tuple[Any, ...]]:
    """An RNN call as the module that made it, its weights in one flat buffer as nn.LSTM
    keeps them (fresh weight tensors would be compacted at every call): padded,
    `_VF.lstm(input, hx, weights, bias, layers, dropout, train, bidirectional, batch_first)`;
    packed (pack_padded_sequence), `_VF.lstm(data, batch_sizes, hx, weights, bias, layers,
    dropout, train, bidirectional)`, its sequences' lengths kept and their number × `scale`."""
    kind = RNN_MODULES[call.name]
    packed = isinstance(call.args[1], TensorSpec) and not call.args[1].floating
    if packed:
        x, _sizes, hx, weights, bias, layers, dropout, train, bidir = args[:9]
        batch_first = False
    else:
        x, hx, weights, bias, layers, dropout, train, bidir, batch_first = args[:9]
    if not isinstance(x, torch.Tensor) or not isinstance(weights, list | tuple):
        raise ValueError(f"{call.name}: not an RNN call this replay knows")
    hidden = int(weights[0].shape[0]) // GATES[kind]
    extra: dict[str, Any] = {"nonlinearity": call.name.split("_")[1]} if kind == "RNN" else {}
    if kind == "LSTM" and int(weights[1].shape[1]) != hidden:
        extra["proj_size"] = int(weights[1].shape[1])  # its recurrent weight takes the projection
    module = getattr(torch.nn, kind)(int(x.shape[-1]), hidden, num_layers=int(layers),
                                     bias=bool(bias), batch_first=bool(batch_first),
                                     dropout=float(dropout), bidirectional=bool(bidir),
                                     **extra).to(device)
    module.train(bool(train))
    if not packed:
        return module, (x, hx)
    values = call.args[1].values
    if values is None:
        raise ValueError(f"{call.name}: a packed sequence without its batch sizes")
    sizes = (values.double() * scale).round().clamp(min=1).to(torch.int64)
    data = torch.randn(int(sizes.sum()), x.shape[-1], dtype=x.dtype, device=device,
                       requires_grad=x.requires_grad)
    states = tuple(torch.randn(h.shape[0], int(sizes[0]), *h.shape[2:], dtype=h.dtype,
                               device=device) for h in (hx if isinstance(hx, list | tuple)
                                                        else (hx,)))
    state = states if kind == "LSTM" else states[0]
    pack = torch.nn.utils.rnn.PackedSequence

    class Packed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = module

        def forward(self, data: Any, state: Any) -> Any:
            return self.rnn(pack(data, sizes), state)
    return Packed(), (data, state)


def replay(torch: Any, device: Any, call: Call, family: Call, alt_batch_call: Call | None,
           batch: int, alt_batch: int, scale: float, amp: Any) -> Callable[[], Any]:
    """Forward + backward of `call` alone with fresh tensors: `family`'s dtypes, the shapes
    at `scale` × the batch (`alt_batch_call`: the same call counted at `alt_batch`)."""
    leaves: list[Any] = []
    alt_args = alt_batch_call.args if alt_batch_call is not None else None
    alt_kwargs = alt_batch_call.kwargs if alt_batch_call is not None else None
    args = _build(torch, device, call.args, alt_args, family.args, batch, alt_batch, scale,
                  leaves)
    kwargs = _build(torch, device, call.kwargs, alt_kwargs, family.kwargs, batch, alt_batch,
                    scale, leaves)
    func = call.func
    if call.name == "embedding_bag" and scale != 1.0:
        args = _offsets_continued(torch, call, args)
    if call.name in RNN_MODULES:
        func, args = _rnn(torch, device, call, args, scale)
        leaves = [t for t in (args[0], *func.parameters()) if t.requires_grad]

    def forward() -> Any:
        ctx = torch.autocast(device.type, dtype=amp) if amp is not None else \
            contextlib.nullcontext()
        with ctx:
            return func(*args, **kwargs)

    out = first_tensor(forward(), torch)
    if out is None or not out.requires_grad or not leaves:
        return lambda: forward()
    grad = _grad_like(torch, out, call.grad_stride)

    def step() -> Any:
        y = first_tensor(forward(), torch)
        return torch.autograd.grad(y, leaves, grad, allow_unused=True)
    return step


def _call_ms(torch: Any, device: Any, fn: Callable[[], Any], budget_s: float) -> float:
    """The device's time per call, the host held out: calls queued behind a spin kernel
    (`timing.held_call_ms`), four at a time, one at a time for a call whose device time
    alone is long. (Timed between events one call at a time instead, the units of a small
    model read their launches: the first H200 recordings of the zoo timed a bf16 linear
    layer at 1.17 ms that its step ran in 0.37.)"""
    from gpuaudit.workloads.timing import held_call_ms, is_cuda, median_call_ms

    if not is_cuda(device):
        return median_call_ms(torch, device, fn, budget_s)
    first = held_call_ms(torch, device, fn, 0.0, calls=1)
    if first >= LONG_CALL_MS:
        return held_call_ms(torch, device, fn, budget_s, calls=1)
    return held_call_ms(torch, device, fn, budget_s)


Maker = Callable[[], Callable[[], Any]]


def _busy_ms(torch: Any, device: Any, timed: list[tuple[str, Maker]]) -> dict[int, float]:
    """Every timing's unit, its kernels' own time a call (`kernelview.busy_per_call_us`), in
    one profiler session after all the timings (`timed`: each timing's precision and its
    replay's maker, in order). Timed back to back, a unit's call also holds the device's
    gaps between its kernels (1–2.5 µs each on the H200), which a step's group times leave
    out: ConvNeXt's bf16 linear layers, about ten kernels a call with autocast's casts, took
    0.85 of their time alone in their step, its fp32 ones (five kernels) 0.97, and their
    ratio alone made the fp32 step 12 % short of its measured matmul time. One session, long
    after the step's own profile: a session started while the last one's CUPTI teardown
    runs can catch no device activity (kineto tears down on a later CUDA call, on a thread
    of its own)."""
    from gpuaudit.workloads.kernelview import busy_per_call_us
    from gpuaudit.workloads.precision import float32_matmuls

    def in_precision(precision: str, make: Maker) -> Maker:
        def made() -> Callable[[], Any]:
            with float32_matmuls(torch, tf32=precision != "fp32"):
                fn = make()

            def call() -> Any:
                with float32_matmuls(torch, tf32=precision != "fp32"):
                    return fn()
            return call
        return made

    us = busy_per_call_us(torch, device, [(str(j), in_precision(precision, make))
                                          for j, (precision, make) in enumerate(timed)])
    return {int(label): round(v / 1e3, 6) for label, v in us.items() if v > 0}


OWN_MAX = 1.1  # a call's kernels' own time over its time back to back: past it, not its own


def own_time(busy_ms: float | None, ms: float) -> float | None:
    """A timing's kernels' own time, kept where it can be the call's: kernels that read longer
    than the calls back to back (past `OWN_MAX`, the profiler's noise) were not all its."""
    return busy_ms if busy_ms is not None and busy_ms <= OWN_MAX * ms else None


def distinct(calls: list[Call]) -> list[tuple[Call, int, int]]:
    """(call, calls like it, its position in `calls`) per distinct key, in order."""
    seen: dict[Any, list[Any]] = {}
    for i, c in enumerate(calls):
        entry = seen.setdefault(c.key(), [c, 0, i])
        entry[1] += 1
    return [(c, n, i) for c, n, i in seen.values()]


def _cost(call: Call) -> float:
    """A rough cost in seconds to order units by (the bench's rates are not known here):
    its FLOPs, its traffic, and its launches (`UNIT_FLOOR_S`)."""
    moved = sum(math.prod(t.shape) * 4 for t in call.tensors())
    return UNIT_FLOOR_S + call.flops / 100e12 + 3 * moved / 2e12


def choose(calls: list[Call], max_units: int = MAX_UNITS) -> list[tuple[Call, int]]:
    """The distinct units to time and how many calls each stands for, the costliest first:
    all of them where they are no more than `max_units`, else until `COVER` of their
    estimated cost is held. A DLRM's seven units were cut at 98 % of a cost its embedding
    bags held nearly all of, leaving four small linear layers untimed that held two thirds
    of its linear layers' time in bf16 and moved by another ratio than the two timed."""
    units = sorted(distinct(calls), key=lambda u: -_cost(u[0]) * u[1])
    if len(units) <= max_units:
        return [(c, n) for c, n, _ in units]
    total = sum(_cost(c) * n for c, n, _ in units) or 1.0
    chosen: list[tuple[Call, int]] = []
    held = 0.0
    for c, n, _ in units:
        if len(chosen) >= max_units or held >= COVER * total:
            break
        chosen.append((c, n))
        held += _cost(c) * n
    return chosen


def ranks(calls: list[Call]) -> dict[tuple[str, int], Call]:
    """Each call by (name, rank among the calls of that name): how two tallies of the same
    program (another precision family, another batch) are lined up."""
    out: dict[tuple[str, int], Call] = {}
    seen: dict[str, int] = {}
    for c in calls:
        r = seen.get(c.name, 0)
        out[(c.name, r)] = c
        seen[c.name] = r + 1
    return out


def time_units(torch: Any, device: Any, precision: str, calls: list[Call],
               family_calls: dict[str, list[Call]], alt_batch_calls: list[Call] | None,
               batch: int, alt_batch: int | None, *, budget_s: float | None = None,
               max_units: int = MAX_UNITS, notes: list[str] | None = None
               ) -> list[TimedUnit]:
    """The step's units timed alone (module docstring). `calls`: the recorded step's calls
    (matched, classes set); `family_calls`: each other precision family's calls (activation
    dtype → its step's calls); `alt_batch_calls`: the calls counted at `alt_batch`. A
    setting its share of the budget ran out in is said in `notes`, with what a timing took
    there (cuDNN tunes each new shape: on a slow host a timing at ×2 took about a second).
    On a GPU every timing's unit is then profiled for its kernels' own time (`_busy_ms`)."""
    from gpuaudit.workloads.precision import autocast_dtype, float32_matmuls
    from gpuaudit.workloads.timing import is_cuda

    cuda = is_cuda(device)
    budget = budget_s if budget_s is not None else BUDGET_S[cuda]
    rank = {id(c): key for key, c in ranks(calls).items()}
    chosen = choose(calls, max_units)
    families = {fam: ranks(cs) for fam, cs in family_calls.items()}
    at_batch = ranks(alt_batch_calls or [])
    # Breadth first, the recorded precision before the others: its time is the denominator
    # of every ratio a prediction takes from a unit (on one H200 a 5 s budget spent on fp32
    # and tf32 first left ConvNeXt's and a U-Net's bf16 units with no ratio at all); then
    # every unit in every other precision, then at other batches, so that a budget spent
    # on cuDNN's autotuning leaves no unit without its precision ratios.
    own = [(precision, 1.0, 1.0)] if precision in TIMED_PRECISIONS else []
    settings = own + [(p, 1.0, 1.0) for p in TIMED_PRECISIONS
                      if (cuda or p != "tf32") and (p, 1.0, 1.0) not in own]
    if alt_batch_calls and alt_batch:
        settings += [(precision, s, 1.0) for s in BATCH_SCALES]
    # last, the convolutions at a wider width (`workloads.widen`), in the recorded precision
    wider = {i: widened(c) for i, (c, _n) in enumerate(chosen)}
    if own and any(wider.values()):
        settings.append((precision, 1.0, WIDTH_SCALE))
    if budget_s is None:
        budget = max(budget, PER_TIMING_S[cuda] * len(chosen) * len(settings))
    each = budget / max(1, len(chosen) * len(settings))  # a timing's samples
    wall = budget if budget_s is not None else max(budget, CAP_S[cuda])
    # the wider convolutions take a share on top: the other settings keep theirs
    shares = len(settings) - sum(1 for *_, w in settings if w != 1.0)
    start = time.perf_counter()
    # per unit its timings (precision, batch scale, width scale, ms, the replay's maker)
    times: dict[int, list[tuple[str, float, float, float, Maker]]] = \
        {i: [] for i in range(len(chosen))}
    short: list[str] = []
    for k, (p, scale, width) in enumerate(settings):
        # each setting by its share of the budget, what one leaves passed on: a slow one (a
        # bf16 step's units in fp32, cuDNN autotuning) does not starve those after it
        stop = start + wall * (k + 1) / shares
        began, done = time.perf_counter(), 0
        for i, (c, _n) in enumerate(chosen):
            if time.perf_counter() > stop:
                took_s = (time.perf_counter() - began) / max(done, 1)
                at = f" ×{scale:g}" if scale != 1.0 else ""
                at += f" at ×{width:g} the channels" if width != 1.0 else ""
                of = len(chosen) if width == 1.0 else sum(w is not None for w in wider.values())
                short.append(f"{p}{at} {done} of {of} ({took_s:.2f} s a timing)")
                break
            if own and k > 0 and not times[i]:
                continue  # not timed in its own precision: nothing to take a ratio to
            call = c if width == 1.0 else wider[i]
            if call is None:
                continue
            key = rank[id(c)]
            family = call if _family(p) == _family(precision) else \
                families.get(_family(p), {}).get(key)
            alt = at_batch.get(key) if scale != 1.0 else None
            if family is None or (scale != 1.0 and alt is None):
                continue
            make = functools.partial(replay, torch, device, call, family, alt, batch,
                                     alt_batch or batch, scale, autocast_dtype(torch, p))
            try:
                with float32_matmuls(torch, tf32=p != "fp32"):
                    ms = _call_ms(torch, device, make(), each)
            except (RuntimeError, ValueError, TypeError, IndexError) as exc:
                if cuda and "out of memory" in str(exc).lower():
                    torch.cuda.empty_cache()
                continue
            times[i].append((p, scale, width, ms, make))
            done += 1
    if short and notes is not None:
        took = wall * len(settings) / shares
        notes.append(f"units timed alone in {took:.0f} s, settings cut short: "
                     + "; ".join(short))
    every = [(i, t) for i in range(len(chosen)) for t in times[i]]
    busy = _busy_ms(torch, device, [(t[0], t[4]) for _, t in every]) \
        if cuda and every else {}
    made: dict[int, list[UnitTime]] = {i: [] for i in range(len(chosen))}
    for j, (i, (p, scale, width, ms, _make)) in enumerate(every):
        made[i].append(UnitTime(precision=p, batch_scale=scale, width_scale=width,
                                ms=round(ms, 6), busy_ms=own_time(busy.get(j), ms)))
    out = [TimedUnit(op_class=c.op_class, unit=c.name, signature=c.signature()[:200], count=n,
                     flops=c.flops, times=tuple(made[i])) for i, (c, n) in enumerate(chosen)]
    return out
