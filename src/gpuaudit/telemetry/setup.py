"""A Monitor put together from its options: where the readings come from (this machine's GPUs
or a recorded trace), the recorder, the host name, the alert rules and notifiers, the idle
policy and its decision log. The CLI parses options and shows; a library user gets the same
monitor from `open_monitor`.

Everything that can be refused is refused before the first sample: a trace that is not one,
GPUs the source does not have, a rule file with errors, a recording or decision log that could
not be written at the end.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gpuaudit.errors import BadInputError, GpuauditError
from gpuaudit.model import utc_now
from gpuaudit.parse import writable_file

from .idle import IdleConfig, IdleDecision, IdlePolicy
from .monitor import History, Monitor, Retention, live_times, replay_times

log = logging.getLogger("gpuaudit.monitor")


@dataclass(frozen=True)
class MonitorOptions:
    """What `gpuaudit monitor` is asked to do, parsed. `speed` paces a replay (1 = as
    recorded; None = as fast as the ticks run)."""

    interval_s: float = 1.0
    gpus: Sequence[int] | None = None
    replay: Path | None = None
    speed: float | None = None
    record: Path | None = None
    rules: Path | None = None
    evaluate_rules: bool = True
    webhooks: Sequence[str] = ()
    commands: Sequence[Sequence[str]] = ()
    idle: IdleConfig = field(default_factory=IdleConfig)
    idle_log: Path | None = None
    retention: Retention = field(default_factory=Retention)


class MonitorSession:
    """An open monitor and what it needs closed: the NVML session, notifier threads, the
    decision log, the recording (written as it is read, so Ctrl-C or an error loses at most
    the tick in progress)."""

    def __init__(self, options: MonitorOptions, history: History | None = None) -> None:
        self.options = options
        self._stack = ExitStack()
        self.recorded_to: Path | None = None
        try:
            self._open(history)
        except BaseException:
            self._stack.close()
            raise

    def _open(self, history: History | None) -> None:
        o = self.options
        writable_file(o.record, "--record")
        writable_file(o.idle_log, "--idle-log")
        source, self.hostname, self._times = _source(self._stack, o)
        # Everything that can be refused is judged before the recording's file is made: a
        # command that fails before its work leaves nothing behind.
        _check_gpus(source, o)
        evaluator, notifier = _alerting(o)
        self._stack.callback(notifier.close, 10.0)
        self._recorder = None
        if o.record is not None:
            source = self._recorder = self._recording(source)
        self.sampler = _sampler(source, self.hostname, o)
        if self._recorder is not None:
            self._recorder.end_setup()
        decisions = self._stack.enter_context(o.idle_log.open("a")) if o.idle_log else None

        def on_decision(d: IdleDecision) -> None:  # the notifiers log it (GpuIdlePolicy)
            if decisions is not None:
                decisions.write(d.model_dump_json() + "\n")
                decisions.flush()

        self.monitor = Monitor(self.sampler, evaluator=evaluator, notifier=notifier,
                               idle=IdlePolicy(o.idle), history=history,
                               retention=o.retention, on_decision=on_decision)

    def _recording(self, source: Any) -> Any:
        """The recorder, streaming to the file opened now, before any sampling: a line per
        tick, so a crash loses at most the tick in progress."""
        from gpuaudit.hw.telemetry_trace import TraceRecorder

        assert self.options.record is not None
        try:
            stream = self._stack.enter_context(self.options.record.open("w"))
        except OSError as exc:
            raise BadInputError(f"--record {self.options.record}: {exc.strerror or exc}"
                                ) from None
        self.recorded_to = self.options.record
        return TraceRecorder(source, stream, hostname=self.hostname,
                             interval_s=self.options.interval_s,
                             recorded_at=utc_now().isoformat())

    @property
    def frames(self) -> int:
        return self._recorder.frame_count if self._recorder is not None else 0

    def ticks(self, stop: threading.Event, count: int | None = None) -> Iterator[Any]:
        """Tick the monitor until `stop` is set, `count` ticks, or the trace ends."""
        for now in self._times(stop, count):
            tick = self.monitor.tick(now)
            if self._recorder is not None:
                self._recorder.end_frame(now)
            yield tick

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> MonitorSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_monitor(options: MonitorOptions, history: History | None = None) -> MonitorSession:
    """A monitor ready to tick, from its options (`with open_monitor(o) as session:`)."""
    return MonitorSession(options, history)


Times = Callable[[threading.Event, int | None], Iterator[datetime]]


def _source(stack: ExitStack, o: MonitorOptions) -> tuple[Any, str, Times]:
    """The NVML source (live or a trace), the host name, and the tick times it runs on."""
    if o.replay is not None:
        from gpuaudit.hw.telemetry_trace import TraceReplay

        trace = TraceReplay.from_file(o.replay)
        hostname = trace.hostname

        def replayed(stop: threading.Event, count: int | None) -> Iterator[datetime]:
            return replay_times(trace, stop, count, o.speed or None)

        return trace, hostname, replayed
    from gpuaudit.hw import LiveNvml, NvmlUnavailable
    from gpuaudit.hw.host import read_host

    try:
        live = LiveNvml()
    except NvmlUnavailable as exc:
        raise GpuauditError(f"cannot monitor: {exc} (use --replay TRACE to replay a "
                            "recording)") from None
    stack.callback(live.close)

    def timed(stop: threading.Event, count: int | None) -> Iterator[datetime]:
        return live_times(o.interval_s, stop, count)

    return live, read_host().hostname, timed


def _sampler(source: Any, hostname: str, o: MonitorOptions) -> Any:
    """The Sampler over the GPUs asked for; refused when the source has none of them."""
    from gpuaudit.hw.telemetry import Sampler

    _check_gpus(source, o)
    return Sampler(source, hostname=hostname, interval_s=o.interval_s, gpus=o.gpus)


def _check_gpus(source: Any, o: MonitorOptions) -> None:
    """The source has GPUs, a count a machine can have, and each one --gpus names."""
    from gpuaudit.hw.telemetry import gpu_count

    have = gpu_count(source)
    where = f"the trace {o.replay}" if o.replay is not None else "this machine"
    if not have:
        raise BadInputError(f"no GPU to watch on {where}")
    if o.gpus is not None:
        missing = sorted(set(o.gpus) - set(range(have)))
        if missing:
            raise BadInputError(f"--gpus: {where} has no GPU {', '.join(map(str, missing))} "
                                f"(it has {_span(have)})")


def _span(n: int) -> str:
    return "GPU 0" if n == 1 else f"GPUs 0-{n - 1}"


def _alerting(o: MonitorOptions) -> tuple[Any, Any]:
    from .notify import notifiers
    from .rules import Evaluator, load_rules, load_shipped_rules

    evaluator = None
    if o.evaluate_rules:
        ruleset = load_rules(o.rules) if o.rules else load_shipped_rules()
        for problem in ruleset.unknown_metrics():
            logging.getLogger("gpuaudit.rules").warning("%s", problem)
        evaluator = Evaluator(ruleset)
    return evaluator, notifiers(webhooks=o.webhooks, commands=o.commands)


__all__ = ["MonitorOptions", "MonitorSession", "open_monitor"]
