"""How far NVML writes into the memory a caller hands it (docs/monitor-safety.md).

Run on a GPU machine (nvidia-ml-py installed):

    python3 validation/monitor/nvml_probe.py info      # binding and driver versions, struct sizes
    python3 validation/monitor/nvml_probe.py canary    # every caller-memory call with a guard
                                            # area behind the binding's buffer: bytes NVML
                                            # wrote past it
    python3 validation/monitor/nvml_probe.py minimal --iterations 2000
                                            # the smallest reproduction: GPM metrics through
                                            # the binding's own request struct, in a loop,
                                            # with ctypes allocations around it
    python3 validation/monitor/nvml_probe.py sample --seconds 20 --interval 0.1
                                            # the library's sampler, as the recorders drive it

Each prints one JSON document on stdout. Run `minimal` and `sample` under
`PYTHONMALLOC=debug PYTHONFAULTHANDLER=1` to have a heap overrun caught where it happens.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import socket
import sys
import time
from importlib import metadata

GUARD = 64 * 1024
PATTERN = 0xA5
GPM_IDS = (2, 3, 5, 10, 11, 12, 13, 20, 21, 60, 61)


def _written_past(buf: ctypes.Array, start: int) -> int:
    """Bytes from `start` to the last byte that no longer holds the pattern."""
    raw = bytes(buf)[start:]
    last = -1
    for i, b in enumerate(raw):
        if b != PATTERN:
            last = i
    return last + 1


def _guarded(struct_type: type, count: int = 1) -> tuple[ctypes.Array, ctypes.Array, int]:
    """An array of `count` structs followed by GUARD bytes of PATTERN, in one allocation."""
    size = ctypes.sizeof(struct_type) * count
    buf = (ctypes.c_uint8 * (size + GUARD))()
    ctypes.memset(buf, PATTERN, size + GUARD)
    arr = (struct_type * count).from_buffer(buf)
    return buf, arr, size


def info(nvml) -> dict:
    out = {
        "nvidia_ml_py": metadata.version("nvidia-ml-py"),
        "driver": nvml.nvmlSystemGetDriverVersion(),
        "nvml": nvml.nvmlSystemGetNVMLVersion(),
        "python": sys.version.split()[0],
        "binding_NVML_GPM_METRIC_MAX": getattr(nvml, "NVML_GPM_METRIC_MAX", None),
        "sizeof": {},
    }
    for name in ("c_nvmlGpmMetricsGet_t", "c_nvmlGpmMetric_t", "c_nvmlFieldValue_t",
                 "c_nvmlProcessInfo_v3_t", "c_nvmlProcessInfo_v2_t", "c_nvmlEventData_t",
                 "c_nvmlGpmSupport_t", "c_nvmlMemory_t", "c_nvmlPciInfo_t",
                 "c_nvmlDeviceAttributes"):
        t = getattr(nvml, name, None)
        out["sizeof"][name] = ctypes.sizeof(t) if t is not None else None
    return out


def canary(nvml) -> dict:
    fp = nvml._nvmlGetFunctionPointer
    results = {}
    for i in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        r: dict = {}
        # GPM metrics: the binding's request struct, then the guard.
        s1, s2 = nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()
        try:
            nvml.nvmlGpmSampleGet(h, s1)
            time.sleep(0.2)
            nvml.nvmlGpmSampleGet(h, s2)
            buf, arr, size = _guarded(nvml.c_nvmlGpmMetricsGet_t)
            req = arr[0]
            req.version = nvml.NVML_GPM_METRICS_GET_VERSION
            req.numMetrics = len(GPM_IDS)
            req.sample1, req.sample2 = s1, s2
            for slot, mid in zip(req.metrics, GPM_IDS, strict=False):
                slot.metricId = mid
            ret = fp("nvmlGpmMetricsGet")(ctypes.byref(req))
            metric = ctypes.sizeof(nvml.c_nvmlGpmMetric_t)
            header = size - metric * nvml.NVML_GPM_METRIC_MAX
            touched = [k for k in range(nvml.NVML_GPM_METRIC_MAX)
                       if bytes(buf)[header + k * metric: header + (k + 1) * metric]
                       != bytes([PATTERN]) * metric]
            r["gpm_metrics_get"] = {
                "return": ret, "struct_bytes": size,
                "written_past_struct_bytes": _written_past(buf, size),
                "metric_slots_in_binding": nvml.NVML_GPM_METRIC_MAX,
                "slots_written": len(touched), "last_slot_written": max(touched, default=None),
                "values": {str(m.metricId): m.value for m in req.metrics[:len(GPM_IDS)]},
            }
        except nvml.NVMLError as exc:
            r["gpm_metrics_get"] = {"error": str(exc)}
        except Exception as exc:
            r["gpm_metrics_get"] = {"error": repr(exc)}
        finally:
            for s in (s1, s2):
                nvml.nvmlGpmSampleFree(s)
        # Field values: HBM temperature and the NVLink data counters of links 0..17.
        ids = [(82, 0)] + [(f, link) for link in range(18) for f in (138, 139)]
        buf, arr, size = _guarded(nvml.c_nvmlFieldValue_t, len(ids))
        for slot, (f, s) in zip(arr, ids, strict=True):
            slot.fieldId, slot.scopeId = f, s
        ret = fp("nvmlDeviceGetFieldValues")(h, ctypes.c_int32(len(ids)), arr)
        r["field_values"] = {"return": ret, "struct_bytes": size,
                             "written_past_struct_bytes": _written_past(buf, size)}
        # Running processes (compute and graphics, v3), the way the binding sizes them.
        for kind in ("Compute", "Graphics"):
            fn = fp(f"nvmlDeviceGet{kind}RunningProcesses_v3")
            count = ctypes.c_uint(0)
            ret = fn(h, ctypes.byref(count), None)
            n = count.value * 2 + 5
            proc_t = getattr(nvml, "c_nvmlProcessInfo_v3_t", None) or nvml.c_nvmlProcessInfo_v2_t
            buf, arr, size = _guarded(proc_t, n)
            count = ctypes.c_uint(n)
            ret2 = fn(h, ctypes.byref(count), arr)
            r[f"{kind.lower()}_processes"] = {
                "first_return": ret, "return": ret2, "count": count.value,
                "struct_bytes": size, "written_past_struct_bytes": _written_past(buf, size)}
        # Simple out-structs.
        for fn_name, t, pre in (("nvmlDeviceGetMemoryInfo", "c_nvmlMemory_t", None),
                                ("nvmlGpmQueryDeviceSupport", "c_nvmlGpmSupport_t", 1),
                                ("nvmlDeviceGetUtilizationRates", "c_nvmlUtilization_t", None),
                                ("nvmlDeviceGetAttributes_v2", "c_nvmlDeviceAttributes", None),
                                ("nvmlDeviceGetPciInfo_v3", "nvmlPciInfo_t", None)):
            try:
                buf, arr, size = _guarded(getattr(nvml, t))
                if pre is not None:
                    arr[0].version = pre
                ret = fp(fn_name)(h, ctypes.byref(arr[0]))
                r[fn_name] = {"return": ret, "struct_bytes": size,
                              "written_past_struct_bytes": _written_past(buf, size)}
            except Exception as exc:
                r[fn_name] = {"error": repr(exc)}
        results[str(i)] = r
    # XID events: the event data struct.
    events = nvml.nvmlEventSetCreate()
    try:
        for i in range(nvml.nvmlDeviceGetCount()):
            nvml.nvmlDeviceRegisterEvents(nvml.nvmlDeviceGetHandleByIndex(i),
                                          nvml.nvmlEventTypeXidCriticalError, events)
        buf, arr, size = _guarded(nvml.c_nvmlEventData_t)
        ret = fp("nvmlEventSetWait_v2")(events, ctypes.byref(arr[0]), ctypes.c_uint(0))
        results["event_wait"] = {"return": ret, "struct_bytes": size,
                                 "written_past_struct_bytes": _written_past(buf, size)}
    finally:
        nvml.nvmlEventSetFree(events)
    return results


def minimal(nvml, iterations: int) -> dict:
    """GPM metrics through the binding's request struct (nothing of gpuaudit), with ctypes
    allocations around it like a sampler makes: a heap overrun shows here first."""
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    prev = nvml.nvmlGpmSampleGet(h, nvml.nvmlGpmSampleAlloc())
    keep = []
    for n in range(iterations):
        cur = nvml.nvmlGpmSampleGet(h, nvml.nvmlGpmSampleAlloc())
        req = nvml.c_nvmlGpmMetricsGet_t()
        req.version = nvml.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(GPM_IDS)
        req.sample1, req.sample2 = prev, cur
        for slot, mid in zip(req.metrics, GPM_IDS, strict=False):
            slot.metricId = mid
        nvml.nvmlGpmMetricsGet(req)
        nvml.nvmlGpmSampleFree(prev)
        prev = cur
        keep.append((nvml.c_nvmlFieldValue_t * 37)())  # neighbours on the heap
        keep = keep[-50:]
        nvml.nvmlDeviceGetFieldValues(h, [(82, 0)] + [(138, i) for i in range(18)])
        if n % 200 == 0:
            print(f"minimal: {n}", file=sys.stderr, flush=True)
    nvml.nvmlGpmSampleFree(prev)
    return {"iterations": iterations, "survived": True}


class _Without:
    """A source that answers the queries named in `skip` with Unsupported, or once `only` is
    set every query but those; `fields` rewrites the field-values list (to bisect)."""

    def __init__(self, inner, skip: set[str], fields: str | None) -> None:
        self.inner, self.skip, self.fields = inner, skip, fields
        self.only: set[str] | None = None

    def query(self, fn, *args):
        from gpuaudit.hw.nvml import FIELD_VALUES, Unsupported

        if fn in self.skip or (self.only is not None and fn not in self.only):
            raise Unsupported("skipped")
        if fn == FIELD_VALUES and self.fields:
            keep = [x for x in args[1].split(",")
                    if (x == "82:0") == (self.fields == "temp")]
            if self.fields == "guarded":
                return _guarded_fields(self.inner, args[0], args[1])
            if not keep:
                raise Unsupported("skipped")
            args = (args[0], ",".join(keep))
        return self.inner.query(fn, *args)


def _guarded_fields(live, dev, spec):
    nvml = live._nvml
    ids = [tuple(int(x) for x in item.split(":")) for item in spec.split(",")]
    _buf, arr, _size = _guarded(nvml.c_nvmlFieldValue_t, len(ids))
    for slot, (f, sc) in zip(arr, ids, strict=True):
        slot.fieldId, slot.scopeId = f, sc
    nvml._nvmlCheckReturn(nvml._nvmlGetFunctionPointer("nvmlDeviceGetFieldValues")(
        live._handle(dev), ctypes.c_int32(len(ids)), arr))
    return [{"field": v.fieldId, "scope": v.scopeId, "value": v.value.ullVal} for v in arr]


class _KeepArrays:
    """Wraps the binding's nvmlDeviceGetFieldValues: every array it returns is kept alive,
    with a copy of its bytes as returned; `changed()` counts the arrays whose bytes changed
    after the call had returned (NVML writing into caller memory later)."""

    def __init__(self, nvml) -> None:
        self.original = nvml.nvmlDeviceGetFieldValues
        self.kept: list[tuple[ctypes.Array, bytes]] = []
        nvml.nvmlDeviceGetFieldValues = self

    def __call__(self, handle, ids):
        arr = self.original(handle, ids)
        self.kept.append((arr, bytes(arr)))
        return arr

    def changed(self) -> dict:
        late = [(i, a, before) for i, (a, before) in enumerate(self.kept) if bytes(a) != before]
        out: dict = {"arrays": len(self.kept), "changed_after_return": len(late)}
        if late:
            i, a, before = late[0]
            now = bytes(a)
            offsets = [k for k in range(len(now)) if now[k] != before[k]]
            out["first"] = {"call": i, "bytes_changed": len(offsets),
                            "first_offset": offsets[0], "last_offset": offsets[-1],
                            "entry": offsets[0] // 40}
        return out


def sample(seconds: float, interval: float, skip: set[str], keep_frames: bool,
           only: set[str] | None = None, fields: str | None = None,
           keep_arrays: bool = False) -> dict:
    from gpuaudit.hw import LiveNvml
    from gpuaudit.hw.telemetry import Sampler
    from gpuaudit.hw.telemetry_trace import TraceRecorder
    from gpuaudit.model import utc_now

    live = LiveNvml()
    keeper = None
    if keep_arrays:
        import pynvml  # noqa: TID251 - this probes the binding itself

        keeper = _KeepArrays(pynvml)
    src = _Without(live, skip, fields)
    rec = TraceRecorder(src)
    ticks = 0
    errors: dict[str, int] = {}
    try:
        sampler = Sampler(rec, hostname=socket.gethostname(), interval_s=interval)
        rec.end_setup()
        src.only = only
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            now = utc_now()
            s = sampler.sample(now)
            rec.end_frame(now)
            if not keep_frames:  # memory stays flat over long runs
                rec.frames.clear()
            ticks += 1
            for g in s.gpus:
                if g.error:
                    errors[g.error] = errors.get(g.error, 0) + 1
            time.sleep(max(0.0, t0 + ticks * interval - time.monotonic()))
    finally:
        live.close()
    return {"ticks": ticks, "gpu_errors": errors, "nvml_overruns": getattr(live, "overruns", None),
            "kept_arrays": keeper.changed() if keeper else None}


def _setup_like_sampler(nvml, handles) -> None:
    """The queries the monitor's Sampler makes once before its first tick."""
    for h in handles:
        for fn in (nvml.nvmlGpmQueryDeviceSupport, nvml.nvmlDeviceGetName,
                   nvml.nvmlDeviceGetUUID, nvml.nvmlDeviceGetMaxPcieLinkGeneration,
                   nvml.nvmlDeviceGetMaxPcieLinkWidth):
            fn(h)
        for link in range(18):
            nvml.nvmlDeviceGetNvLinkState(h, link)


