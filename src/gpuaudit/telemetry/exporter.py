"""The Prometheus exporter: a custom collector that turns the monitor's latest state into metric
families at scrape time.

Nothing here runs on a timer of its own: a scrape reads `Latest.get()` once, so it shows
exactly one sample (never half of one tick and half of the next) and costs nothing between
scrapes. The answer is made once per tick and format and handed to every scraper of that tick
(`CachedExposition`), so a hundred scrapers at once cost one render, not a hundred. Names, kinds
and help come from `metrics`, the one list that the rule evaluator and the dashboards use too.

The collector is registered on a CollectorRegistry of its own, not on prometheus_client's global
one: the global one also carries the client's process_* and python_* collectors, series about
our Python process that a GPU dashboard does not expect and our docs do not list.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import queue
import socket
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder, gzip_accepted

from gpuaudit.errors import BadInputError

from . import metrics
from .state import Latest, MonitorState

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9835


@dataclass(frozen=True)
class _Family:
    kind: str  # "gauge", "counter" or "untyped"
    help: str


def _our_families() -> dict[str, _Family]:
    """Full name → kind and help, in the order the exposition lists them (`up` first: it says
    whether the rest of a GPU's series can be there at all)."""
    fams = {metrics.UP.full_name: _Family(metrics.UP.kind, metrics.UP.help)}
    for m in metrics.GPU_METRICS:
        fams[m.full_name] = _Family(m.kind, m.help)
    for name, (kind, help_) in metrics.EXTRA_METRICS.items():
        fams.setdefault(metrics.PREFIX + name, _Family(kind, help_))
    return fams


def _dcgm_families() -> dict[str, _Family]:
    fams: dict[str, _Family] = {}
    for m in metrics.GPU_METRICS:
        if m.dcgm is None:
            continue
        # dcgm-exporter types its energy and ECC series `counter` with no `_total` suffix.
        # prometheus_client writes a counter's TYPE line as `<name>_total`, which would not
        # match the sample's name; untyped keeps the name exactly dcgm-exporter's, and
        # rate()/increase() work on it all the same.
        kind = "untyped" if m.kind == "counter" else "gauge"
        fams[m.dcgm] = _Family(kind, f"{m.help} dcgm-exporter's name and unit for "
                                     f"{m.full_name}.")
    fams[metrics.DCGM_XID_LAST_CODE] = _Family(
        "gauge", "Code of the last XID error seen (dcgm-exporter's gauge: a repeat of the same "
                 f"code is invisible here; {metrics.PREFIX}{metrics.XID_TOTAL} counts each).")
    return fams


OUR_FAMILIES = _our_families()
DCGM_FAMILIES = _dcgm_families()


def _families(series: Iterable[metrics.Series], defs: dict[str, _Family]) -> Iterator[Metric]:
    by_name: dict[str, list[metrics.Series]] = {}
    for s in series:
        by_name.setdefault(s.name, []).append(s)
    # Families in the documented order; one with no series this scrape is left out whole
    # (Prometheus reads an absent series as "no data", which is what a missing reading is).
    for name, fam in defs.items():
        items = by_name.pop(name, None)
        if items:
            yield _family(name, fam, items)
    # A name metrics emits but nobody defined is a bug there; still export it rather than
    # drop a reading, untyped, so the scrape stays whole.
    for name, items in by_name.items():
        yield _family(name, _Family("untyped", "(not documented)"), items)


def _family(name: str, fam: _Family, items: list[metrics.Series]) -> Metric:
    out: Metric
    if fam.kind == "counter" and name.endswith("_total"):
        # CounterMetricFamily strips the trailing `_total` from the family name (the TYPE line
        # gets it back), so the samples, named here in full, are exactly metrics' names.
        out = CounterMetricFamily(name, fam.help)
    elif fam.kind == "gauge":
        out = GaugeMetricFamily(name, fam.help)
    else:
        # A counter without `_total` would be renamed by the client; untyped keeps the name.
        out = Metric(name, fam.help, "untyped")
    for s in items:
        out.add_sample(name, dict(s.labels), s.value)
    return out


class MonitorCollector:
    """prometheus_client custom collector over a `Latest` box (read once per scrape), or over
    one fixed state (`state=`: what a cached exposition is rendered from)."""

    def __init__(self, latest: Latest | None, dcgm_names: bool = False, pods: Any = None,
                 *, state: MonitorState | None = None) -> None:
        self._latest = latest
        self._state = state
        self._dcgm_names = dcgm_names
        self._pods = pods  # a PodAttribution, or None

    def collect(self) -> Iterator[Metric]:
        state = self._state if self._state is not None else self._latest.get()  # type: ignore[union-attr]
        if state.sample is None:  # the monitor has not sampled yet: nothing to say
            return
        found = list(metrics.series(state.sample, state.xids, state.idle))
        if self._pods is not None:
            found += metrics.pod_series(state.sample, self._pods.lookup())
        yield from _families(found, OUR_FAMILIES)
        if self._dcgm_names:
            yield from _families(metrics.dcgm_series(state.sample, state.xids), DCGM_FAMILIES)

    def describe(self) -> Iterator[Metric]:
        """Every family name this collector can produce, without samples: the registry needs
        the names for a scrape that asks for some of them (`/metrics?name[]=gpuaudit_up`)."""
        defs = dict(OUR_FAMILIES)
        if self._dcgm_names:
            defs.update(DCGM_FAMILIES)
        for name, fam in defs.items():
            yield _family(name, fam, [])


def registry(latest: Latest, dcgm_names: bool = False, pods: Any = None) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(MonitorCollector(latest, dcgm_names, pods))
    return reg


def render(latest: Latest, dcgm_names: bool = False) -> bytes:
    """The text exposition (Prometheus format 0.0.4) of the latest state, as a scrape sees it."""
    return generate_latest(registry(latest, dcgm_names))


class CachedExposition:
    """The scrape answer, made once per monitor tick and per format (Prometheus text or
    OpenMetrics, gzip or not) and then handed to every scraper as it is.

    Rendering costs a few ms of Python (the client's writer escapes every label); a hundred
    scrapers arriving together used to render it a hundred times, one after the other under
    the GIL. The first scraper of a new state renders it while the others of the same format
    wait for that one render (a lock per format), so a tick costs one render per format
    however many scrape. A scrape that narrows the families (`?name[]=`) is rendered as
    before."""

    def __init__(self, latest: Latest, dcgm_names: bool = False, pods: Any = None) -> None:
        self._latest = latest
        self._dcgm_names = dcgm_names
        self._pods = pods
        self._lock = threading.Lock()
        self._locks: dict[tuple[str, bool], threading.Lock] = {}
        # (content type, gzip) → (the state and pods it was made from, headers, body)
        self._made: dict[tuple[str, bool], tuple[Any, Any, list[tuple[str, str]], bytes]] = {}

    def answer(self, accept: str | None, accept_encoding: str | None
               ) -> tuple[list[tuple[str, str]], bytes]:
        encoder, content_type = choose_encoder(accept)
        zipped = gzip_accepted(accept_encoding)
        key = (content_type, zipped)
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            state = self._latest.get()
            pods = self._pods.lookup() if self._pods is not None else None
            made = self._made.get(key)
            if made is not None and made[0] is state and made[1] is pods:
                return made[2], made[3]
            reg = CollectorRegistry(auto_describe=False)
            reg.register(MonitorCollector(None, self._dcgm_names, self._pods, state=state))
            body = encoder(reg)
            headers = [("Content-Type", content_type)]
            if zipped:
                body = gzip.compress(body)
                headers.append(("Content-Encoding", "gzip"))
            self._made[key] = (state, pods, headers, body)
            return headers, body


class _Handler(BaseHTTPRequestHandler):
    """One scrape: a plain GET gets the tick's cached answer; `?name[]=` filters, OPTIONS and
    /favicon.ico are answered as prometheus_client's own app answers them, other methods 405.
    One request per connection (HTTP/1.0): with keep-alive an idle Prometheus connection would
    hold one of the few workers between its scrapes."""

    cache: CachedExposition  # set on the subclass `serve` makes
    plain: CollectorRegistry
    # a connection that sends no request in this long lets its worker go (a port scan, a
    # stalled client); Prometheus sends its request at once
    timeout = 5.0

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        if path == "/favicon.ico":
            self._answer(200, [], b"")
            return
        try:
            headers, body = self._exposition(query)
        except Exception as exc:  # the scraper gets a 500, the monitor's log one line
            log.warning("a scrape failed: %s: %s", type(exc).__name__, exc)
            self._answer(500, [("Content-Type", "text/plain; charset=utf-8")],
                         b"# the exporter could not make this answer; see the monitor's log\n")
            return
        self._answer(200, headers, body)

    def _exposition(self, query: str) -> tuple[list[tuple[str, str]], bytes]:
        accept, accept_encoding = self.headers.get("Accept"), self.headers.get("Accept-Encoding")
        if not query:
            return self.cache.answer(accept, accept_encoding)
        encoder, content_type = choose_encoder(accept)
        names = parse_qs(query).get("name[]")
        reg = self.plain.restricted_registry(names) if names else self.plain
        body = encoder(reg)
        headers = [("Content-Type", content_type)]
        if gzip_accepted(accept_encoding):
            body = gzip.compress(body)
            headers.append(("Content-Encoding", "gzip"))
        return headers, body

    def do_OPTIONS(self) -> None:
        self._answer(200, [("Allow", "OPTIONS,GET")], b"")

    def _not_allowed(self) -> None:
        self._answer(405, [("Allow", "OPTIONS,GET")],
                     f"# HTTP 405 Method Not Allowed: {self.command}; use OPTIONS or GET\n"
                     .encode())

    do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = _not_allowed

    def _answer(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """No access log on stderr."""


class _Server(HTTPServer):
    """Scrapes answered by a few worker threads fed from the accept loop, not a thread per
    connection: a hundred scrapers arriving together used to start a hundred threads that
    then fought over the GIL (~0.5 ms of CPU per scrape, most of it that); the workers take
    them in turn at ~0.2 ms each. The listen backlog is the kernel's limit, not
    socketserver's 5: with 5, a burst of scrapers overflowed it, the kernel dropped their
    connection requests and each retried a second later."""

    request_queue_size = 4096  # the kernel caps it at net.core.somaxconn
    workers = 16  # more than one: a request that stalls half-sent holds its worker until
    # the handler's `timeout`

    def server_activate(self) -> None:
        # Linux hands over a connection only once its request has arrived: connections that
        # never send one (health checks of the port, scans) take no worker at all.
        with contextlib.suppress(AttributeError, OSError):
            self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, 5)
        super().server_activate()
        self._queue: queue.SimpleQueue[tuple[Any, Any] | None] = queue.SimpleQueue()
        self._workers = [threading.Thread(target=self._work, name=f"gpuaudit-exporter-{i}",
                                          daemon=True) for i in range(self.workers)]
        for worker in self._workers:
            worker.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        self._queue.put((request, client_address))

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            request, client_address = item
            try:
                self.finish_request(request, client_address)
            except Exception:
                self.handle_error(request, client_address)
            finally:
                self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A scraper that hung up mid-answer is its own business: no traceback on stderr
        (what fails in making an answer is answered 500 and logged by the handler)."""

    def server_close(self) -> None:
        super().server_close()
        for _ in getattr(self, "_workers", ()):
            self._queue.put(None)


class ExporterServer:
    """A running /metrics endpoint; `close()` stops it and frees the port."""

    def __init__(self, server: HTTPServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        # shutdown() only stops the loop; without server_close() the socket stays bound and
        # a restart on the same port fails (prometheus/client_python#1068).
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ExporterServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(latest: Latest, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          dcgm_names: bool = False, pods: Any = None) -> ExporterServer:
    """Serve /metrics on host:port from a daemon thread (port 0: any free port, see `.port`).

    Raises BadInputError, with one line naming the address, when it cannot listen there.
    """
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise BadInputError(f"cannot listen on {where}: the port must be 0-65535")
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                    flags=socket.AI_PASSIVE)[0][0]
        server_class = type("ExporterHttpServer", (_Server,), {"address_family": family})
        handler = type("ExporterHandler", (_Handler,), {
            "cache": CachedExposition(latest, dcgm_names, pods),
            "plain": registry(latest, dcgm_names, pods)})
        httpd = server_class((host, port), handler)
    except socket.gaierror as e:
        raise BadInputError(f"cannot listen on {where}: not a local address ({e.strerror})") \
            from e
    except (OSError, OverflowError, UnicodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise BadInputError(f"cannot listen on {where}: {reason}") from e
    thread = threading.Thread(target=httpd.serve_forever, name="gpuaudit-exporter",
                              daemon=True)
    thread.start()
    return ExporterServer(httpd, thread)
