"""The one door to NVML: every query goes through a source that turns NVML's errors into
`Unsupported(reason)` and its ctypes results into plain JSON values.

Three sources share one interface, so the code that interprets readings runs unchanged on
the machine (`LiveNvml`), while recording a fixture (`RecordingNvml`) and in CPU-only tests
and offline analysis (`ReplayNvml`).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpuaudit.errors import BadInputError

TRACE_FORMAT = "gpuaudit-nvml-trace"
TRACE_VERSION = 1
# The reason a replayed query has no answer: it says nothing about the hardware.
NOT_RECORDED = "not recorded"
# A pseudo-query for the few facts the kernel gives better than NVML (sysfs), so that they
# are recorded and replayed with the rest.
READ_FILE = "read_file"
# Pseudo-queries of the monitor whose answers depend on the previous call (NVML keeps the
# state: a GPM sample, an event set); recorded and replayed like any other answer.
GPM_METRICS = "gpm_metrics"  # (Dev, "id,id,..."): {id: value} between this call and the last
XID_EVENTS = "xid_events"  # (): [{"gpu": index, "code": xid}] since the last call
PROCESS_INFO = "process_info"  # (pid): {"user", "command"} from the host (psutil)
FIELD_VALUES = "nvmlDeviceGetFieldValues"  # (Dev, "field:scope,..."): [{field, scope, value}]


class Unsupported(Exception):
    """NVML could not give this reading; `reason` says why (e.g. "Not Supported")."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NvmlUnavailable(Exception):
    """NVML cannot be used at all on this machine: no driver, no library, no GPU."""


@dataclass(frozen=True)
class Dev:
    """A device argument, by index, so that queries can be recorded and replayed."""

    index: int
    mig: int | None = None

    def __str__(self) -> str:
        return f"gpu{self.index}" if self.mig is None else f"gpu{self.index}/mig{self.mig}"


Arg = int | str | Dev


class NvmlSource(Protocol):
    def query(self, fn: str, *args: Arg) -> Any: ...


def call_key(fn: str, args: tuple[Arg, ...]) -> str:
    return f"{fn}({','.join(str(a) for a in args)})"


