"""`LiveNvml`: the source that queries the real NVML through nvidia-ml-py, and what makes it
safe: one lock around every call, caller memory checked against nvml.h's layouts and
guarded against overruns, GPM samples owned by one object, XID waits that never block."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .nvml import (
    FIELD_VALUES,
    GPM_METRICS,
    KERNEL_XIDS,
    PROCESS_INFO,
    PROCESS_UTILIZATION,
    READ_FILE,
    XID_EVENTS,
    Arg,
    Dev,
    NvmlUnavailable,
    Unsupported,
    to_plain,
)

log = logging.getLogger("gpuaudit.nvml")


class _GpuFabricInfo(ctypes.Structure):
    """nvmlGpuFabricInfo_t as nvml.h lays it out. Some nvidia-ml-py releases declare the UUID
    80 bytes long instead of 16, which shifts `state` and reads every fabric as unsupported."""

    _fields_ = (
        ("clusterUuid", ctypes.c_uint8 * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint8),
    )


# nvmlValueType_t → the member of the nvmlValue_t union that holds it.
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
                  6: "usVal"}


def _field_value(value_type: int, value: Any) -> float | int:
    member: float | int = getattr(value, _VALUE_MEMBERS.get(value_type, "ullVal"))
    return member


def _process_info(pid: int) -> dict[str, str]:
    import psutil

    # A process of another user or container may not be readable: the caller keeps what
    # NVML gave (pid, memory).
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            return {"user": p.username(), "command": " ".join(p.cmdline()) or p.name()}
    except (psutil.Error, OSError) as exc:
        raise Unsupported(f"cannot read process {pid}: {type(exc).__name__}") from None


def _read_file(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise Unsupported(f"cannot read {path}: {exc.strerror or exc}") from None


# The structs NVML fills in caller memory, by the binding's name, with their size in nvml.h on
# a 64-bit host. A binding whose struct has another size would let NVML write past the buffer
# (heap corruption that crashes the process later, somewhere else) or read garbage: such a query
# is refused with the reason instead of being made.
CALLER_STRUCTS = {
    "c_nvmlFieldValue_t": 40,
    "c_nvmlProcessInfo_v2_t": 24,
    "c_nvmlEventData_t": 32,
    "c_nvmlGpmMetric_t": 40,
    "c_nvmlGpmSupport_t": 8,
    "c_nvmlMemory_t": 24,
    "c_nvmlUtilization_t": 8,
    "nvmlPciInfo_t": 68,
    "c_nvmlDeviceAttributes": 40,
    "c_nvmlProcessUtilizationSample_t": 32,
}
# Which queries hand NVML which struct.
QUERY_STRUCTS = {
    FIELD_VALUES: "c_nvmlFieldValue_t",
    "nvmlDeviceGetComputeRunningProcesses": "c_nvmlProcessInfo_v2_t",
    "nvmlDeviceGetGraphicsRunningProcesses": "c_nvmlProcessInfo_v2_t",
    XID_EVENTS: "c_nvmlEventData_t",
    GPM_METRICS: "c_nvmlGpmMetric_t",
    "nvmlGpmQueryDeviceSupport": "c_nvmlGpmSupport_t",
    "nvmlDeviceGetMemoryInfo": "c_nvmlMemory_t",
    "nvmlDeviceGetUtilizationRates": "c_nvmlUtilization_t",
    "nvmlDeviceGetPciInfo_v3": "nvmlPciInfo_t",
    "nvmlDeviceGetNvLinkRemotePciInfo_v2": "nvmlPciInfo_t",
    "nvmlDeviceGetAttributes_v2": "c_nvmlDeviceAttributes",
    PROCESS_UTILIZATION: "c_nvmlProcessUtilizationSample_t",
}

# nvmlGpmMetricsGet_t ends in an array of NVML_GPM_METRIC_MAX metrics, and its version word
# (1 since CUDA 12) does not change when that grows: 98 in nvidia-ml-py 12.535-12.570, 210 in
# 12.575-13.590, 333 in CUDA 13.0's nvml.h (driver 580) and nvidia-ml-py 13.610, 477 in
# 13.615. A request sized by a binding older than the driver is shorter than what the driver
# may write into, so ours has room for GPM_METRIC_SLOTS metrics whatever the binding says.
GPM_METRIC_SLOTS = 1024
GUARD_BYTES = 4096
GUARD_PATTERN = 0xA5


class Guarded:
    """`count` structs followed by a guard area of a known pattern, in one allocation. NVML
    writing past the structs lands in the guard, where `overrun()` sees it, instead of in
    whatever the heap holds next (on an H200 with driver 580 that crashed the process: see
    docs/monitor-safety.md)."""

    def __init__(self, struct_type: type[ctypes.Structure], count: int = 1,
                 guard_bytes: int = GUARD_BYTES) -> None:
        self.size = ctypes.sizeof(struct_type) * count
        self.guard_bytes = guard_bytes
        self._buf = (ctypes.c_uint8 * (self.size + guard_bytes))()
        ctypes.memset(ctypes.addressof(self._buf) + self.size, GUARD_PATTERN, guard_bytes)
        self.items = (struct_type * count).from_buffer(self._buf)

    def overrun(self) -> int:
        """How many bytes past the structs NVML wrote (0: none)."""
        return len(bytes(self._buf)[self.size:].rstrip(bytes([GUARD_PATTERN])))


def layout_problems(nvml: Any) -> dict[str, str]:
    """Queries that must not be made with this binding, and why: its struct is not the size
    nvml.h gives, so NVML would write past it or we would read the wrong bytes."""
    refused = {}
    for fn, name in QUERY_STRUCTS.items():
        struct = getattr(nvml, name, None)
        expected = CALLER_STRUCTS[name]
        if struct is None:
            continue  # a binding without it has no such query either
        if ctypes.sizeof(struct) != expected:
            refused[fn] = (f"refused: nvidia-ml-py's {name} is {ctypes.sizeof(struct)} bytes, "
                           f"nvml.h's is {expected} (NVML would write past it)")
    return refused


def _gpm_request_type(nvml: Any) -> type[ctypes.Structure]:
    class GpmMetricsGet(ctypes.Structure):
        _fields_ = (
            ("version", ctypes.c_uint),
            ("numMetrics", ctypes.c_uint),
            ("sample1", nvml.c_nvmlGpmSample_t),
            ("sample2", nvml.c_nvmlGpmSample_t),
            ("metrics", nvml.c_nvmlGpmMetric_t * GPM_METRIC_SLOTS),
        )

    return GpmMetricsGet


class _GpmSamples:
    """The GPM samples NVML allocated for us: per device the newest one, kept for the next
    interval. Every sample is freed exactly once, here."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._last: dict[Dev, Any] = {}

    def take(self, dev: Dev, handle: Any) -> tuple[Any | None, Any]:
        """A new sample of `dev`, and the one before it (None the first time), which the
        caller hands back to `release` once the metrics between them are read."""
        sample = self._nvml.nvmlGpmSampleAlloc()
        try:
            self._nvml.nvmlGpmSampleGet(handle, sample)
        except BaseException:
            self.release(sample)
            raise
        previous = self._last.get(dev)
        self._last[dev] = sample
        return previous, sample

    def release(self, sample: Any) -> None:
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlGpmSampleFree(sample)

    def close(self) -> None:
        for sample in self._last.values():
            self.release(sample)
        self._last.clear()


