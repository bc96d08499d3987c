"""Notifications for alert transitions (fired, resolved): a log line, a webhook, a command.

A webhook or a command talks to the outside world, which may be slow or down; each runs on its
own background thread behind a bounded queue, so `notify` returns at once and sampling goes on.
A webhook that fails is retried with exponential backoff, a bounded number of times; a command
that fails is logged once for that transition and not retried (an action run twice may do harm,
and a broken one would otherwise fail in a loop).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from gpuaudit._version import __version__
from gpuaudit.errors import BadInputError

from .rules import Transition
from .templates import go_float

log = logging.getLogger("gpuaudit.alerts")

# Alertmanager's "no end time" (Go's zero time), for alerts still firing.
ZERO_TIME = "0001-01-01T00:00:00Z"


class Notifier(Protocol):
    def notify(self, transitions: Sequence[Transition]) -> None: ...

    def close(self, timeout_s: float | None = None) -> None: ...


# --- payloads ----------------------------------------------------------------------------

def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def fingerprint(labels: dict[str, str]) -> str:
    """A stable id of an alert's label set (Alertmanager's role for its fingerprint)."""
    text = "\0".join(f"{k}\0{v}" for k, v in sorted(labels.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def alert_payload(tr: Transition) -> dict[str, Any]:
    """One alert as Alertmanager's webhook shows it, plus its value."""
    a = tr.alert
    return {
        "status": tr.kind,
        "labels": dict(a.labels),
        "annotations": dict(a.annotations),
        "startsAt": _iso(a.fired_at or a.active_since),
        "endsAt": _iso(tr.at) if tr.kind == "resolved" else ZERO_TIME,
        "generatorURL": "",
        "fingerprint": fingerprint(a.labels),
        "value": a.value,
    }


def _common(dicts: list[dict[str, str]]) -> dict[str, str]:
    if not dicts:
        return {}
    return {k: v for k, v in dicts[0].items() if all(d.get(k) == v for d in dicts[1:])}


def webhook_payload(transitions: Sequence[Transition], receiver: str = "gpuaudit"
                    ) -> dict[str, Any]:
    """One evaluation's transitions in the body of Alertmanager's webhook (version 4), so
    receivers written for Alertmanager read it as they are."""
    alerts = [alert_payload(t) for t in transitions]
    common = _common([a["labels"] for a in alerts])
    return {
        "version": "4",
        "groupKey": json.dumps(common, sort_keys=True),
        "truncatedAlerts": 0,
        "status": "firing" if any(t.kind == "firing" for t in transitions) else "resolved",
        "receiver": receiver,
        "groupLabels": {},
        "commonLabels": common,
        "commonAnnotations": _common([a["annotations"] for a in alerts]),
        "externalURL": "",
        "alerts": alerts,
    }


def command_env(tr: Transition) -> dict[str, str]:
    """What a command learns from its environment, beside the alert's JSON on stdin."""
    a = tr.alert
    return {
        "GPUAUDIT_ALERT_NAME": a.name,
        "GPUAUDIT_ALERT_STATUS": tr.kind,
        "GPUAUDIT_ALERT_SEVERITY": a.labels.get("severity", ""),
        "GPUAUDIT_ALERT_GPU": a.labels.get("gpu", ""),
        "GPUAUDIT_ALERT_HOSTNAME": a.labels.get("hostname", ""),
        "GPUAUDIT_ALERT_VALUE": go_float(a.value),
        "GPUAUDIT_ALERT_SUMMARY": a.annotations.get("summary", ""),
        "GPUAUDIT_ALERT_STARTS_AT": _iso(a.fired_at or a.active_since),
        "GPUAUDIT_ALERT_LABELS": json.dumps(a.labels, sort_keys=True),
    }


def describe(tr: Transition) -> str:
    """One line for a person: name, where, value, summary."""
    a = tr.alert
    where = " ".join(f"{k}={a.labels[k]}" for k in ("hostname", "gpu") if a.labels.get(k))
    summary = a.annotations.get("summary", "")
    return (f"alert {a.name} {tr.kind}" + (f" [{where}]" if where else "")
            + f" value={go_float(a.value)}" + (f": {summary}" if summary else ""))


# --- the log -----------------------------------------------------------------------------

@dataclass(frozen=True)
class LogNotifier:
    """A log line per transition: ERROR for a critical alert firing, WARNING for any other
    alert firing, INFO when one resolves."""

    logger: logging.Logger = log

    def notify(self, transitions: Sequence[Transition]) -> None:
        for tr in transitions:
            if tr.kind == "resolved":
                level = logging.INFO
            elif tr.alert.labels.get("severity") == "critical":
                level = logging.ERROR
            else:
                level = logging.WARNING
            self.logger.log(level, "%s", describe(tr))

    def close(self, timeout_s: float | None = None) -> None:
        return None


# --- background delivery -----------------------------------------------------------------

