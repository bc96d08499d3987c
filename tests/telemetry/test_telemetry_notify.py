"""Notifiers: the log line, the webhook against a real local HTTP server (retries with
backoff, given up, never blocking the monitor), the command (stdin, environment, one log line
per failure and no retry)."""

from __future__ import annotations

import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpuaudit.errors import BadInputError
from gpuaudit.model import Alert
from gpuaudit.telemetry.notify import (
    ZERO_TIME,
    CommandNotifier,
    Fanout,
    LogNotifier,
    WebhookNotifier,
    alert_payload,
    backoff_delays,
    command_env,
    fingerprint,
    notifiers,
    webhook_payload,
)
from gpuaudit.telemetry.rules import Transition

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
LOGGER = "gpuaudit.alerts"


def alert(name: str = "GpuTemperatureHigh", severity: str = "warning", gpu: str = "1",
          value: float = 88.0) -> Alert:
    return Alert(name=name, state="firing",
                 labels={"alertname": name, "gpu": gpu, "hostname": "node-a",
                         "severity": severity},
                 annotations={"summary": f"GPU {gpu} on node-a at {value:g} °C"},
                 value=value, active_since=T0, fired_at=T0 + timedelta(minutes=5))


def fired(**kw) -> Transition:
    a = alert(**kw)
    return Transition("firing", a, a.fired_at)


def resolved(**kw) -> Transition:
    return Transition("resolved", alert(**kw), T0 + timedelta(minutes=9))


def messages(caplog, level: int | None = None) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and (level is None or r.levelno == level)]


@pytest.fixture(autouse=True)
def _capture(caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)


# --- payloads and the log line -----------------------------------------------------------

def test_alert_payload_is_alertmanagers_alert():
    assert alert_payload(fired()) == {
        "status": "firing",
        "labels": {"alertname": "GpuTemperatureHigh", "gpu": "1", "hostname": "node-a",
                   "severity": "warning"},
        "annotations": {"summary": "GPU 1 on node-a at 88 °C"},
        "startsAt": "2026-11-30T12:05:00Z",
        "endsAt": ZERO_TIME,
        "generatorURL": "",
        "fingerprint": fingerprint(alert().labels),
        "value": 88.0,
    }
    assert alert_payload(resolved())["endsAt"] == "2026-11-30T12:09:00Z"
    assert fingerprint({"a": "1", "b": "2"}) == fingerprint({"b": "2", "a": "1"})
    assert fingerprint({"a": "1"}) != fingerprint({"a": "2"})


def test_webhook_payload_is_alertmanagers_webhook_body():
    body = webhook_payload([fired(gpu="0"), resolved(gpu="1")])
    assert (body["version"], body["status"], body["receiver"], body["truncatedAlerts"]) == \
        ("4", "firing", "gpuaudit", 0)
    assert body["commonLabels"] == {"alertname": "GpuTemperatureHigh", "hostname": "node-a",
                                    "severity": "warning"}
    assert body["commonAnnotations"] == {}
    assert [(a["status"], a["labels"]["gpu"]) for a in body["alerts"]] == \
        [("firing", "0"), ("resolved", "1")]
    assert webhook_payload([resolved()])["status"] == "resolved"


def test_the_log_line_and_its_level(caplog):
    LogNotifier().notify([fired(severity="critical"), fired(), resolved()])
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.ERROR, "alert GpuTemperatureHigh firing [hostname=node-a gpu=1] value=88: "
                        "GPU 1 on node-a at 88 °C"),
        (logging.WARNING, "alert GpuTemperatureHigh firing [hostname=node-a gpu=1] value=88: "
                          "GPU 1 on node-a at 88 °C"),
        (logging.INFO, "alert GpuTemperatureHigh resolved [hostname=node-a gpu=1] value=88: "
                       "GPU 1 on node-a at 88 °C"),
    ]


def test_backoff_doubles_from_one_second_up_to_the_cap():
    assert backoff_delays(9, 1.0, 60.0) == (1, 2, 4, 8, 16, 32, 60, 60)
    assert backoff_delays(1, 1.0, 60.0) == ()


# --- the webhook, against a real HTTP server ---------------------------------------------