class _XidEvents:
    """The one event set the XID events arrive in. Waits never block (timeout 0), so nothing
    is left waiting in NVML when the monitor stops; `close` frees the set before shutdown."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml = nvml
        self._handle = handle
        self._set: Any = None
        self._registered: dict[int, Any] = {}  # index → the handle registered for events

    def poll(self) -> list[dict[str, int]]:
        """XID events since the last call; the first call registers for them (events from
        before that moment are not kept by NVML: the kernel log has those)."""
        nvml = self._nvml
        if self._set is None:
            events = nvml.nvmlEventSetCreate()
            registered = 0
            for i in range(nvml.nvmlDeviceGetCount()):
                with contextlib.suppress(nvml.NVMLError):
                    handle = self._handle(Dev(i))
                    nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError,
                                                  events)
                    self._registered[i] = handle
                    registered += 1
            if not registered:
                nvml.nvmlEventSetFree(events)
                raise Unsupported("no GPU here reports XID events to NVML")
            self._set = events
        found: list[dict[str, int]] = []
        while True:
            try:
                data = nvml.nvmlEventSetWait_v2(self._set, 0)
            except nvml.NVMLError_Timeout:
                return found
            if data.eventType & nvml.nvmlEventTypeXidCriticalError:
                gpu = self._index_of(data.device)
                if gpu is not None:
                    found.append({"gpu": gpu, "code": int(data.eventData)})

    def _index_of(self, device: Any) -> int | None:
        """The index of an event's device; a GPU that has just fallen off the bus no longer
        tells its index, so it is found among the handles registered for events."""
        try:
            index: int = self._nvml.nvmlDeviceGetIndex(device)
            return index
        except self._nvml.NVMLError:
            def address(h: Any) -> Any:  # two pointer objects to one device compare unequal
                return ctypes.cast(h, ctypes.c_void_p).value if isinstance(h, ctypes._Pointer) \
                    else h
            return next((i for i, h in self._registered.items() if address(h) == address(device)),
                        None)

    def close(self) -> None:
        if self._set is not None:
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlEventSetFree(self._set)
            self._set = None


class LiveNvml:
    """Queries the real NVML through nvidia-ml-py.

    Safe by construction: one lock around every call (NVML is reached by one thread at a
    time, and never after `close`), caller memory checked against nvml.h's layouts
    (`layout_problems`), GPM samples owned by one object, XID waits that never block."""

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as exc:  # pragma: no cover - a declared dependency
            raise NvmlUnavailable(f"nvidia-ml-py is not installed ({exc})") from None
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML could not start: {exc}") from None
        self._lock = threading.RLock()
        self._closed = False
        self._handles: dict[Dev, Any] = {}
        self.refused = layout_problems(pynvml)
        self._gpm = _GpmSamples(pynvml)
        self._gpm_request = _gpm_request_type(pynvml) if GPM_METRICS not in self.refused \
            and hasattr(pynvml, "c_nvmlGpmSample_t") else None
        self.overruns: dict[str, int] = {}  # query → calls in which NVML wrote past its buffer
        self._events = _XidEvents(pynvml, self._handle)
        self._kmsg: Any = None  # the kernel log, followed once KERNEL_XIDS is first asked
        self._util_seen: dict[Dev, int] = {}  # the newest process-utilization sample read (µs)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._gpm.close()
            self._events.close()
            if self._kmsg is not None:
                self._kmsg.close()
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlShutdown()

    def __enter__(self) -> LiveNvml:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _handle(self, dev: Dev) -> Any:
        if dev not in self._handles:
            if dev.mig is None:
                self._handles[dev] = self._nvml.nvmlDeviceGetHandleByIndex(dev.index)
            else:
                parent = self._handle(Dev(dev.index))
                self._handles[dev] = self._nvml.nvmlDeviceGetMigDeviceHandleByIndex(
                    parent, dev.mig
                )
        return self._handles[dev]

    def _fabric_info(self, handle: Any) -> Any:
        # An out-parameter call: the caller hands NVML a struct to fill.
        info = _GpuFabricInfo()
        self._nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
        return info

    def _gpm_metrics(self, dev: Dev, ids: str) -> dict[str, float | str]:
        """GPM metrics over the interval since the previous call for `dev`: NVML computes them
        from two samples, so the first call only takes a sample and has nothing to say."""
        request_type = self._gpm_request
        if request_type is None:
            raise Unsupported("this nvidia-ml-py has no GPM")
        wanted = [int(i) for i in ids.split(",")]
        if len(wanted) > GPM_METRIC_SLOTS:
            raise Unsupported(f"at most {GPM_METRIC_SLOTS} GPM metrics at once")
        previous, sample = self._gpm.take(dev, self._handle(dev))
        if previous is None:
            raise Unsupported("first GPM sample: the metrics need a second one")
        try:
            return self._gpm_between(request_type, previous, sample, wanted)
        finally:
            self._gpm.release(previous)

    def _gpm_between(self, request_type: type[ctypes.Structure], sample1: Any, sample2: Any,
                     wanted: list[int]) -> dict[str, float | str]:
        nvml = self._nvml
        guarded = Guarded(request_type)
        request = guarded.items[0]
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(wanted)
        request.sample1, request.sample2 = sample1, sample2
        for slot, metric_id in zip(request.metrics, wanted, strict=False):
            slot.metricId = metric_id
        ret = nvml._nvmlGetFunctionPointer("nvmlGpmMetricsGet")(ctypes.byref(request))
        self._check_guard(GPM_METRICS, guarded)
        nvml._nvmlCheckReturn(ret)
        return {str(m.metricId): m.value if m.nvmlReturn == 0 else
                str(nvml.NVMLError(m.nvmlReturn))
                for m in request.metrics[: len(wanted)]}

    def _kernel_xids(self) -> list[list[Any]]:
        """XIDs the kernel log got since the last call (the first call: none, it starts
        following the log), each with the PCI bus id the log names."""
        if self._kmsg is None:
            from .xids import KmsgFollower

            self._kmsg = KmsgFollower()
        found = self._kmsg.new_xids()
        if self._kmsg.reason:
            raise Unsupported(self._kmsg.reason)
        return [[bus, code] for bus, code in found]

    def _field_values(self, dev: Dev, spec: str) -> list[dict[str, Any]]:
        nvml = self._nvml
        ids = [tuple(int(x) for x in item.split(":")) for item in spec.split(",")]
        # Room for the whole request again behind it: on an H200 (driver 580) NVML wrote past
        # an array of exactly the request's size and the process died (issue 19).
        struct = nvml.c_nvmlFieldValue_t
        guarded = Guarded(struct, len(ids), max(GUARD_BYTES, ctypes.sizeof(struct) * len(ids)))
        for slot, (field_id, scope) in zip(guarded.items, ids, strict=True):
            slot.fieldId, slot.scopeId = field_id, scope
        ret = nvml._nvmlGetFunctionPointer("nvmlDeviceGetFieldValues")(
            self._handle(dev), ctypes.c_int32(len(ids)), guarded.items)
        self._check_guard(FIELD_VALUES, guarded)
        nvml._nvmlCheckReturn(ret)
        out = []
        for v in guarded.items:
            entry: dict[str, Any] = {"field": v.fieldId, "scope": v.scopeId}
            if v.nvmlReturn != 0:
                entry["error"] = str(nvml.NVMLError(v.nvmlReturn))
            else:
                entry["value"] = _field_value(v.valueType, v.value)
            out.append(entry)
        return out

    def _process_utilization(self, dev: Dev) -> list[dict[str, Any]]:
        """Each process's mean SM utilization over NVML's samples since the last call (NVML
        keeps a few seconds of them, one per process every ~1/6 s)."""
        nvml = self._nvml
        struct = getattr(nvml, "c_nvmlProcessUtilizationSample_t", None)
        if struct is None:
            raise Unsupported("this nvidia-ml-py has no process utilization")
        fn = nvml._nvmlGetFunctionPointer("nvmlDeviceGetProcessUtilization")
        handle, since = self._handle(dev), ctypes.c_ulonglong(self._util_seen.get(dev, 0))
        count = ctypes.c_uint(0)
        ret = fn(handle, None, ctypes.byref(count), since)
        if ret == nvml.NVML_ERROR_NOT_FOUND:
            return []  # no sample since the last call
        if ret != nvml.NVML_ERROR_INSUFFICIENT_SIZE:
            nvml._nvmlCheckReturn(ret)
            return []
        slots = count.value + 16  # room for processes that appear between the two calls
        guarded = Guarded(struct, slots, max(GUARD_BYTES, ctypes.sizeof(struct) * slots))
        count = ctypes.c_uint(slots)
        ret = fn(handle, guarded.items, ctypes.byref(count), since)
        self._check_guard(PROCESS_UTILIZATION, guarded)
        if ret == nvml.NVML_ERROR_NOT_FOUND:
            return []
        nvml._nvmlCheckReturn(ret)
        got = guarded.items[: min(count.value, slots)]
        if got:
            self._util_seen[dev] = max(int(x.timeStamp) for x in got)
        by_pid: dict[int, list[int]] = {}
        for x in got:
            by_pid.setdefault(int(x.pid), []).append(int(x.smUtil))
        return [{"pid": pid, "sm_pct": sum(v) / len(v), "samples": len(v)}
                for pid, v in sorted(by_pid.items())]

    def _check_guard(self, fn: str, guarded: Guarded) -> None:
        """NVML wrote into the guard: count it (the evidence), and refuse the query from now
        on if it wrote past the guard's end too."""
        past = guarded.overrun()
        if not past:
            return
        self.overruns[fn] = self.overruns.get(fn, 0) + 1
        if self.overruns[fn] == 1:
            log.warning("NVML wrote %d bytes past the %d it was given in %s (absorbed by a "
                        "guard area)", past, guarded.size, fn)
        if past >= guarded.guard_bytes:
            self.refused[fn] = f"refused: NVML wrote past the guard area in {fn}"
            raise Unsupported(self.refused[fn])

    def query(self, fn: str, *args: Arg) -> Any:
        if fn == READ_FILE:
            return _read_file(str(args[0]))
        if fn == PROCESS_INFO:
            pid = args[0]
            if not isinstance(pid, int):
                raise Unsupported(f"{PROCESS_INFO} takes a process id, not {pid!r}")
            return _process_info(pid)
        with self._lock:
            if self._closed:
                raise Unsupported("NVML is shut down")
            if fn in self.refused:
                raise Unsupported(self.refused[fn])
            return self._query(fn, args)

    def _query(self, fn: str, args: tuple[Arg, ...]) -> Any:
        handlers: dict[str, Callable[..., Any]] = {
            GPM_METRICS: self._gpm_metrics, XID_EVENTS: self._events.poll,
            KERNEL_XIDS: self._kernel_xids, FIELD_VALUES: self._field_values,
            PROCESS_UTILIZATION: self._process_utilization}
        special = handlers.get(fn)
        if special is not None:
            try:
                return special(*args)
            except self._nvml.NVMLError as exc:
                raise Unsupported(str(exc)) from None
        func = getattr(self._nvml, fn, None)
        if fn == "nvmlDeviceGetGpuFabricInfo" and func is not None:
            func = self._fabric_info
        if func is None:
            raise Unsupported(f"{fn} is not in this nvidia-ml-py")
        try:
            real = [self._handle(a) if isinstance(a, Dev) else a for a in args]
            return to_plain(func(*real))
        except self._nvml.NVMLError as exc:
            raise Unsupported(str(exc)) from None
        except TypeError as exc:
            # A binding whose result we cannot read must cost one field, not the inspection.
            raise Unsupported(f"unreadable result from {fn}: {exc}") from None
