"""The Prometheus exporter: a custom collector that turns the monitor's latest state into metric
families at scrape time.

Nothing here runs on a timer of its own: each scrape reads `Latest.get()` once, so a scrape
shows exactly one sample (never half of one tick and half of the next) and costs nothing between
scrapes. Names, kinds and help come from `metrics`, the one list that the rule evaluator and
the dashboards use too.

The collector is registered on a CollectorRegistry of its own, not on prometheus_client's global
one: the global one also carries the client's process_* and python_* collectors, series about
our Python process that a GPU dashboard does not expect and our docs do not list.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gpuaudit.errors import BadInputError

from . import metrics
from .state import Latest

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
    """prometheus_client custom collector over a `Latest` box (read once per scrape)."""

    def __init__(self, latest: Latest, dcgm_names: bool = False, pods: Any = None) -> None:
        self._latest = latest
        self._dcgm_names = dcgm_names
        self._pods = pods  # a PodAttribution, or None

    def collect(self) -> Iterator[Metric]:
        state = self._latest.get()
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


class ExporterServer:
    """A running /metrics endpoint; `close()` stops it and frees the port."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
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
        started = start_http_server(port, addr=host, registry=registry(latest, dcgm_names, pods))
    except socket.gaierror as e:
        raise BadInputError(f"cannot listen on {where}: not a local address ({e.strerror})") \
            from e
    except (OSError, OverflowError, UnicodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise BadInputError(f"cannot listen on {where}: {reason}") from e
    # prometheus-client returns the server and its thread since 0.20; earlier ones return
    # None, and a server we cannot close would leak into every test and restart.
    if not isinstance(started, tuple):
        raise RuntimeError("gpuaudit's exporter needs prometheus-client >= 0.20")
    return ExporterServer(*started)