def backoff_delays(attempts: int, initial_s: float, cap_s: float) -> tuple[float, ...]:
    """The waits between `attempts` tries: initial, doubled each time, never over cap."""
    return tuple(min(cap_s, initial_s * 2 ** k) for k in range(max(attempts - 1, 0)))


class _Worker:
    """One background thread handling items in order from a bounded queue. A full queue drops
    its oldest item: when the receiver is away that long, the newest state matters most."""

    def __init__(self, name: str, handle: Callable[[Any], None], size: int,
                 logger: logging.Logger) -> None:
        self.name = name
        self._handle = handle
        self._size = max(size, 1)
        self._log = logger
        self._items: deque[Any] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self.stopping = threading.Event()
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: Any) -> None:
        with self._cond:
            if self.stopping.is_set():
                self._log.warning("%s is closed: notification not sent", self.name)
                return
            if len(self._items) >= self._size:
                self._items.popleft()
                self.dropped += 1
                self._log.warning("%s: queue full, dropped the oldest notification (%d "
                                  "dropped so far)", self.name, self.dropped)
            self._items.append(item)
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._items or self.stopping.is_set())
                if self.stopping.is_set():
                    return
                item = self._items.popleft()
                self._busy = True
            try:
                self._handle(item)
            except Exception:  # a bug in one delivery must not end all later ones
                self._log.exception("%s: notification failed", self.name)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait until everything submitted so far is handled; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._items and not self._busy, timeout_s)

    def close(self, timeout_s: float | None = None) -> None:
        """Stop: what is queued is dropped (and said so), a wait between retries is cut."""
        with self._cond:
            left = len(self._items)
            self._items.clear()
            self.stopping.set()
            self._cond.notify_all()
        if left:
            self._log.warning("%s closed with %d notification(s) not sent", self.name, left)
        self._thread.join(timeout_s)


# --- the webhook -------------------------------------------------------------------------

def _safe_url(url: str) -> str:
    """The URL without user, password or query, fit for a log line."""
    p = urllib.parse.urlsplit(url)
    host = p.hostname or ""
    if p.port:
        host = f"{host}:{p.port}"
    return urllib.parse.urlunsplit((p.scheme, host, p.path, "", ""))


def check_webhook_url(url: str) -> str:
    p = urllib.parse.urlsplit(url)
    if p.scheme not in ("http", "https") or not p.hostname:
        raise BadInputError(f"webhook URL must be http(s)://host/...: got {url!r}")
    return url


def post_json(url: str, body: bytes, timeout_s: float) -> int:
    """POST `body` as JSON; the HTTP status (4xx and 5xx included). A connection failure
    raises OSError."""
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": f"gpuaudit/{__version__}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code


def _retryable(status: int) -> bool:
    # A 4xx says the receiver will never take this body (bar a timeout or a rate limit).
    return status >= 500 or status in (408, 429)


