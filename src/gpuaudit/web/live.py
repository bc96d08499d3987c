"""The live page's feed: the monitor's tick in a background thread (live NVML or a replayed
telemetry trace), the recent ticks kept for the server-sent-event stream."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from gpuaudit.errors import BadInputError
from gpuaudit.hw.telemetry import Sampler
from gpuaudit.hw.telemetry_trace import TraceReplay
from gpuaudit.model import GpuSample

log = logging.getLogger("gpuaudit.serve")
KEEP = 240  # ticks kept: what a page that opens late is sent first
FIELDS = ("utilization_gpu_pct", "sm_activity_pct", "tensor_activity_pct",
          "dram_bandwidth_util_pct", "power_w", "power_limit_w", "sm_clock_mhz",
          "temperature_gpu_c", "temperature_memory_c", "memory_used_bytes",
          "memory_total_bytes")


class LoopingReplay:
    """A telemetry trace as a source, replayed once or again and again; each lap's times are
    shifted past the previous lap's so that the timeline keeps going forward."""

    def __init__(self, trace: dict[str, Any], loop: bool,
                 origin: str = "telemetry trace") -> None:
        self.trace, self.loop, self.origin = trace, loop, origin
        self._current = TraceReplay(trace, origin)
        self.meta = self._current.meta
        self.hostname, self.interval_s = self._current.hostname, self._current.interval_s
        # Every frame read once now: a damaged one is refused before serving starts.
        times = []
        while (at := self._current.advance()) is not None:
            times.append(at)
        if not times:
            raise BadInputError(f"{origin} has no frames (nothing was recorded)")
        self._current = TraceReplay(trace, origin)
        self._span = times[-1] - times[0] + timedelta(seconds=self.interval_s)
        self._lap = 0

    @classmethod
    def from_file(cls, path: Path, loop: bool) -> LoopingReplay:
        from gpuaudit.hw.telemetry_trace import read_trace

        # either form: one document, or JSON lines
        return cls(read_trace(path), loop, f"telemetry trace {path}")

    @property
    def frame(self) -> int:
        return self._current.frame

    def __len__(self) -> int:
        return len(self._current)

    def query(self, fn: str, *args: Any) -> Any:
        return self._current.query(fn, *args)

    def advance(self) -> datetime | None:
        at = self._current.advance()
        if at is None and self.loop and len(self._current):
            self._lap += 1
            self._current = TraceReplay(self.trace, self.origin)
            at = self._current.advance()
        return None if at is None else at + self._lap * self._span


def gpu_payload(g: GpuSample) -> dict[str, Any]:
    doc: dict[str, Any] = {"index": g.index, "name": g.name, "error": g.error}
    for f in FIELDS:
        doc[f] = getattr(g, f)
    doc["clock_event_reasons"] = list(g.clock_event_reasons or ())
    return doc


class LiveFeed:
    """Runs the monitor until stopped; `since(seq)` gives the ticks after `seq`."""

    def __init__(self, source: Any, *, hostname: str, interval_s: float, description: str,
                 times: Any, rules: bool = True) -> None:
        from gpuaudit.telemetry.monitor import Monitor

        self.description = description
        self.hostname = hostname
        self.interval_s = interval_s
        self._times = times
        evaluator = None
        if rules:
            from gpuaudit.telemetry.rules import Evaluator, load_shipped_rules

            evaluator = Evaluator(load_shipped_rules())
        self.monitor = Monitor(Sampler(source, hostname=hostname, interval_s=interval_s),
                               evaluator=evaluator)
        self._ticks: deque[tuple[int, dict[str, Any]]] = deque(maxlen=KEEP)
        self._lock = threading.Lock()
        self._seq = 0
        self.stop_event = threading.Event()
        self.ended = False
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, name="gpuaudit-live", daemon=True)

    @property
    def gpu_count(self) -> int:
        return len(self.monitor.sampler.static)

    def start(self) -> LiveFeed:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.stop_event.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            for now in self._times(self.stop_event):
                tick = self.monitor.tick(now)
                alerts = [{"name": a.name, "state": a.state, "gpu": a.labels.get("gpu"),
                           "severity": a.labels.get("severity"),
                           "summary": a.annotations.get("summary", "")}
                          for a in tick.state.alerts]
                utc = tick.sample.time.astimezone(timezone.utc)
                # `time` for programs; `t` for the charts and people: UTC to the millisecond,
                # in the form plotly's date axes read (they take no offset).
                doc = {"time": tick.sample.time.isoformat(),
                       "t": utc.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
                       "hostname": tick.sample.hostname,
                       "gpus": [gpu_payload(g) for g in tick.sample.gpus], "alerts": alerts}
                with self._lock:
                    self._seq += 1
                    doc["seq"] = self._seq
                    self._ticks.append((self._seq, doc))
        except Exception as exc:  # the page says why the feed stopped; the server goes on
            self.error = f"{type(exc).__name__}: {exc}"
            log.warning("live feed stopped: %s", self.error)
        finally:
            self.ended = True

    def since(self, seq: int) -> list[tuple[int, dict[str, Any]]]:
        with self._lock:
            return [(s, d) for s, d in self._ticks if s > seq]


def replay_feed(path: Path, *, speed: float | None, loop: bool) -> LiveFeed:
    from gpuaudit.telemetry.monitor import replay_times

    src = LoopingReplay.from_file(path, loop)
    interval = src.interval_s
    how = "as fast as it goes" if not speed else f"at {speed:g}× the recorded speed"

    def times(stop: threading.Event) -> Iterator[datetime]:
        return replay_times(src, stop, None, speed)  # type: ignore[arg-type]

    return LiveFeed(src, hostname=src.hostname,
                    interval_s=interval, times=times,
                    description=f"replaying {path.name} {how}" + (", looped" if loop else ""))


def nvml_feed(interval_s: float) -> LiveFeed | None:
    """The live GPUs, or None when NVML is not there (no driver, no GPU)."""
    from gpuaudit.hw import LiveNvml, NvmlUnavailable
    from gpuaudit.hw.host import read_host
    from gpuaudit.telemetry.monitor import live_times

    try:
        nvml = LiveNvml()
    except NvmlUnavailable:
        return None

    def times(stop: threading.Event) -> Iterator[datetime]:
        return live_times(interval_s, stop)

    feed = LiveFeed(nvml, hostname=read_host().hostname, interval_s=interval_s, times=times,
                    description=f"this machine's GPUs every {interval_s:g} s")
    if feed.gpu_count == 0:
        nvml.close()
        return None
    return feed
