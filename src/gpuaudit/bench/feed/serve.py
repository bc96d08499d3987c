"""The peer side of `gpuaudit bench network`: our server, plus iperf3's and perftest's where
they are installed (so `--with-native` on the other node finds them), until stopped."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import threading
from dataclasses import dataclass, field

from gpuaudit.bench.feed import netproto
from gpuaudit.errors import BadInputError
from gpuaudit.hw.net import rdma_ports


@dataclass
class Serving:
    server: netproto.Server
    iperf3: subprocess.Popen[bytes] | None = None
    perftest_stop: threading.Event = field(default_factory=threading.Event)
    perftest_thread: threading.Thread | None = None
    perftest_proc: list[subprocess.Popen[bytes]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def address(self) -> tuple[str, int]:
        return self.server.address

    def close(self) -> None:
        self.perftest_stop.set()
        for proc in [self.iperf3, *self.perftest_proc]:
            if proc is not None and proc.poll() is None:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
                if proc.poll() is None:
                    proc.kill()
        if self.perftest_thread is not None:
            self.perftest_thread.join(timeout=10)
        self.server.close()


def _perftest_loop(s: Serving, exe: str, device: str, port: int) -> None:
    """ib_write_bw's server takes one test and exits: start it again until stopped."""
    while not s.perftest_stop.is_set():
        proc = subprocess.Popen([exe, "-d", device, "-p", str(port), "--report_gbits"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        s.perftest_proc[:] = [proc]
        while proc.poll() is None and not s.perftest_stop.wait(0.5):
            pass
        if s.perftest_stop.wait(0.5):
            return


def serve(bind: str = "127.0.0.1", port: int = netproto.DEFAULT_PORT,
          references: bool = True) -> Serving:
    """Start serving. Ours on `port`; iperf3 on port+1 and ib_write_bw on port+2 when
    installed. A port in use or an address not on this host is bad input."""
    extra: dict[str, object] = {}
    notes: list[str] = []
    iperf_exe = shutil.which("iperf3") if references else None
    ports = [p for p in rdma_ports() if p.state == "ACTIVE"] if references else []
    ib_exe = shutil.which("ib_write_bw") if references and ports else None
    try:
        server = netproto.start_server(bind, port, extra)
    except OSError as exc:
        raise BadInputError(f"cannot listen on {bind}:{port}: {exc.strerror or exc}") from None
    s = Serving(server=server, notes=notes)
    real_port = server.address[1]
    if iperf_exe:
        s.iperf3 = subprocess.Popen([iperf_exe, "-s", "-p", str(real_port + 1), "-B", bind],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        extra["iperf3_port"] = real_port + 1
        notes.append(f"iperf3 server on port {real_port + 1}")
    elif references:
        notes.append("iperf3 not installed: --with-native on the other node gets no iperf3 "
                     "figures")
    if ib_exe:
        extra["perftest_port"] = real_port + 2
        s.perftest_thread = threading.Thread(
            target=_perftest_loop, args=(s, ib_exe, ports[0].device, real_port + 2), daemon=True)
        s.perftest_thread.start()
        notes.append(f"ib_write_bw server on {ports[0].device}, port {real_port + 2}")
    server.server.extra.update(extra)
    return s
