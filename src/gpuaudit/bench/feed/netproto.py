"""Our TCP test protocol: the peer side (`gpuaudit bench network --serve`) and the client.

Each test is one TCP connection that starts with a JSON line from the client:
- {"op": "hello"}: the server answers with a JSON line (its version, host, and the ports of
  the reference servers it started: iperf3, perftest).
- {"op": "sink"}: the client sends until it shuts its side; the server counts the bytes and
  answers {"bytes": N} — so the figure is what arrived, not what left the socket buffer.
- {"op": "source", "seconds": T}: the server sends for T seconds, then closes.
- {"op": "echo", "size": S}: the server returns every S-byte message (TCP_NODELAY both ways).

The server only sinks, sources and echoes bytes; it binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuaudit._version import __version__

PROTO = "gpuaudit-net/1"
DEFAULT_PORT = 5301
CHUNK = 1 << 20
MAX_LINE = 4096
MAX_SOURCE_S = 120.0
MAX_ECHO_BYTES = 1 << 20


class PeerError(Exception):
    """The peer did not answer as a gpuaudit server does."""


def _read_line(sock: socket.socket) -> bytes:
    buf = bytearray()
    while not buf.endswith(b"\n"):
        part = sock.recv(1)
        if not part:
            raise ConnectionError("connection closed before a full line")
        buf += part
        if len(buf) > MAX_LINE:
            raise ValueError("line too long")
    return bytes(buf)


def _recv_exact(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("connection closed mid-message")
        got += n


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(self.server.idle_timeout_s)
        try:
            request = json.loads(_read_line(sock))
            op = request.get("op")
            if op == "hello":
                sock.sendall(json.dumps(self.server.hello()).encode() + b"\n")
            elif op == "sink":
                self._sink(sock)
            elif op == "source":
                self._source(sock, min(float(request.get("seconds", 1.0)), MAX_SOURCE_S))
            elif op == "echo":
                self._echo(sock, max(1, min(int(request.get("size", 64)), MAX_ECHO_BYTES)))
        except (OSError, ValueError, ConnectionError):
            return  # a client that went away or spoke nonsense costs only its connection

    def _sink(self, sock: socket.socket) -> None:
        buf = memoryview(bytearray(CHUNK))
        total = 0
        while True:
            n = sock.recv_into(buf)
            if n == 0:
                break
            total += n
        sock.sendall(json.dumps({"bytes": total}).encode() + b"\n")

    def _source(self, sock: socket.socket, seconds: float) -> None:
        data = os.urandom(CHUNK)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)

    def _echo(self, sock: socket.socket, size: int) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        view = memoryview(bytearray(size))
        while True:
            try:
                _recv_exact(sock, view)
            except ConnectionError:
                return
            sock.sendall(view)


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, address: tuple[str, int], extra: dict[str, Any],
                 idle_timeout_s: float) -> None:
        self.extra = extra
        self.idle_timeout_s = idle_timeout_s
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.address_family = family
        super().__init__(address, _Handler)

    def hello(self) -> dict[str, Any]:
        return {"proto": PROTO, "version": __version__, "host": socket.gethostname(),
                **self.extra}


@dataclass
class Server:
    """A running peer: `address` is where it listens; `close()` stops it."""

    server: _Server
    thread: threading.Thread

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def start_server(bind: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 extra: dict[str, Any] | None = None, idle_timeout_s: float = 60.0) -> Server:
    """Serve in a background thread (port 0: any free port)."""
    srv = _Server((bind, port), dict(extra or {}), idle_timeout_s)
    thread = threading.Thread(target=srv.serve_forever, name="gpuaudit-net", daemon=True)
    thread.start()
    return Server(srv, thread)


# ---- the client ----

def _connect(host: str, port: int, timeout_s: float) -> socket.socket:
    return socket.create_connection((host, port), timeout=timeout_s)


def hello(host: str, port: int, timeout_s: float) -> dict[str, Any]:
    """The peer's hello, or PeerError saying what went wrong (refused, timeout, not ours)."""
    try:
        with _connect(host, port, timeout_s) as sock:
            sock.sendall(b'{"op": "hello"}\n')
            answer = json.loads(_read_line(sock))
    except socket.gaierror as exc:
        raise PeerError(f"unknown host {host}: {exc.strerror}") from None
    except TimeoutError:
        raise PeerError(f"no answer within {timeout_s:g} s") from None
    except ConnectionRefusedError:
        raise PeerError("connection refused (nothing listens on that port)") from None
    except (OSError, ValueError, ConnectionError) as exc:
        raise PeerError(f"{type(exc).__name__}: {exc}") from None
    if not isinstance(answer, dict) or answer.get("proto") != PROTO:
        raise PeerError("it answered, but not as `gpuaudit bench network --serve`")
    return answer


