"""A PyTorch profiler (Kineto) trace, summarised for the rules.

Definitions follow Holistic Trace Analysis (HTA 0.6) where it has one:

- temporal breakdown (`get_temporal_breakdown`): GPU events of one device merged across all
  streams; `span` = last end − first start, `idle` = span − merged busy time, `compute` =
  merged time of COMPUTATION kernels, `non_compute` = the rest (exposed communication,
  memcpy/memset). Communication overlapping compute counts as compute, as in HTA.
- idle breakdown (`get_idle_time_breakdown`): per stream, the gap before each GPU event is
  *host wait* when its launch call started after the previous event on that stream ended,
  *kernel wait* when not and the gap is under 30 µs, *other* otherwise.
- short kernels (`get_cuda_kernel_launch_stats`): the kernel ran for less time than its launch
  call took on the CPU (launch call ≤ 50 µs).
- communication/computation overlap (`get_comm_comp_overlap`): time both run ÷ merged
  communication time.

Where ours differ: timestamps stay fractional µs (HTA rounds starts up and ends down to whole
µs), the kernel-wait threshold is 30 µs (HTA documents "30 ns" but compares µs), and the
window is the profiler's steps (`ProfilerStep#N`) when the trace has them, the whole trace
otherwise. Beyond HTA (which sees only GPU timelines): the DataLoader's share of the step (the
TensorBoard plugin's definition: CPU ops named `enumerate(DataLoader)#…`), host syncs per step
(sync calls, and `.item()` outside the optimizer's step, which reads a CPU counter), tensor-core
use from kernel names, pageable copies.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuaudit.errors import BadInputError
from gpuaudit.model.schema import describe_validation_error
from gpuaudit.model.units import Bytes, GpuIndex
from gpuaudit.reading import read_json

from .kernels import KernelType, TensorCore, kernel_type, memcpy_kind, tensor_core_use

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver"}
KERNEL_WAIT_US = 30.0  # HTA's consecutive_kernel_delay (compared in µs)
SHORT_LAUNCH_US = 50.0  # HTA's runtime_cutoff
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
              "cudaMemcpy", "cuStreamSynchronize", "cuCtxSynchronize")
SYNC_OPS = ("aten::item", "aten::_local_scalar_dense")
LOADER_PREFIX = "enumerate(DataLoader)#"
# The ops that do a model's math on the CPU (the inner ones: aten::linear calls aten::addmm).
MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::convolution"}
# The ops a model's first layer runs, and which input carries its rows (see _rows)
FIRST_LAYER_OPS = {"aten::conv1d": 0, "aten::conv2d": 0, "aten::conv3d": 0,
                   "aten::convolution": 0, "aten::linear": 0, "aten::addmm": 1, "aten::mm": 0,
                   "aten::matmul": 0, "aten::embedding": 1}


@dataclass(frozen=True)
class Breakdown:
    """HTA's temporal and idle breakdown of one device (µs)."""

    device: int
    span_us: float
    busy_us: float
    compute_us: float
    idle_us: float
    non_compute_us: float
    host_wait_us: float = 0.0
    kernel_wait_us: float = 0.0
    other_wait_us: float = 0.0
    # Idle gaps a host sync returned in: the GPU drained its queue for the sync and waited
    # while the CPU, released, launched the next work (ours, beyond HTA).
    sync_idle_us: float = 0.0

    def share(self, part_us: float) -> float:
        return part_us / self.span_us if self.span_us > 0 else 0.0