class Receiver:
    """A local HTTP server that answers POSTs with the statuses it is given, then 200."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = list(statuses)
        self.requests: list[tuple[str, str, dict]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((self.path, self.headers["Content-Type"],
                                          json.loads(body)))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook?token=secret"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Callable[..., Receiver]]:
    made: list[Receiver] = []

    def make(statuses: list[int] = ()) -> Receiver:
        made.append(Receiver(list(statuses)))
        return made[-1]

    yield make
    for r in made:
        r.stop()


@pytest.fixture
def close_after() -> Iterator[Callable]:
    opened = []

    def keep(notifier):
        opened.append(notifier)
        return notifier

    yield keep
    for n in opened:
        n.close(timeout_s=5)


def test_the_webhook_posts_the_json_to_a_real_server(receiver, close_after):
    server = receiver()
    hook = close_after(WebhookNotifier(server.url))
    transitions = [fired(), resolved(gpu="0")]
    hook.notify(transitions)
    assert hook.join(10)
    assert server.requests == [("/hook?token=secret", "application/json",
                                json.loads(json.dumps(webhook_payload(transitions))))]
    hook.notify([])  # nothing to say: no request
    assert hook.join(10)
    assert len(server.requests) == 1


def test_a_failing_webhook_is_retried_with_backoff_until_it_answers(receiver, close_after,
                                                                     caplog):
    server = receiver([503, 502])
    waits: list[float] = []
    hook = close_after(WebhookNotifier(server.url, sleep=waits.append))
    hook.notify([fired()])
    assert hook.join(10)
    assert waits == [1.0, 2.0]
    assert len(server.requests) == 3
    assert server.requests[0] == server.requests[2]  # the same body each time
    where = server.url.split("?")[0]  # the token stays out of the log
    assert messages(caplog, logging.WARNING) == [
        f"webhook {where} unreachable (HTTP 503): retrying with backoff, up to 8 attempts"]
    assert messages(caplog, logging.INFO) == [f"webhook {where}: delivered on attempt 3"]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


def test_an_unreachable_webhook_follows_the_backoff_schedule_then_gives_up(close_after, caplog):
    waits: list[float] = []
    url = f"http://127.0.0.1:{closed_port()}/hook"
    hook = close_after(WebhookNotifier(url, max_attempts=9, sleep=waits.append))
    hook.notify([fired(), resolved()])
    assert hook.join(30)
    assert waits == [1, 2, 4, 8, 16, 32, 60, 60]
    # One warning when it starts failing and one error when it gives up: no line per retry
    # above debug level.
    (warning,) = messages(caplog, logging.WARNING)
    (error,) = messages(caplog, logging.ERROR)
    assert warning.startswith(f"webhook {url} unreachable (URLError: ")
    assert error.startswith(f"webhook {url}: giving up after 9 attempts (URLError: ")
    assert error.endswith("; 2 alert transition(s) not delivered")
    assert len(messages(caplog, logging.DEBUG)) == 7


def test_a_webhook_that_refuses_the_body_is_not_retried(receiver, close_after, caplog):
    server = receiver([400])
    waits: list[float] = []
    hook = close_after(WebhookNotifier(server.url, sleep=waits.append))
    hook.notify([fired()])
    assert hook.join(10)
    assert (len(server.requests), waits) == (1, [])
    assert messages(caplog, logging.ERROR) == [
        f"webhook {server.url.split('?')[0]} refused the notification (HTTP 400): not "
        "retried; 1 alert transition(s) not delivered"]


def test_notify_never_waits_for_a_webhook_in_backoff(close_after, caplog):
    in_backoff, release = threading.Event(), threading.Event()
    delivered: list[list[str]] = []
    calls = []

    def post(url: str, body: bytes, timeout_s: float) -> int:
        calls.append(url)
        if len(calls) == 1:
            return 503
        delivered.append([a["labels"]["gpu"] for a in json.loads(body)["alerts"]])
        return 200

    def sleep(seconds: float) -> None:
        in_backoff.set()
        release.wait(10)

    hook = close_after(WebhookNotifier("http://hook.invalid/x", post=post, sleep=sleep,
                                       queue_size=2))
    hook.notify([fired(gpu="1")])
    assert in_backoff.wait(10)
    started = time.monotonic()
    for gpu in ("2", "3", "4", "5"):
        hook.notify([fired(gpu=gpu)])
    assert time.monotonic() - started < 0.5  # the monitor's loop is not held up
    release.set()
    assert hook.join(10)
    # The first one was being retried; of the four behind it the queue of two kept the newest.
    assert delivered == [["1"], ["4"], ["5"]]
    assert [m for m in messages(caplog, logging.WARNING) if "queue full" in m] == [
        "webhook http://hook.invalid/x: queue full, dropped the oldest notification "
        "(1 dropped so far)",
        "webhook http://hook.invalid/x: queue full, dropped the oldest notification "
        "(2 dropped so far)"]


def test_close_cuts_a_backoff_wait_short(close_after, caplog):
    attempted = threading.Event()

    def post(url: str, body: bytes, timeout_s: float) -> int:
        attempted.set()
        raise OSError("connection refused")

    hook = WebhookNotifier("http://hook.invalid/x", post=post, backoff_initial_s=600)
    hook.notify([fired()])
    assert attempted.wait(10)
    started = time.monotonic()
    hook.close(timeout_s=10)
    assert time.monotonic() - started < 2
    assert "webhook http://hook.invalid/x: stopped before delivering" in \
        messages(caplog, logging.WARNING)


@pytest.mark.parametrize("url", ["ftp://host/x", "hook.example.com", "http:///path", ""])
def test_a_bad_webhook_url_is_bad_input(url):
    with pytest.raises(BadInputError, match="webhook URL must be http"):
        WebhookNotifier(url)


# --- the command -------------------------------------------------------------------------

def python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


def test_the_command_gets_the_alert_on_stdin_and_in_its_environment(tmp_path, close_after):
    out = tmp_path / "seen.json"
    code = ("import json, os, sys; env = {k: v for k, v in os.environ.items() "
            "if k.startswith('GPUAUDIT_ALERT_')}; "
            "open(sys.argv[1], 'w').write(json.dumps({'stdin': json.load(sys.stdin), "
            "'env': env}))")
    cmd = close_after(CommandNotifier(python(code, str(out))))
    tr = fired(severity="critical")
    cmd.notify([tr])
    assert cmd.join(30)
    seen = json.loads(out.read_text())
    assert seen["stdin"] == json.loads(json.dumps(alert_payload(tr)))
    assert seen["env"] == command_env(tr)
    assert seen["env"] == {
        "GPUAUDIT_ALERT_NAME": "GpuTemperatureHigh",
        "GPUAUDIT_ALERT_STATUS": "firing",
        "GPUAUDIT_ALERT_SEVERITY": "critical",
        "GPUAUDIT_ALERT_GPU": "1",
        "GPUAUDIT_ALERT_HOSTNAME": "node-a",
        "GPUAUDIT_ALERT_VALUE": "88",
        "GPUAUDIT_ALERT_SUMMARY": "GPU 1 on node-a at 88 °C",
        "GPUAUDIT_ALERT_STARTS_AT": "2026-11-30T12:05:00Z",
        "GPUAUDIT_ALERT_LABELS": '{"alertname": "GpuTemperatureHigh", "gpu": "1", '
                                 '"hostname": "node-a", "severity": "critical"}',
    }


def test_a_failing_command_is_logged_once_per_transition_and_not_retried(tmp_path,
                                                                          close_after, caplog):
    runs = tmp_path / "runs"
    code = ("import sys; open(sys.argv[1], 'a').write('run\\n'); "
            "sys.stderr.write('no route to pager\\n'); sys.exit(3)")
    cmd = close_after(CommandNotifier(python(code, str(runs))))
    cmd.notify([fired(), resolved()])
    assert cmd.join(30)
    assert runs.read_text() == "run\nrun\n"  # once each, no retry
    assert messages(caplog, logging.ERROR) == [
        f"alert command {sys.executable} failed (exit status 3) for GpuTemperatureHigh "
        "firing: no route to pager",
        f"alert command {sys.executable} failed (exit status 3) for GpuTemperatureHigh "
        "resolved: no route to pager"]
    assert messages(caplog, logging.WARNING) == []


def test_a_command_that_hangs_is_stopped_and_logged(close_after, caplog):
    cmd = close_after(CommandNotifier(python("import time; time.sleep(30)"), timeout_s=0.5))
    started = time.monotonic()
    cmd.notify([fired()])
    assert cmd.join(20)
    assert time.monotonic() - started < 15
    (error,) = messages(caplog, logging.ERROR)
    assert error.startswith(f"alert command {sys.executable} timed out after 0.5 s for "
                            "GpuTemperatureHigh firing (stopped)")


def test_a_command_that_does_not_exist_is_bad_input(tmp_path):
    with pytest.raises(BadInputError, match="alert command not found or not executable: "
                                            "no-such-gpuaudit-hook"):
        CommandNotifier(["no-such-gpuaudit-hook", "--now"])
    with pytest.raises(BadInputError, match="non-empty argument list"):
        CommandNotifier([])
    script = tmp_path / "hook.sh"
    script.write_text("#!/bin/sh\n")  # exists but is not executable
    with pytest.raises(BadInputError, match="not executable"):
        CommandNotifier([str(script)])


# --- all of them -------------------------------------------------------------------------

def test_one_broken_notifier_does_not_stop_the_others(caplog):
    got = []

    class Broken:
        def notify(self, transitions):
            raise RuntimeError("bug")

        def close(self, timeout_s=None):
            pass

    class Keeps:
        def notify(self, transitions):
            got.extend(transitions)

        def close(self, timeout_s=None):
            pass

    Fanout((Broken(), Keeps())).notify([fired()])
    assert [t.alert.name for t in got] == ["GpuTemperatureHigh"]
    assert messages(caplog, logging.ERROR) == ["notifier Broken failed"]


def workers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith(("webhook ", "alert command "))}


def test_notifiers_checks_every_option_before_starting_any(receiver):
    before = workers()
    with pytest.raises(BadInputError, match="alert command not found"):
        notifiers(webhooks=[receiver().url], commands=[["no-such-gpuaudit-hook"]])
    assert workers() - before == set()  # the good webhook's thread was never started
    fan = notifiers(webhooks=[receiver().url], commands=[python("pass")])
    try:
        assert [type(n).__name__ for n in fan.notifiers] == ["LogNotifier", "WebhookNotifier",
                                                            "CommandNotifier"]
    finally:
        fan.close(timeout_s=5)
