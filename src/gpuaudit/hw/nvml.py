"""The one door to NVML: every query goes through a source that turns NVML's errors into
`Unsupported(reason)` and its ctypes results into plain JSON values.

Three sources share one interface, so the code that interprets readings runs unchanged on
the machine (`nvml_live.LiveNvml`), while recording a fixture (`RecordingNvml`) and in
CPU-only tests and offline analysis (`ReplayNvml`). Here: the interface, the pseudo-queries
recorded with NVML's own, and the recording and replaying sources.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpuaudit import reading
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
KERNEL_XIDS = "kernel_xids"  # (): [[bus id, xid], ...] the kernel log got since the last call
PROCESS_INFO = "process_info"  # (pid): {"user", "command"} from the host (psutil)
# (Dev): [{"pid", "sm_pct", "samples"}], each process's mean SM utilization over NVML's
# samples since the last call
PROCESS_UTILIZATION = "process_utilization"
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


def _finite(value: Any) -> Any:
    """`value` with any NaN or ±inf inside (a GPM metric's, say) as text saying what it was:
    a reading's reason on replay, and a trace any JSON reader takes."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"NVML gave {value}"
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


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
        if isinstance(value, float) and not math.isfinite(value):
            # JSON (RFC 8259) has no NaN: the trace says what NVML gave, as a reason.
            self.calls[key] = {"error": f"NVML gave {value}"}
        else:
            self.calls[key] = {"value": _finite(value)}
        return value

    def trace(self, **meta: Any) -> dict[str, Any]:
        return {"format": TRACE_FORMAT, "version": TRACE_VERSION, **meta, "calls": self.calls}


def read_json(path: Path, what: str) -> Any:
    """A JSON file the user named; unreadable, binary or garbled is bad input, in one line."""
    return reading.read_json(path, what)


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
        if not isinstance(entry, dict) or not ("error" in entry or "value" in entry):
            raise BadInputError(f"NVML trace: {call_key(fn, args)}: not a recorded answer")
        if "error" in entry:
            if not isinstance(entry["error"], str):
                raise BadInputError(f"NVML trace: {call_key(fn, args)}: the error is not text")
            raise Unsupported(entry["error"])
        return entry["value"]
