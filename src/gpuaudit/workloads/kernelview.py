"""What the step took (the op profile's kernel view): the kernels and copies of a few steps
under `torch.profiler`, each charged to the unit that launched it (`workloads.optrace`) and
so to that unit's class and group; the matmul-bound classes' kernels with their grids (their
waves); the GPU's busy time; and the timeline, every kernel in launch order with when the
host launched it, when it ran and for how long, and the host's waits for the device.

Kernel names are the second witness (`opclass.disagrees`): a kernel that multiplies or
convolves under a memory-bound unit is `unknown` time, named. Kernels launched inside a
compiled region (inductor's) have no operator: their names class them. Kernels no operator
launched at all are `unattributed`.

On a CPU there are no kernels: each aten operator's own CPU time (its duration less its
children's) is charged to its unit.
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuaudit.model.opprofile import TENSOR_CLASSES
from gpuaudit.workloads import optrace
from gpuaudit.workloads.opclass import disagrees, kernel_class

GroupKey = tuple[str, str]
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
SYNC_COPY_US = 20.0  # a copy call the host spent this long in waited for the device
COMPILED_GRAPH = "## Call CompiledFxGraph"  # the frame a compiled graph's kernels run in


@dataclass
class TimelineRows:
    launch_us: list[float] = field(default_factory=list)
    start_us: list[float] = field(default_factory=list)
    dur_us: list[float] = field(default_factory=list)
    group: list[GroupKey] = field(default_factory=list)
    syncs: list[tuple[float, float]] = field(default_factory=list)
    step_start_us: list[float] = field(default_factory=list)
    blocked_us: list[float] = field(default_factory=list)


@dataclass
class KernelView:
    """Device time per class and per unit group over the profiled steps (per step), with
    the matmul-bound kernels' grids, the GPU's busy time and the timeline."""

    steps: int
    us: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    count: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    group_us: dict[GroupKey, float] = field(default_factory=lambda: defaultdict(float))
    group_count: dict[GroupKey, int] = field(default_factory=lambda: defaultdict(int))
    # (short name, blocks, blocks per SM) → [count, total µs], with the kernel's class
    grids: dict[tuple[str, int, float], list[float]] = field(
        default_factory=lambda: defaultdict(lambda: [0, 0.0]))
    grid_class: dict[tuple[str, int, float], str] = field(default_factory=dict)
    unknown: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    busy_us: float = 0.0  # union of kernel intervals
    span_us: float = 0.0  # first kernel start to last kernel end
    source: str = "cuda kernels"
    timeline: TimelineRows | None = None

    def per_step_ms(self, cls: str) -> float:
        return self.us.get(cls, 0.0) / self.steps / 1e3


def _union_us(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -math.inf
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def shared_us(starts: Sequence[float], durs: Sequence[float], keys: Sequence[Any]
              ) -> list[float]:
    """Each kernel's charge: its duration, the time it ran beside other kernels of its own
    group (`keys`) shared out equally among them. cuDNN runs some grouped convolutions as one
    kernel per group on several streams at once: on the H200 an fp32 depthwise 7×7 backward
    of ConvNeXt's first stage launched 259 kernels that summed to 7.5 ms in a call of 2.6 ms.
    Kernels of different groups keep their whole time (a DDP all-reduce beside the
    backward's compute takes both their times)."""
    charged = [0.0] * len(durs)
    by_group: dict[Any, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        by_group[key].append(i)
    for members in by_group.values():
        edges = sorted([(starts[i], 1, i) for i in members] +
                       [(starts[i] + durs[i], 0, i) for i in members])
        running: set[int] = set()
        last = 0.0
        for t, opens, i in edges:  # at a tie, ends before starts
            if running:
                share = (t - last) / len(running)
                for j in running:
                    charged[j] += share
            last = t
            if opens:
                running.add(i)
            else:
                running.discard(i)
    return charged


def short(name: str) -> str:
    return name.split("(")[0].split("<")[0][-60:]


def _is_sync(ev: dict[str, Any], copies: dict[Any, str]) -> bool:
    """A host call that waits for the device: a synchronize, a blocking copy, an
    asynchronous copy to pageable memory (the `.item()` of a loss, `.cpu()`). A launch that
    took long waited for room in the launch queue, not for the device to finish."""
    name = str(ev.get("name", ""))
    if "Synchronize" in name:
        return True
    if name in ("cudaMemcpy", "cuMemcpy", "cuMemcpyDtoH_v2"):
        return True
    if name.startswith(("cudaMemcpyAsync", "cuMemcpyAsync")) and \
            float(ev.get("dur", 0.0)) >= SYNC_COPY_US:
        kind = copies.get((ev.get("args") or {}).get("correlation"), "")
        return "Pageable" in kind and "DtoH" in kind
    return False


def parse_trace(events: Iterable[dict[str, Any]], steps: int) -> KernelView:
    """A chrome trace's kernels and copies, charged to their units (module docstring)."""
    events = list(events)
    tree = optrace.build(events)
    view = KernelView(steps=max(1, steps), timeline=TimelineRows())
    runtime = {}
    syncs = []
    calls: list[tuple[float, float, str]] = []  # (start, duration, name) of every runtime call
    copies = {(e.get("args") or {}).get("correlation"): str(e.get("name", "")) for e in events
              if e.get("ph") == "X" and e.get("cat") == "gpu_memcpy"}
    for ev in events:
        if ev.get("ph") != "X" or ev.get("cat") not in RUNTIME_CATS:
            continue
        corr = (ev.get("args") or {}).get("correlation")
        if corr is not None:
            runtime[corr] = ev
        if _is_sync(ev, copies):
            syncs.append((float(ev["ts"]), float(ev["ts"]) + float(ev.get("dur", 0.0))))
        else:
            calls.append((float(ev["ts"]), float(ev.get("dur", 0.0)), str(ev.get("name", ""))))
    rows: list[tuple[float, float, float, GroupKey]] = []
    spans: list[tuple[float, float]] = []
    grid_of: list[tuple[str, int, float] | None] = []
    for ev in events:
        cat = str(ev.get("cat", "")).lower()
        if ev.get("ph") != "X" or cat not in DEVICE_CATS:
            continue
        name = str(ev.get("name", ""))
        args = ev.get("args") or {}
        launch = runtime.get(args.get("correlation"))
        anchor = tree.enclosing(launch.get("tid"), float(launch["ts"])) if launch else None
        at = optrace.attribute(tree, anchor)
        cls, unit = at.op_class, at.unit
        if cat != "kernel":
            cls = "copy"
        elif unit == "compiled":
            cls = kernel_class(name)
        elif disagrees(cls, name):
            view.unknown[(unit, f"its kernel {short(name)} multiplies matrices under a "
                                f"{cls} operator")] += float(ev.get("dur", 0.0))
            cls = "unknown"
        elif cls == "unattributed":
            view.unknown[(short(name), "no operator launched it")] += float(ev.get("dur", 0.0))
        elif cls == "unknown":
            view.unknown[(unit, unknown_why(unit))] += float(ev.get("dur", 0.0))
        dur = float(ev.get("dur", 0.0))
        start = float(ev.get("ts", 0.0))
        spans.append((start, start + dur))
        rows.append((float(launch["ts"]) if launch else start, start, dur, (cls, unit)))
        grid_key = None
        if cat == "kernel" and cls in TENSOR_CLASSES:
            grid = args.get("grid") or [0]
            blocks = int(math.prod(int(g) for g in grid)) if grid else 0
            per_sm = float(args.get("blocks per SM") or 0.0)
            grid_key = (short(name), blocks, round(per_sm, 3))
            view.grid_class.setdefault(grid_key, cls)
        grid_of.append(grid_key)
    charges = shared_us([r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows])
    for (_, _, _, key), grid_key, charged in zip(rows, grid_of, charges, strict=True):
        view.us[key[0]] += charged
        view.count[key[0]] += 1
        view.group_us[key] += charged
        view.group_count[key] += 1
        if grid_key is not None:
            entry = view.grids[grid_key]
            entry[0] += 1
            entry[1] += charged
    if spans:
        view.busy_us = _union_us(spans)
        view.span_us = max(e for _, e in spans) - min(s for s, _ in spans)
    _timeline(view, rows, syncs, tree, calls)
    return view


def _excess(calls: list[tuple[float, float, str]]) -> list[tuple[float, float]]:
    """(start, µs beyond the usual) of runtime calls that took longer than their kind's
    usual (its lower quartile: in a step that fills the launch queue most launches wait):
    the host blocked in them (a full launch queue, an allocation)."""
    by_name: dict[str, list[float]] = defaultdict(list)
    for _, dur, name in calls:
        by_name[name].append(dur)
    usual = {name: sorted(d)[len(d) // 4] for name, d in by_name.items()}
    return sorted((ts, dur - usual[name]) for ts, dur, name in calls
                  if dur - usual[name] > 1.0)


def _timeline(view: KernelView, rows: list[tuple[float, float, float, GroupKey]],
              syncs: list[tuple[float, float]], tree: optrace.OpTree,
              calls: list[tuple[float, float, str]]) -> None:
    tl = view.timeline
    assert tl is not None
    if not rows:
        return
    rows.sort(key=lambda r: r[0])
    t0 = rows[0][0]
    excess = _excess(calls)
    j = 0
    prev = -math.inf
    for launch, start, dur, key in rows:
        blocked = 0.0
        while j < len(excess) and excess[j][0] < launch:
            if excess[j][0] >= prev:
                blocked += excess[j][1]
            j += 1
        prev = launch
        tl.launch_us.append(round(launch - t0, 3))
        tl.start_us.append(round(start - t0, 3))
        tl.dur_us.append(round(dur, 3))
        tl.group.append(key)
        tl.blocked_us.append(round(blocked, 3))
    end = max(s + d for _, s, d, _ in rows)
    tl.syncs = [(round(a - t0, 3), round(b - t0, 3)) for a, b in sorted(syncs)
                if b >= t0 and a <= end]
    tl.step_start_us = [round(s.ts - t0, 3) for s in tree.steps]


def unknown_why(unit: str) -> str:
    """Why a unit classed `unknown` by its name is not understood."""
    return "an operator outside aten" if "::" in unit else "an aten operator without a rule"


def cpu_view(events: Iterable[dict[str, Any]], steps: int) -> KernelView:
    """On a CPU: each aten operator's own time charged to its unit, and a custom operator's
    (torchvision::roi_align: its loops run in its own frame, between the aten operators it
    calls) to its own."""
    tree = optrace.build(events)
    view = KernelView(steps=max(1, steps), source="cpu operators (self time)")
    children: dict[int, float] = defaultdict(float)
    for evs in tree.by_tid.values():
        for ev in evs:
            if ev.parent is not None:
                children[id(ev.parent)] += ev.end - ev.ts
    for evs in tree.by_tid.values():
        for ev in evs:
            own = max(0.0, ev.end - ev.ts - children.get(id(ev), 0.0))
            if own <= 0:
                continue
            at = optrace.attribute(tree, ev)
            if ev.name.startswith(COMPILED_GRAPH):
                # inductor's C++ kernels run in this frame, nameless: time with no class
                at = optrace.Attribution("unknown", "compiled")
                view.unknown[("compiled", "a compiled region's own code (inductor's kernels "
                                          "have no names on the CPU)")] += own
            elif not ev.is_aten and (at.event is None or not at.event.is_custom or
                                     ev.name.startswith(optrace.EVALUATE)):
                continue  # the autograd engine's, a module's: not an operator's own work
            elif at.op_class == "unknown":
                view.unknown[(at.unit, unknown_why(at.unit))] += own
            view.us[at.op_class] += own
            view.count[at.op_class] += 1
            view.group_us[(at.op_class, at.unit)] += own
            view.group_count[(at.op_class, at.unit)] += 1
    view.busy_us = sum(view.us.values())
    view.span_us = view.busy_us
    return view


def profile_kernels(torch: Any, device: Any, fn: Callable[[], Any], steps: int, *,
                    keep: str | None = None) -> KernelView:
    """`steps` calls of `fn` under torch.profiler, each inside a step mark: CUDA kernels on a
    GPU, the aten operators' own CPU time on a CPU. `keep`: a path to save the trace to.

    A GPU profile that caught no device activity at all is taken once more: with
    TEARDOWN_CUPTI=1 (set so later timings run without CUPTI attached), a profile started
    while an earlier one's CUPTI teardown ran (the op count's CPU profiles come just before)
    came back with CPU operators only on torch 2.11 on an H200; the next one was whole."""
    from gpuaudit.workloads.timing import is_cuda, release_cupti_after_profiling

    cuda = is_cuda(device)
    release_cupti_after_profiling()
    events = _profiled_events(torch, device, fn, steps, cuda)
    if cuda:
        events = _retaken(events, lambda: _profiled_events(torch, device, fn, steps, cuda))
    if keep:
        save_trace(events, keep)
    return parse_trace(events, steps) if cuda else cpu_view(events, steps)


def _profiled_events(torch: Any, device: Any, fn: Callable[[], Any], steps: int,
                     cuda: bool) -> list[dict[str, Any]]:
    from torch.profiler import ProfilerActivity, record_function

    from gpuaudit.workloads.timing import profiled, sync

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync(torch, device)
    with profiled(acts, record_shapes=True) as prof:
        for i in range(steps):
            with record_function(f"{optrace.STEP_MARK}#{i}"):
                fn()
        sync(torch, device)
    return optrace.exported(prof)


def _retaken(events: list[dict[str, Any]], again: Callable[[], list[dict[str, Any]]]
             ) -> list[dict[str, Any]]:
    """`events`, or a session taken once more where they hold no device activity (a session
    started while an earlier one's CUPTI teardown ran: `profile_kernels`)."""
    return events if any(e.get("cat") in DEVICE_CATS for e in events) else again()


MARK = "gpuaudit.mark:"


def marked_busy_us(events: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Per `MARK`ed range (its label): the union of the intervals of the kernels and copies
    launched while it was open, on any thread (a backward's kernels are launched by
    autograd's device thread while the marked call waits for it). The host's ranges only:
    kineto also draws each range on the device's timeline ("gpu_user_annotation", in the
    device's time), and those, taken for the host's, sent a ConvNeXt's kernels to whichever
    range the device was in and read its units at a quarter of their time."""
    events = list(events)
    marks = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)),
                    str(e["name"])[len(MARK):]) for e in events
                   if e.get("ph") == "X" and e.get("cat") == "user_annotation"
                   and str(e.get("name", "")).startswith(MARK))
    starts = [m[0] for m in marks]
    launches = {(e.get("args") or {}).get("correlation"): float(e["ts"])
                for e in events if e.get("ph") == "X" and e.get("cat") in RUNTIME_CATS}
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        if e.get("ph") != "X" or str(e.get("cat", "")).lower() not in DEVICE_CATS:
            continue
        launch = launches.get((e.get("args") or {}).get("correlation"))
        at = bisect.bisect_right(starts, launch) - 1 if launch is not None else -1
        if at >= 0 and launch is not None and launch <= marks[at][1]:
            ts = float(e.get("ts", 0.0))
            spans[marks[at][2]].append((ts, ts + float(e.get("dur", 0.0))))
    return {label: _union_us(s) for label, s in spans.items()}


def busy_per_call_us(torch: Any, device: Any,
                     calls: list[tuple[str, Callable[[], Callable[[], Any]]]],
                     repeat: int = 3) -> dict[str, float]:
    """Each labelled call's kernels' own time a call (`marked_busy_us` over `repeat` calls,
    after one unmarked), under one profiler session: the device's gaps between its kernels
    left out. Each call is made by its maker inside the session, one at a time (their
    tensors are not all held at once); one whose maker or call fails is left out. A session
    that caught no device activity is taken once more (`profile_kernels`: the first one of
    a process came back with CPU operators only on torch 2.11 on an H200)."""
    from gpuaudit.workloads.timing import release_cupti_after_profiling

    release_cupti_after_profiling()
    events = _retaken(_marked_events(torch, device, calls, repeat),
                      lambda: _marked_events(torch, device, calls, repeat))
    return {label: us / repeat for label, us in marked_busy_us(events).items()}


def _marked_events(torch: Any, device: Any,
                   calls: list[tuple[str, Callable[[], Callable[[], Any]]]],
                   repeat: int) -> list[dict[str, Any]]:
    from torch.profiler import ProfilerActivity, record_function

    from gpuaudit.workloads.timing import profiled, sync

    sync(torch, device)
    with profiled([ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for label, make in calls:
            try:
                fn = make()
                fn()
                for _ in range(repeat):
                    with record_function(MARK + label):
                        fn()
            except (RuntimeError, ValueError, TypeError, IndexError):
                continue
            finally:
                fn = None
        sync(torch, device)
    return optrace.exported(prof)


def save_trace(events: list[dict[str, Any]], path: str) -> None:
    """A chrome trace's events as the op profile reads them, gzipped (fixtures, debugging)."""
    keep = ("External id", "correlation", "Sequence number", "Fwd thread id", "Input Dims",
            "grid", "blocks per SM", "stream")
    out = []
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in (
                "cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "kernel",
                "gpu_memcpy", "gpu_memset"):
            continue
        args = {k: v for k, v in (e.get("args") or {}).items() if k in keep}
        out.append({"ph": "X", "cat": e["cat"], "name": e.get("name"), "tid": e.get("tid"),
                    "ts": e.get("ts"), "dur": e.get("dur"), "args": args})
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": out}, f, separators=(",", ":"))