@dataclass(frozen=True)
class Throughput:
    bytes: int  # counted by the receiver
    seconds: float
    sent: int  # counted by the sender where we send (it must equal bytes: TCP loses nothing)
    window_gbit: list[float]  # per-window rates at the sender: the spread over time


def _windows(marks: list[list[tuple[float, int]]], start: float, width: float
             ) -> list[float]:
    """Gbit/s per whole window from each stream's (time, cumulative bytes) marks; a chunk
    counts in the window where its call returned."""
    end = max((m[-1][0] for m in marks if m), default=start)
    totals = [0] * int((end - start) // width)
    for stream in marks:
        prev = 0
        for t, b in stream:
            i = int((t - start) // width)
            if 0 <= i < len(totals):
                totals[i] += b - prev
            prev = b
    return [8 * b / width / 1e9 for b in totals]


def send(host: str, port: int, streams: int, seconds: float, timeout_s: float,
         window_s: float = 0.5) -> Throughput:
    """Client → peer: `streams` connections send for `seconds`; the peer counts what arrived."""
    data = os.urandom(CHUNK)
    socks = [_connect(host, port, timeout_s) for _ in range(streams)]
    marks: list[list[tuple[float, int]]] = [[] for _ in socks]
    counted = [0] * streams
    ends = [0.0] * streams
    errors: list[BaseException] = []
    start = time.perf_counter() + 0.05  # all streams begin together
    stop_at = start + seconds

    def run(k: int) -> None:
        sock = socks[k]
        try:
            sock.sendall(b'{"op": "sink"}\n')
            sent = 0
            time.sleep(max(0.0, start - time.perf_counter()))
            while (now := time.perf_counter()) < stop_at:
                sock.sendall(data)
                sent += len(data)
                marks[k].append((now, sent))
            sock.shutdown(socket.SHUT_WR)
            counted[k] = int(json.loads(_read_line(sock))["bytes"])
            ends[k] = time.perf_counter()
        except BaseException as exc:
            errors.append(exc)

    _run_threads(run, streams, socks)
    if errors:
        raise errors[0]
    return Throughput(sum(counted), max(ends) - start, sum(m[-1][1] for m in marks if m),
                      _windows(marks, start, window_s))


def receive(host: str, port: int, streams: int, seconds: float, timeout_s: float,
            window_s: float = 0.5) -> Throughput:
    """Peer → client: the peer sends for `seconds` on each of `streams` connections."""
    socks = [_connect(host, port, timeout_s) for _ in range(streams)]
    marks: list[list[tuple[float, int]]] = [[] for _ in socks]
    got = [0] * streams
    ends = [0.0] * streams
    errors: list[BaseException] = []
    request = json.dumps({"op": "source", "seconds": seconds}).encode() + b"\n"
    start = time.perf_counter()

    def run(k: int) -> None:
        sock = socks[k]
        buf = memoryview(bytearray(CHUNK))
        try:
            sock.sendall(request)
            total = 0
            while (n := sock.recv_into(buf)) > 0:
                total += n
                marks[k].append((time.perf_counter(), total))
            got[k] = total
            ends[k] = time.perf_counter()
        except BaseException as exc:
            errors.append(exc)

    _run_threads(run, streams, socks)
    if errors:
        raise errors[0]
    return Throughput(sum(got), max(ends) - start, sum(got), _windows(marks, start, window_s))


def _run_threads(run: Callable[[int], None], n: int, socks: list[socket.socket]) -> None:
    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(n)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for s in socks:  # also unblocks the threads after Ctrl-C
            with contextlib.suppress(OSError):
                s.close()
        for t in threads:
            t.join()


def round_trips(host: str, port: int, count: int, seconds: float, timeout_s: float,
                size: int = 64) -> list[float]:
    """Round-trip times in µs of `size`-byte messages, up to `count` of them or `seconds`,
    after 10 untimed ones."""
    with _connect(host, port, timeout_s) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(json.dumps({"op": "echo", "size": size}).encode() + b"\n")
        msg = os.urandom(size)
        back = memoryview(bytearray(size))
        rtts: list[float] = []
        for _ in range(10):
            sock.sendall(msg)
            _recv_exact(sock, back)
        end = time.perf_counter() + seconds
        while len(rtts) < count and time.perf_counter() < end:
            t0 = time.perf_counter_ns()
            sock.sendall(msg)
            _recv_exact(sock, back)
            rtts.append((time.perf_counter_ns() - t0) / 1000)
            if bytes(back) != msg:
                raise PeerError("the echo came back different")
        return rtts


def local_address_to(host: str, port: int) -> str | None:
    """The local IP the kernel would use to reach host (no packet sent: a UDP connect)."""
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(info[0], socket.SOCK_DGRAM) as s:
            s.connect(info[4])
            return str(s.getsockname()[0])
    except OSError:
        return None
