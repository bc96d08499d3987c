"""The monitor's tick and its loops: sample every GPU, count XIDs, judge idleness, evaluate
the alert rules, notify, keep the history, publish the state for the exporter and the view.

Live and replayed telemetry go through the same `Monitor.tick`; only where the time comes from
differs (the wall clock, or the trace's frames).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from gpuaudit.hw.telemetry import Sampler
from gpuaudit.hw.telemetry_trace import TraceReplay
from gpuaudit.model import Alert, GpuSample, Sample, utc_now

from .idle import IdleDecision, IdlePolicy
from .metrics import XidTally, series
from .notify import Notifier
from .rules import Evaluation, Evaluator, Transition
from .state import Latest, MonitorState

log = logging.getLogger("gpuaudit.monitor")


class History(Protocol):
    """Where samples are kept (the store); errors there must not stop the monitoring."""

    def save_sample(self, sample: Sample) -> None: ...

    def compact(self, now: datetime, raw_retention: timedelta,
                rollup_retention: timedelta) -> object: ...


@dataclass(frozen=True)
class Retention:
    raw: timedelta = timedelta(days=1)
    rollup: timedelta = timedelta(days=30)
    every: timedelta = timedelta(minutes=10)  # how often old samples are rolled up


@dataclass(frozen=True)
class Tick:
    sample: Sample
    state: MonitorState
    evaluation: Evaluation | None
    decisions: tuple[IdleDecision, ...]
    problems: tuple[str, ...]  # what went wrong this tick besides the GPUs (store, rules)


def idle_transition(decision: IdleDecision) -> Transition | None:
    """An idle warning or action as an alert transition, so that it reaches the same
    notifiers (log, webhook, command) as the rules' alerts."""
    if decision.kind not in ("warn", "act"):
        return None
    labels = {"alertname": "GpuIdlePolicy", "severity": "warning", "kind": decision.kind,
              "outcome": decision.outcome}
    if decision.gpu is not None:
        labels["gpu"] = str(decision.gpu)
    alert = Alert(name="GpuIdlePolicy", state="firing", labels=labels,
                  annotations={"summary": decision.message},
                  value=decision.idle_for_s, active_since=decision.idle_since,
                  fired_at=decision.time)
    return Transition(kind="firing", alert=alert, at=decision.time)


@dataclass
class Monitor:
    sampler: Sampler
    latest: Latest = field(default_factory=Latest)
    evaluator: Evaluator | None = None
    notifier: Notifier | None = None
    idle: IdlePolicy | None = None
    history: History | None = None
    retention: Retention = field(default_factory=Retention)
    on_decision: Callable[[IdleDecision], None] | None = None
    recent: int = 120  # samples kept per GPU for the live view's sparklines
    xids: XidTally = field(default_factory=XidTally)
    _last_compact: datetime | None = None
    _recent: dict[int, deque[GpuSample]] = field(default_factory=dict)

    def tick(self, now: datetime) -> Tick:
        sample = self.sampler.sample(now)
        problems: list[str] = []
        self.xids.add(sample)
        for g in sample.gpus:
            self._recent.setdefault(g.index, deque(maxlen=self.recent)).append(g)

        decisions = tuple(self.idle.observe(sample)) if self.idle else ()
        idle_states = self.idle.states() if self.idle else {}
        transitions: list[Transition] = []
        for d in decisions:
            if self.on_decision:
                self.on_decision(d)
            if (tr := idle_transition(d)) is not None:
                transitions.append(tr)

        evaluation = None
        alerts: tuple[Alert, ...] = ()
        if self.evaluator is not None:
            evaluation = self.evaluator.evaluate(now, list(series(sample, self.xids,
                                                                  idle_states)))
            alerts = evaluation.alerts
            transitions.extend(evaluation.transitions)
            problems.extend(f"rule {e}" for e in evaluation.errors)
        if self.notifier is not None and transitions:
            self.notifier.notify(transitions)

        if self.history is not None:
            problems.extend(self._keep(sample, now))

        state = MonitorState(sample=sample, xids=self.xids.copy(), idle=idle_states,
                             alerts=alerts)
        self.latest.set(state)
        for p in problems:
            log.warning("%s", p)
        return Tick(sample=sample, state=state, evaluation=evaluation, decisions=decisions,
                    problems=tuple(problems))

    def _keep(self, sample: Sample, now: datetime) -> list[str]:
        assert self.history is not None
        problems = []
        try:
            self.history.save_sample(sample)
        except Exception as exc:  # a busy or gone database costs history, not monitoring
            problems.append(f"history: sample not saved: {type(exc).__name__}: {exc}")
        if self._last_compact is None or now - self._last_compact >= self.retention.every:
            self._last_compact = now
            try:
                self.history.compact(now, self.retention.raw, self.retention.rollup)
            except Exception as exc:
                problems.append(f"history: compaction failed: {type(exc).__name__}: {exc}")
        return problems

    def recent_samples(self) -> dict[int, list[GpuSample]]:
        return {i: list(d) for i, d in self._recent.items()}


def live_times(interval_s: float, stop: threading.Event, count: int | None = None,
               clock: Callable[[], float] = time.monotonic,
               now: Callable[[], datetime] = utc_now) -> Iterator[datetime]:
    """Tick times on the wall clock, `interval_s` apart without drift (a slow tick delays the
    next one, it does not shift every later one), until `stop` is set or `count` ticks."""
    next_at = clock()
    n = 0
    while not stop.is_set() and (count is None or n < count):
        yield now()
        n += 1
        next_at += interval_s
        behind = clock() - next_at
        if behind > 0:  # a slow tick: skip the ticks it missed rather than burst to catch up
            next_at += (behind // interval_s + 1) * interval_s
        if stop.wait(max(0.0, next_at - clock())):
            return


# A replay paced "as recorded" waits at most this long between frames: a trace with a gap of
# days is still replayed, and the log says where it was cut. (A frame dated ahead of this
# machine's clock, or before the frame it follows, is refused by the trace's reader.)
MAX_REPLAY_PAUSE_S = 60.0


def replay_times(replay: TraceReplay, stop: threading.Event, count: int | None = None,
                 speed: float | None = None,
                 max_pause_s: float = MAX_REPLAY_PAUSE_S) -> Iterator[datetime]:
    """The trace's frame times; `speed` (e.g. 1.0 = as recorded) paces them for a demo,
    None replays as fast as the ticks run. No pause is longer than `max_pause_s`."""
    previous: datetime | None = None
    n = 0
    while not stop.is_set() and (count is None or n < count):
        at = replay.advance()
        if at is None:
            return
        pause = (at - previous).total_seconds() / speed if speed and previous else 0.0
        if pause > max_pause_s:
            log.warning("replay: frame at %s comes %.0f s after the previous one at this "
                        "speed; waiting %g s instead", at.isoformat(), pause, max_pause_s)
            pause = max_pause_s
        if pause > 0 and stop.wait(pause):
            return
        previous = at
        n += 1
        yield at