class WebhookNotifier:
    """POSTs each evaluation's transitions, as Alertmanager's webhook body, to one URL.
    A failure is retried after 1, 2, 4 ... seconds (capped), at most `max_attempts` tries in
    all, then given up with an error line; meanwhile later notifications wait in the queue."""

    def __init__(self, url: str, *, timeout_s: float = 10.0, max_attempts: int = 8,
                 backoff_initial_s: float = 1.0, backoff_cap_s: float = 60.0,
                 queue_size: int = 256, sleep: Callable[[float], None] | None = None,
                 post: Callable[[str, bytes, float], int] = post_json,
                 logger: logging.Logger = log) -> None:
        self.url = check_webhook_url(url)
        self.timeout_s = timeout_s
        self.max_attempts = max(1, max_attempts)
        self.delays = backoff_delays(self.max_attempts, backoff_initial_s, backoff_cap_s)
        self._post = post
        self._log = logger
        self._worker = _Worker(f"webhook {_safe_url(url)}", self._deliver, queue_size, logger)
        # By default a wait is cut short by close(); tests pass a sleep that returns at once.
        self._sleep = sleep or self._worker.stopping.wait

    def notify(self, transitions: Sequence[Transition]) -> None:
        if transitions:
            self._worker.submit(webhook_payload(transitions))

    def join(self, timeout_s: float | None = None) -> bool:
        return self._worker.join(timeout_s)

    def close(self, timeout_s: float | None = None) -> None:
        self._worker.close(timeout_s)

    def _try(self, body: bytes) -> str | None:
        """None when delivered; else why not, prefixed "final:" when retrying is useless."""
        try:
            status = self._post(self.url, body, self.timeout_s)
        except (OSError, ValueError) as exc:  # refused, unreachable, timed out, bad reply
            return f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
        if 200 <= status < 300:
            return None
        return f"HTTP {status}" if _retryable(status) else f"final:HTTP {status}"

    def _deliver(self, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        where = _safe_url(self.url)
        n = len(payload.get("alerts", ()))
        for attempt in range(1, self.max_attempts + 1):
            why = self._try(body)
            if why is None:
                if attempt > 1:
                    self._log.info("webhook %s: delivered on attempt %d", where, attempt)
                return
            if why.startswith("final:"):
                self._log.error("webhook %s refused the notification (%s): not retried; %d "
                                "alert transition(s) not delivered", where, why[6:], n)
                return
            if attempt == self.max_attempts:
                self._log.error("webhook %s: giving up after %d attempts (%s); %d alert "
                                "transition(s) not delivered", where, attempt, why, n)
                return
            delay = self.delays[attempt - 1]
            if attempt == 1:
                self._log.warning("webhook %s unreachable (%s): retrying with backoff, up to %d "
                                  "attempts", where, why, self.max_attempts)
            else:
                self._log.debug("webhook %s attempt %d failed (%s): next in %g s", where,
                                attempt, why, delay)
            self._sleep(delay)
            if self._worker.stopping.is_set():
                self._log.warning("webhook %s: stopped before delivering", where)
                return


# --- the command -------------------------------------------------------------------------

def check_command(argv: Sequence[str]) -> tuple[str, ...]:
    if not argv or not all(isinstance(a, str) for a in argv):
        raise BadInputError("alert command must be a non-empty argument list")
    exe = argv[0]
    found = (os.access(exe, os.X_OK) and os.path.isfile(exe)) if os.sep in exe \
        else shutil.which(exe) is not None
    if not found:
        raise BadInputError(f"alert command not found or not executable: {exe}")
    return tuple(argv)


def _tail(text: str | bytes | None, limit: int = 300) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    text = (text or "").strip().replace("\n", " | ")
    return text if len(text) <= limit else "…" + text[-limit:]


class CommandNotifier:
    """Runs an argument list (no shell) once per transition: the alert's JSON on stdin,
    GPUAUDIT_ALERT_* in the environment. A failure (exit status, timeout, cannot start) is
    one error line for that transition and nothing more."""

    def __init__(self, argv: Sequence[str], *, timeout_s: float = 60.0, queue_size: int = 256,
                 logger: logging.Logger = log) -> None:
        self.argv = check_command(argv)
        self.timeout_s = timeout_s
        self._log = logger
        self._worker = _Worker(f"alert command {self.argv[0]}", self._run, queue_size, logger)

    def notify(self, transitions: Sequence[Transition]) -> None:
        for tr in transitions:
            self._worker.submit(tr)

    def join(self, timeout_s: float | None = None) -> bool:
        return self._worker.join(timeout_s)

    def close(self, timeout_s: float | None = None) -> None:
        self._worker.close(timeout_s)

    def _run(self, tr: Transition) -> None:
        what = f"{tr.alert.name} {tr.kind}"
        try:
            done = subprocess.run(self.argv, input=json.dumps(alert_payload(tr)), text=True,
                                  capture_output=True, timeout=self.timeout_s, check=False,
                                  env={**os.environ, **command_env(tr)})
        except subprocess.TimeoutExpired as exc:
            self._log.error("alert command %s timed out after %g s for %s (stopped): %s",
                            self.argv[0], self.timeout_s, what, _tail(exc.stderr))
            return
        except OSError as exc:
            self._log.error("alert command %s could not start for %s: %s", self.argv[0],
                            what, exc)
            return
        if done.returncode != 0:
            self._log.error("alert command %s failed (exit status %d) for %s: %s",
                            self.argv[0], done.returncode, what, _tail(done.stderr))


# --- all of them -------------------------------------------------------------------------

@dataclass(frozen=True)
class Fanout:
    """Every notifier gets every transition; one that raises does not stop the others."""

    notifiers: tuple[Notifier, ...]

    def notify(self, transitions: Sequence[Transition]) -> None:
        if not transitions:
            return
        for n in self.notifiers:
            try:
                n.notify(transitions)
            except Exception:  # notification is best effort: monitoring must go on
                log.exception("notifier %s failed", type(n).__name__)

    def close(self, timeout_s: float | None = None) -> None:
        """Deliver what is queued (within `timeout_s` in all), then stop every notifier: an
        alert that fired just before the monitor stopped still reaches its webhook."""
        end = None if timeout_s is None else time.monotonic() + timeout_s
        for n in self.notifiers:
            join = getattr(n, "join", None)
            if join is not None:
                join(None if end is None else max(0.0, end - time.monotonic()))
        for n in self.notifiers:
            n.close(None if end is None else max(0.0, end - time.monotonic()))


def notifiers(*, log_lines: bool = True, webhooks: Iterable[str] = (),
              commands: Iterable[Sequence[str]] = ()) -> Fanout:
    """The notifiers a monitor's options ask for; BadInputError for a bad URL or command."""
    urls = [check_webhook_url(u) for u in webhooks]
    argvs = [check_command(a) for a in commands]  # all checked before any thread starts
    chosen: list[Notifier] = [LogNotifier()] if log_lines else []
    chosen.extend(WebhookNotifier(url) for url in urls)
    chosen.extend(CommandNotifier(argv) for argv in argvs)
    return Fanout(tuple(chosen))
