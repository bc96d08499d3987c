"""Telemetry traces: every tick's NVML answers kept as a frame (`TraceRecorder`), and a
recording read back and replayed tick by tick (`read_trace`, `TraceReplay`), so the monitor,
its rules and the live page run unchanged on a recording."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from gpuaudit.errors import BadInputError
from gpuaudit.model.schema import describe_validation_error
from gpuaudit.model.units import Interval, Moment
from gpuaudit.reading import load_json, read_text

from .nvml import (
    TRACE_FORMAT,
    Arg,
    NvmlSource,
    RecordingNvml,
    ReplayNvml,
)

TELEMETRY_FORMAT = "gpuaudit-telemetry-trace"
TELEMETRY_VERSION = 1


class TraceRecorder:
    """Wraps a source so that every tick's answers are kept as one frame of a telemetry trace:
    `setup` holds what the Sampler read once, each frame what one `sample` call read.

    With `stream` (an open text file) the trace is written as it is read, in the JSON-lines
    form: a header line with the metadata and the setup, then a line per frame, flushed each
    tick. Memory stays flat however long the recording, and a crash loses at most the tick in
    progress. Without it the frames are kept for `trace()`."""

    def __init__(self, inner: NvmlSource, stream: IO[str] | None = None, **meta: Any) -> None:
        self._rec = RecordingNvml(inner)
        self._stream = stream
        self._meta = meta
        self.setup: dict[str, dict[str, Any]] | None = None
        self.frames: list[dict[str, Any]] = []
        self.frame_count = 0

    def query(self, fn: str, *args: Arg) -> Any:
        return self._rec.query(fn, *args)

    def end_setup(self) -> None:
        self.setup, self._rec.calls = self._rec.calls, {}
        if self._stream is not None:
            header = {"format": TELEMETRY_FORMAT, "version": TELEMETRY_VERSION, **self._meta,
                      "setup": self.setup}
            self._write(header)

    def end_frame(self, time: datetime) -> None:
        frame = {"time": time.isoformat(), "calls": self._rec.calls}
        self._rec.calls = {}
        self.frame_count += 1
        if self._stream is not None:
            self._write(frame)
        else:
            self.frames.append(frame)

    def _write(self, doc: dict[str, Any]) -> None:
        assert self._stream is not None
        self._stream.write(json.dumps(doc, separators=(",", ":")) + "\n")
        self._stream.flush()

    def trace(self, **meta: Any) -> dict[str, Any]:
        return {"format": TELEMETRY_FORMAT, "version": TELEMETRY_VERSION, **self._meta, **meta,
                "setup": self.setup or {}, "frames": self.frames}


def _time(text: Any) -> datetime:
    """A frame's ISO time, as UTC when it carries no offset."""
    if not isinstance(text, str):
        raise ValueError(f"the time {text!r} is not an ISO time")
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"the time {text[:40]!r} is not an ISO time") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


_MOMENT: TypeAdapter[datetime] = TypeAdapter(Moment)