@dataclass(frozen=True)
class TraceStats:
    """What a profiler trace shows, per step where it has steps."""

    steps: int
    step_time_us: float | None  # median ProfilerStep duration
    window_us: float
    devices: tuple[Breakdown, ...] = ()
    kernels: int = 0
    kernel_time_us: float = 0.0  # summed (not merged), as HTA's kernel breakdown
    type_time_us: dict[str, float] = field(default_factory=dict)  # KernelType → summed µs
    short_kernels: int = 0
    launched_kernels: int = 0  # kernels whose launch call is in the trace
    median_kernel_us: float | None = None
    matmul_time_us: dict[str, float] = field(default_factory=dict)  # TensorCore → µs
    top_matmuls: tuple[tuple[str, float, str], ...] = ()  # (name, µs, tensor-core class)
    memcpy_time_us: dict[str, float] = field(default_factory=dict)  # "HtoD pageable" → µs
    memcpy_bytes: dict[str, int] = field(default_factory=dict)
    comm_time_us: float = 0.0  # merged
    comm_overlap_us: float = 0.0
    sync_calls: int = 0
    sync_time_us: float = 0.0
    item_calls: int = 0
    loader_time_us: float = 0.0
    cpu_ops: int = 0  # top-level aten ops
    matmul_ops: int = 0  # aten::mm, addmm, bmm, convolution… (the model's math)
    median_matmul_op_us: float | None = None
    cuda: bool = False  # the trace has GPU events
    # The rows the step's first layer received (median over steps): a convolution's samples,
    # a linear layer's or embedding's samples × positions; None where the trace has no shapes
    # (recorded without record_shapes) or no such layer.
    batch: int | None = None
    batch_op: str | None = None  # the aten op it was read from

    def per_step(self, count: float) -> float:
        return count / self.steps if self.steps else count

    @property
    def loader_share(self) -> float:
        return self.loader_time_us / self.window_us if self.window_us > 0 else 0.0

    @property
    def sync_share(self) -> float:
        return self.sync_time_us / self.window_us if self.window_us > 0 else 0.0

    @property
    def comm_overlap_share(self) -> float | None:
        return self.comm_overlap_us / self.comm_time_us if self.comm_time_us > 0 else None

    @property
    def tensor_core_share(self) -> float | None:
        """Of the matmul/convolution time whose kind is known, the share on tensor cores."""
        yes = self.matmul_time_us.get(TensorCore.YES.value, 0.0)
        no = self.matmul_time_us.get(TensorCore.NO.value, 0.0)
        return yes / (yes + no) if yes + no > 0 else None


MAX_SPAN_US = 30 * 86400e6  # a profiler trace covers seconds to minutes; 30 days is damage


class _Args(BaseModel):
    """The arguments of an event that the analysis reads; others pass unread."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)
    device: GpuIndex | None = None
    stream: int | str | None = None
    correlation: int | str | None = None
    bytes: Bytes | None = None


class _Complete(BaseModel):
    """A complete event ("ph": "X") as the analysis reads it: a time, a duration that is not
    negative, a name and category that are text, arguments that are a mapping."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)
    ph: str
    ts: Annotated[float, Field(ge=0, le=1e17)]  # µs since the epoch or the profiler's start
    dur: Annotated[float, Field(ge=0, le=MAX_SPAN_US)]
    name: str = ""
    cat: str | None = None
    args: _Args = _Args()


def read_trace(path: Path) -> dict[str, Any]:
    """A Chrome trace as torch.profiler exports it (.json or .json.gz), its complete events
    checked (a negative duration, a time that is text, args that are a list are a damaged
    trace, named with the event's place)."""
    doc = read_json(path, "profiler trace")
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise BadInputError(f"{path} is not a PyTorch profiler trace (no traceEvents)")
    first, last = float("inf"), float("-inf")
    for i, event in enumerate(doc["traceEvents"]):
        if isinstance(event, dict) and event.get("ph") == "X":
            try:
                e = _Complete.model_validate(event)
            except ValidationError as exc:
                raise BadInputError(f"profiler trace {path}: traceEvents.{i}."
                                    f"{describe_validation_error(exc)}") from None
            first, last = min(first, e.ts), max(last, e.ts + e.dur)
    if last - first > MAX_SPAN_US:
        raise BadInputError(f"profiler trace {path}: its events span {(last - first) / 864e8:.0f}"
                            " days: not one profiling session")
    return doc