FIELD_CASES = {
    "fence-after": "the sampler's request against a no-access page right after it",
    "fence-before": "the sampler's request against a no-access page right before it",
    "temp": "HBM temperature (field 82) alone",
    "nvlink": "NVLink data counters (138/139) of every link, at once",
    "nvlink-after-state": "the counters right after reading every link's state (the sampler's "
                          "order)",
    "nvlink-after-1s": "the counters, one second after nvmlInit",
    "nvlink-guarded": "the counters into an array with a guard area behind it",
    "nvlink-per-link": "the counters, one call per link",
    "mixed": "the HBM temperature and the counters in one call, as the sampler asks",
}


def _fenced(struct_type: type, count: int, before: bool = False, pad: int = 0
            ) -> tuple[object, ctypes.Array]:
    """`count` structs placed against a page with no access (an electric fence): reading or
    writing one byte past them (or before them, with `before`) is a SIGSEGV on the spot."""
    import mmap

    size = ctypes.sizeof(struct_type) * count
    body = -(-(size + pad) // mmap.PAGESIZE) * mmap.PAGESIZE
    region = mmap.mmap(-1, body + mmap.PAGESIZE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    fence = base if before else base + body
    if libc.mprotect(fence, mmap.PAGESIZE, 0) != 0:
        raise OSError(ctypes.get_errno(), "mprotect")
    start = base + mmap.PAGESIZE if before else base + body - size - pad
    return region, (struct_type * count).from_address(start)


def fields(nvml, case: str, calls: int, pad: int = 0) -> dict:
    """The field-values query alone, on every GPU, from a fresh nvmlInit."""
    fp = nvml._nvmlGetFunctionPointer
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    links = range(18)
    if case.startswith("fence"):
        _setup_like_sampler(nvml, handles)
        ids = [(82, 0), *[(f, link) for link in links for f in (139, 138)]]
        for _ in range(calls):
            for h in handles:
                region, arr = _fenced(nvml.c_nvmlFieldValue_t, len(ids),
                                      before=case == "fence-before", pad=pad)
                for slot, (f, sc) in zip(arr, ids, strict=True):
                    slot.fieldId, slot.scopeId = f, sc
                nvml._nvmlCheckReturn(fp("nvmlDeviceGetFieldValues")(
                    h, ctypes.c_int32(len(ids)), arr))
                del arr
                region.close()
            time.sleep(0.01)
        return {"case": case, "calls": calls, "survived": True}
    if case == "nvlink-after-state":
        for h in handles:
            for link in links:
                try:
                    nvml.nvmlDeviceGetNvLinkState(h, link)
                except nvml.NVMLError:
                    break
    if case == "nvlink-after-1s":
        time.sleep(1)
    ids = [(82, 0)] if case == "temp" else [(f, link) for link in links for f in (139, 138)]
    if case == "mixed":
        ids = [(82, 0), *ids]
    groups = [[i] for i in ids] if case == "nvlink-per-link" else [ids]
    for _ in range(calls):
        for h in handles:
            for group in groups:
                if case == "nvlink-guarded":
                    _buf, arr, _size = _guarded(nvml.c_nvmlFieldValue_t, len(group))
                    for slot, (f, sc) in zip(arr, group, strict=True):
                        slot.fieldId, slot.scopeId = f, sc
                    nvml._nvmlCheckReturn(fp("nvmlDeviceGetFieldValues")(
                        h, ctypes.c_int32(len(group)), arr))
                else:
                    nvml.nvmlDeviceGetFieldValues(h, group)
        time.sleep(0.01)
    return {"case": case, "calls": calls, "survived": True}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("info", "canary", "minimal", "sample", "fields"))
    ap.add_argument("--case", choices=FIELD_CASES, default="nvlink")
    ap.add_argument("--pad", type=int, default=0, help="fence cases: bytes of readable room "
                                                       "between the request and the fence")
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--skip", default="", help="queries the sampler gets no answer to, e.g. "
                                               "xid_events,gpm_metrics (to bisect)")
    ap.add_argument("--keep-frames", action="store_true", help="keep the trace in memory, as "
                                                               "the recorders do")
    ap.add_argument("--only", default="", help="after the setup, only these queries")
    ap.add_argument("--fields", choices=("temp", "nvlink", "guarded"),
                    help="field values: only the HBM temperature, only the NVLink counters, "
                         "or all into a guarded array")
    ap.add_argument("--keep-arrays", action="store_true",
                    help="keep every field-values array the binding returns alive, and report "
                         "any that NVML changed after the call returned")
    args = ap.parse_args()
    if args.mode == "sample":
        skip = {s for s in args.skip.split(",") if s}
        only = {s for s in args.only.split(",") if s} or None
        print(json.dumps(sample(args.seconds, args.interval, skip, args.keep_frames, only,
                                args.fields, args.keep_arrays)))
        return
    import pynvml as nvml  # noqa: TID251 - this probes the binding itself

    nvml.nvmlInit()
    try:
        if args.mode == "fields":
            result = fields(nvml, args.case, args.iterations, args.pad)
        elif args.mode == "minimal":
            result = minimal(nvml, args.iterations)
        else:
            result = {"info": info, "canary": canary}[args.mode](nvml)
    finally:
        nvml.nvmlShutdown()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