def to_plain(value: Any) -> Any:
    """NVML's ctypes results as JSON-able values (structs become dicts, arrays lists)."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, ctypes.Structure | ctypes.Union):
        return {name: to_plain(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, ctypes.Array | list | tuple):
        return [to_plain(v) for v in value]
    if isinstance(value, ctypes._SimpleCData):
        return to_plain(value.value)
    if hasattr(value, "__dict__"):  # nvidia-ml-py's "friendly objects" (process lists)
        return {k: to_plain(v) for k, v in vars(value).items() if not k.startswith("_")}
    raise TypeError(f"cannot record NVML value of type {type(value).__name__}")


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
    return getattr(value, _VALUE_MEMBERS.get(value_type, "ullVal"))


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


class LiveNvml:
    """Queries the real NVML through nvidia-ml-py."""

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
        self._handles: dict[Dev, Any] = {}
        self._gpm_last: dict[Dev, Any] = {}
        self._events: Any = None

    def close(self) -> None:
        for sample in self._gpm_last.values():
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlGpmSampleFree(sample)
        self._gpm_last.clear()
        if self._events is not None:
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlEventSetFree(self._events)
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlShutdown()

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
        nvml = self._nvml
        sample = nvml.nvmlGpmSampleAlloc()
        try:
            nvml.nvmlGpmSampleGet(self._handle(dev), sample)
        except BaseException:
            nvml.nvmlGpmSampleFree(sample)
            raise
        previous = self._gpm_last.get(dev)
        self._gpm_last[dev] = sample
        if previous is None:
            raise Unsupported("first GPM sample: the metrics need a second one")
        try:
            request = nvml.c_nvmlGpmMetricsGet_t()
            request.version = nvml.NVML_GPM_METRICS_GET_VERSION
            wanted = [int(i) for i in ids.split(",")]
            request.numMetrics = len(wanted)
            request.sample1, request.sample2 = previous, sample
            for slot, metric_id in zip(request.metrics, wanted, strict=False):
                slot.metricId = metric_id
            nvml.nvmlGpmMetricsGet(request)
            return {str(m.metricId): m.value if m.nvmlReturn == 0 else
                    str(nvml.NVMLError(m.nvmlReturn))
                    for m in request.metrics[: len(wanted)]}
        finally:
            nvml.nvmlGpmSampleFree(previous)

    def _xid_events(self) -> list[dict[str, int]]:
        """XID events since the last call; the first call registers for them (events from
        before that moment are not kept by NVML: the kernel log has those)."""
        nvml = self._nvml
        if self._events is None:
            events = nvml.nvmlEventSetCreate()
            registered = 0
            for i in range(nvml.nvmlDeviceGetCount()):
                with contextlib.suppress(nvml.NVMLError):
                    nvml.nvmlDeviceRegisterEvents(self._handle(Dev(i)),
                                                  nvml.nvmlEventTypeXidCriticalError, events)
                    registered += 1
            if not registered:
                nvml.nvmlEventSetFree(events)
                raise Unsupported("no GPU here reports XID events to NVML")
            self._events = events
        found = []
        while True:
            try:
                data = nvml.nvmlEventSetWait_v2(self._events, 0)
            except nvml.NVMLError_Timeout:
                return found
            if data.eventType & nvml.nvmlEventTypeXidCriticalError:
                found.append({"gpu": nvml.nvmlDeviceGetIndex(data.device),
                              "code": int(data.eventData)})

    def _field_values(self, dev: Dev, spec: str) -> list[dict[str, Any]]:
        nvml = self._nvml
        ids = [tuple(int(x) for x in item.split(":")) for item in spec.split(",")]
        out = []
        for v in nvml.nvmlDeviceGetFieldValues(self._handle(dev), ids):
            entry: dict[str, Any] = {"field": v.fieldId, "scope": v.scopeId}
            if v.nvmlReturn != 0:
                entry["error"] = str(nvml.NVMLError(v.nvmlReturn))
            else:
                entry["value"] = _field_value(v.valueType, v.value)
            out.append(entry)
        return out

    def query(self, fn: str, *args: Arg) -> Any:
        if fn == READ_FILE:
            return _read_file(str(args[0]))
        if fn == PROCESS_INFO:
            return _process_info(int(args[0]))
        special = {GPM_METRICS: self._gpm_metrics, XID_EVENTS: self._xid_events,
                   FIELD_VALUES: self._field_values}.get(fn)
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


class RecordingNvml:
    """Passes queries to another source and keeps every answer, to be saved as a trace."""

    def __init__(self, inner: NvmlSource) -> None:
        self.inner = inner
        self.calls: dict[str, dict[str, Any]] = {}

    def query(self, fn: str, *args: Arg) -> Any:
        key = call_key(fn, args)
        try:
            value = self.inner.query(fn, *args)
        except Unsupported as exc:
            self.calls[key] = {"error": exc.reason}
            raise
        self.calls[key] = {"value": value}
        return value

    def trace(self, **meta: Any) -> dict[str, Any]:
        return {"format": TRACE_FORMAT, "version": TRACE_VERSION, **meta, "calls": self.calls}


def read_json(path: Path, what: str) -> Any:
    """A JSON file the user named; unreadable or garbled is bad input, in one line."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInputError(f"cannot read {what} {path}: {exc}") from None


class ReplayNvml:
    """Answers queries from a recorded trace; a query that was never recorded is Unsupported."""

    def __init__(self, trace: dict[str, Any]) -> None:
        if trace.get("format") != TRACE_FORMAT or not isinstance(trace.get("calls"), dict):
            raise BadInputError("not a gpuaudit NVML trace")
        self.calls: dict[str, dict[str, Any]] = trace["calls"]

    @classmethod
    def from_file(cls, path: Path) -> ReplayNvml:
        return cls(read_json(path, "NVML trace"))

    def query(self, fn: str, *args: Arg) -> Any:
        entry = self.calls.get(call_key(fn, args))
        if entry is None:
            raise Unsupported(NOT_RECORDED)
        if "error" in entry:
            raise Unsupported(entry["error"])
        return entry["value"]