def merge(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def total(intervals: Iterable[tuple[float, float]]) -> float:
    return sum(b - a for a, b in intervals)


def overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Time in both of two merged interval lists."""
    i = j = 0
    out = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            out += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _complete(events: list[Any]) -> list[dict[str, Any]]:
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"
            and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))]


def _window(events: list[dict[str, Any]]) -> tuple[float, float, list[float]]:
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")
             and e.get("cat") in ("user_annotation", "cpu_op", "python_function")]
    if steps:
        start = min(e["ts"] for e in steps)
        end = max(e["ts"] + e["dur"] for e in steps)
        return start, end, [float(e["dur"]) for e in steps]
    start = min((e["ts"] for e in events), default=0.0)
    end = max((e["ts"] + e["dur"] for e in events), default=0.0)
    return start, end, []


def _inside(e: dict[str, Any], start: float, end: float) -> bool:
    return e["ts"] >= start and e["ts"] < end


def _device_breakdowns(gpu: list[dict[str, Any]], launch_ts: dict[Any, float],
                       sync_ends: Iterable[float] = ()) -> list[Breakdown]:
    by_device: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in gpu:
        by_device[int(e.get("args", {}).get("device", 0) or 0)].append(e)
    out = []
    for device, evs in sorted(by_device.items()):
        spans = [(e["ts"], e["ts"] + e["dur"]) for e in evs]
        busy = merge(spans)
        span = busy[-1][1] - busy[0][0] if busy else 0.0
        compute = merge((e["ts"], e["ts"] + e["dur"]) for e in evs
                        if e.get("cat") == "kernel"
                        and kernel_type(str(e.get("name", ""))) is KernelType.COMPUTATION)
        busy_us, compute_us = total(busy), total(compute)
        waits = {"host": 0.0, "kernel": 0.0, "other": 0.0}
        by_stream: dict[Any, list[dict[str, Any]]] = defaultdict(list)
        for e in evs:
            by_stream[e.get("args", {}).get("stream")].append(e)
        for stream_events in by_stream.values():
            stream_events.sort(key=lambda e: e["ts"])
            prev_end: float | None = None
            for e in stream_events:
                if prev_end is not None and e["ts"] > prev_end:
                    gap = e["ts"] - prev_end
                    launched = launch_ts.get(e.get("args", {}).get("correlation"))
                    if launched is not None and launched > prev_end:
                        waits["host"] += gap
                    elif gap < KERNEL_WAIT_US:
                        waits["kernel"] += gap
                    else:
                        waits["other"] += gap
                prev_end = max(prev_end or 0.0, e["ts"] + e["dur"])
        out.append(Breakdown(device=device, span_us=span, busy_us=busy_us,
                             compute_us=compute_us, idle_us=span - busy_us,
                             non_compute_us=span - compute_us - (span - busy_us),
                             host_wait_us=waits["host"], kernel_wait_us=waits["kernel"],
                             other_wait_us=waits["other"],
                             sync_idle_us=_sync_idle(busy, sync_ends)))
    return out


def _sync_idle(busy: list[tuple[float, float]], sync_ends: Iterable[float]) -> float:
    """The idle gaps between merged busy intervals in which a sync call returned."""
    ends = sorted(sync_ends)
    idle, j = 0.0, 0
    for (_a, gap_start), (gap_end, _b) in pairwise(busy):
        while j < len(ends) and ends[j] < gap_start:
            j += 1
        if j < len(ends) and ends[j] <= gap_end:
            idle += gap_end - gap_start
    return idle


def analyse(doc: dict[str, Any]) -> TraceStats:
    events = _complete(doc.get("traceEvents", []))
    start, end, step_durs = _window(events)
    inside = [e for e in events if _inside(e, start, end)]
    gpu = [e for e in inside if e.get("cat") in GPU_CATS]
    runtime = [e for e in inside if e.get("cat") in RUNTIME_CATS]
    launches = {e.get("args", {}).get("correlation"): e for e in runtime
                if "correlation" in e.get("args", {})}
    launch_ts = {k: float(e["ts"]) for k, e in launches.items()}
    kernels = [e for e in gpu if e.get("cat") == "kernel"]

    syncs = [e for e in runtime if str(e.get("name", "")) in SYNC_CALLS]
    type_time: dict[str, float] = defaultdict(float)
    matmul: dict[str, float] = defaultdict(float)
    per_name: dict[str, float] = defaultdict(float)
    short = launched = 0
    for k in kernels:
        name = str(k.get("name", ""))
        type_time[kernel_type(name).value] += k["dur"]
        tc = tensor_core_use(name)
        if tc is not TensorCore.NOT_MATMUL:
            matmul[tc.value] += k["dur"]
            per_name[name] += k["dur"]
        launch = launches.get(k.get("args", {}).get("correlation"))
        if launch is not None:
            launched += 1
            if launch["dur"] <= SHORT_LAUNCH_US and k["dur"] < launch["dur"]:
                short += 1
    top = sorted(per_name.items(), key=lambda kv: -kv[1])[:5]

    copy_time: dict[str, float] = defaultdict(float)
    copy_bytes: dict[str, int] = defaultdict(int)
    for e in gpu:
        if e.get("cat") != "gpu_memcpy":
            continue
        kind = memcpy_kind(str(e.get("name", "")))
        if kind is None:
            continue
        key = f"{kind[0]} {'pageable' if kind[1] else 'pinned'}" \
            if kind[0] in ("HtoD", "DtoH") else kind[0]
        copy_time[key] += e["dur"]
        copy_bytes[key] += int(e.get("args", {}).get("bytes", 0) or 0)

    comm = merge((k["ts"], k["ts"] + k["dur"]) for k in kernels
                 if kernel_type(str(k.get("name", ""))) is KernelType.COMMUNICATION)
    comp = merge((k["ts"], k["ts"] + k["dur"]) for k in kernels
                 if kernel_type(str(k.get("name", ""))) is KernelType.COMPUTATION)

    cpu_ops = [e for e in inside if e.get("cat") == "cpu_op"]
    # Optimizers read their step counter with .item() on a CPU tensor: no sync, left out.
    optim = merge((e["ts"], e["ts"] + e["dur"]) for e in inside
                  if str(e.get("name", "")).startswith("Optimizer.step#"))

    def user_items(name: str) -> int:
        return sum(1 for e in cpu_ops if e.get("name") == name
                   and not any(a <= e["ts"] < b for a, b in optim))

    items = user_items("aten::item") or user_items("aten::_local_scalar_dense")
    loader = merge((e["ts"], e["ts"] + e["dur"]) for e in inside
                   if str(e.get("name", "")).startswith(LOADER_PREFIX))
    mm_durs = [e["dur"] for e in cpu_ops if e.get("name") in MATMUL_OPS]
    durs = [k["dur"] for k in kernels]
    return TraceStats(
        steps=len(step_durs), step_time_us=statistics.median(step_durs) if step_durs else None,
        window_us=end - start,
        devices=tuple(_device_breakdowns(gpu, launch_ts, [e["ts"] + e["dur"] for e in syncs])),
        kernels=len(kernels), kernel_time_us=sum(durs), type_time_us=dict(type_time),
        short_kernels=short, launched_kernels=launched,
        median_kernel_us=statistics.median(durs) if durs else None,
        matmul_time_us=dict(matmul), top_matmuls=tuple((n, t, tensor_core_use(n).value)
                                                       for n, t in top),
        memcpy_time_us=dict(copy_time), memcpy_bytes=dict(copy_bytes),
        comm_time_us=total(comm), comm_overlap_us=overlap(comm, comp),
        sync_calls=len(syncs), sync_time_us=sum(e["dur"] for e in syncs), item_calls=items,
        loader_time_us=total(loader), cpu_ops=len(_top_level(cpu_ops)), matmul_ops=len(mm_durs),
        median_matmul_op_us=statistics.median(mm_durs) if mm_durs else None,
        cuda=bool(gpu), **_batch(events, cpu_ops))


def _rows(name: str, dims: Any) -> int | None:
    """The rows an op's input holds: a convolution's samples (dimension 0); a matmul's or
    linear layer's rows (every dimension but the last); an embedding's looked-up indices."""
    i = FIRST_LAYER_OPS[name]
    if not isinstance(dims, list) or len(dims) <= i or not isinstance(dims[i], list) \
            or not dims[i] or not all(isinstance(d, int) and d > 0 for d in dims[i]):
        return None
    shape = dims[i]
    if "conv" in name:
        return int(shape[0])
    keep = shape if name == "aten::embedding" else shape[:-1]
    return math.prod(keep) if keep else None


def _batch(events: list[dict[str, Any]], cpu_ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The first layer's rows in each profiled step (the earliest op of FIRST_LAYER_OPS with
    recorded input shapes), their median over the steps."""
    firsts = [e for e in cpu_ops if e.get("name") in FIRST_LAYER_OPS
              and "Input Dims" in e.get("args", {})]
    if not firsts:
        return {}
    firsts.sort(key=lambda e: (e["ts"], -e["dur"]))
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if str(e.get("name", "")).startswith("ProfilerStep#")] or [(float("-inf"),
                                                                         float("inf"))]
    found: list[tuple[int, str]] = []
    for a, b in steps:
        first = next((e for e in firsts if a <= e["ts"] < b), None)
        rows = _rows(first["name"], first["args"]["Input Dims"]) if first else None
        if first and rows:
            found.append((rows, first["name"]))
    if not found:
        return {}
    found.sort()
    rows, op = found[(len(found) - 1) // 2]
    return {"batch": rows, "batch_op": op}


def _top_level(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """aten ops not nested in another aten op of the same thread (what the user's code
    called, not what those ops called inside)."""
    out = []
    by_thread: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for e in ops:
        if str(e.get("name", "")).startswith("aten::"):
            by_thread[(e.get("pid"), e.get("tid"))].append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_end = float("-inf")
        for e in evs:
            if e["ts"] >= open_end:
                out.append(e)
                open_end = e["ts"] + e["dur"]
    return out