def _moment(when: datetime) -> datetime:
    try:
        return _MOMENT.validate_python(when)
    except ValidationError as exc:
        raise ValueError(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None


def read_trace(path: Path) -> dict[str, Any]:
    """A telemetry trace file: one JSON document, or the JSON-lines form `TraceRecorder`
    streams (header line, then a line per frame). A last line cut short by a crash is left
    out; any other broken line is bad input."""
    text = read_text(path, "telemetry trace")  # not a regular file, binary, …: one line
    first, _, rest = text.partition("\n")
    try:
        header = load_json(first, "header")
    except BadInputError:
        return _frames(load_json(text, f"telemetry trace {path}"), path)  # over several lines
    if not isinstance(header, dict) or "frames" in header:
        return _frames(header, path)  # a whole document on one line
    lines = rest.splitlines()
    frames = []
    for n, line in enumerate(lines, start=2):
        if not line.strip() and n == len(lines) + 1:
            break
        try:
            frames.append(load_json(line, f"telemetry trace {path} line {n}"))
        except BadInputError:
            if n == len(lines) + 1:
                break  # the tick in progress when the recorder stopped
            raise
    return _frames({**header, "frames": frames}, path)


def _frames(doc: Any, path: Path) -> dict[str, Any]:
    """A trace with no frame is refused: replaying it would watch nothing, silently. (What is
    not a trace at all is TraceReplay's to refuse, with its reason.)"""
    if isinstance(doc, dict) and isinstance(doc.get("frames"), list) and not doc["frames"] \
            and doc.get("format") == TELEMETRY_FORMAT:
        raise BadInputError(f"telemetry trace {path} has no frames (nothing was recorded)")
    trace: dict[str, Any] = doc
    return trace


class TraceHeader(BaseModel):
    """What a trace says about itself, checked: a sampling interval of "soon" or -1 s, a
    recording dated next year, a host name that is a number are a damaged trace."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True, allow_inf_nan=False)
    hostname: str | None = None
    interval_s: Interval | None = None
    recorded_at: Moment | None = None
    source: str | None = None


class TraceReplay:
    """A telemetry trace as an NvmlSource: the Sampler's setup reads `setup`, then each
    `advance()` moves to the next frame and gives its time (None past the last). `origin`
    names the trace in messages; a source that has one is a recording, whose damage the
    Sampler refuses instead of reading around it as it does a live GPU's odd answer."""

    def __init__(self, trace: dict[str, Any], origin: str = "telemetry trace") -> None:
        self.origin = origin
        if not isinstance(trace, dict) or trace.get("format") != TELEMETRY_FORMAT \
                or not isinstance(trace.get("frames"), list):
            raise BadInputError("not a gpuaudit telemetry trace")
        version = trace.get("version", 0)
        if not isinstance(version, int) or not isinstance(trace.get("setup", {}), dict):
            raise BadInputError("not a gpuaudit telemetry trace (bad version or setup)")
        if version > TELEMETRY_VERSION:
            raise BadInputError(f"telemetry trace version {trace['version']} is newer than "
                                f"this gpuaudit reads ({TELEMETRY_VERSION}): upgrade gpuaudit")
        self.meta = {k: v for k, v in trace.items() if k not in ("setup", "frames")}
        meta = dict(self.meta)
        try:
            if isinstance(meta.get("recorded_at"), str):
                meta["recorded_at"] = _time(meta["recorded_at"])
            header = TraceHeader.model_validate(meta)
        except ValueError as exc:  # ValidationError is one
            why = describe_validation_error(exc) if isinstance(exc, ValidationError) else exc
            raise BadInputError(f"{origin}: {why}") from None
        self.hostname = header.hostname or "replay"
        self.interval_s = header.interval_s or 1.0
        self._previous: datetime | None = None
        self._setup = ReplayNvml({"format": TRACE_FORMAT, "calls": trace.get("setup", {})})
        self._frames = trace["frames"]
        self._at = -1
        self._current = self._setup

    @classmethod
    def from_file(cls, path: Path) -> TraceReplay:
        return cls(read_trace(path), origin=f"telemetry trace {path}")

    def __len__(self) -> int:
        return len(self._frames)

    def advance(self) -> datetime | None:
        self._at += 1
        if self._at >= len(self._frames):
            return None
        frame = self._frames[self._at]
        where = f"{self.origin} frame {self._at}"
        try:
            time = _moment(_time(frame["time"]))
            self._current = ReplayNvml({"format": TRACE_FORMAT, "calls": frame["calls"]})
        except (KeyError, TypeError, ValueError) as exc:
            raise BadInputError(f"{where}: {exc}") from None
        except BadInputError as exc:
            raise BadInputError(f"{where}: {exc}") from None
        if self._previous is not None and time < self._previous:
            raise BadInputError(f"{where}: its time {time.isoformat()} is before the previous "
                                f"frame's ({self._previous.isoformat()})")
        self._previous = time
        return time

    @property
    def frame(self) -> int:
        """The frame now answering (-1: the setup)."""
        return self._at

    def query(self, fn: str, *args: Arg) -> Any:
        return self._current.query(fn, *args)
