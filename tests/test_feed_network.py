"""The network suite over loopback and, where root may create them, two network namespaces
joined by a veth pair with a rate limit: the figure must find the limit."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuaudit.bench import runner
from gpuaudit.bench.feed import netproto
from gpuaudit.errors import BadInputError
from tests.conftest import cli_env

from .conftest import fixture_machine
from .support.cli import assert_one_line_error, gpuaudit

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def server() -> Iterator[netproto.Server]:
    srv = netproto.start_server("127.0.0.1", 0)
    yield srv
    srv.close()


def test_the_receiver_counts_every_byte_sent(server):
    host, port = server.address
    t = netproto.send(host, port, 2, 0.4, timeout_s=5)
    assert t.bytes == t.sent > 0 and t.seconds >= 0.4
    r = netproto.receive(host, port, 2, 0.4, timeout_s=5)
    assert r.bytes > 0 and r.seconds >= 0.4
    rtts = netproto.round_trips(host, port, 200, 2.0, timeout_s=5)
    assert len(rtts) == 200 and all(x > 0 for x in rtts)


def test_loopback_suite_figures(server):
    host, port = server.address
    run = runner.run_bench(["network"], machine=fixture_machine(),
                           options={"peer": host, "port": port, "seconds": 0.5, "streams": 2})
    found = {m.name: m for m in run.measurements if m.value is not None}
    for name in ("tcp_send", "tcp_recv"):
        m = found[name]
        assert m.unit == "Gbit/s" and m.params["nic"] == "lo" and m.params["streams"] == 2
        assert m.value == pytest.approx(m.params["bytes"] * 8 / 1e9 / m.params["elapsed_s"],
                                        rel=1e-12)
        assert any("loopback" in n for n in m.notes)
    assert 0 < found["tcp_rtt_p50"].value <= found["tcp_rtt_p99"].value
    assert found["tcp_rtt_p50"].params["round_trips"] >= 100


def test_without_a_peer_only_the_inventory_runs():
    run = runner.run_bench(["network"], machine=fixture_machine())
    send = next(m for m in run.measurements if m.name == "tcp_send")
    assert send.skipped and "--peer" in send.skipped_reason
    assert all(m.params.get("nic") != "lo" for m in run.measurements if m.name == "link_speed")


def test_a_peer_that_does_not_answer_is_bad_input():
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections complete in the backlog; nobody ever answers
    port = silent.getsockname()[1]
    try:
        start = time.monotonic()
        with pytest.raises(BadInputError, match="no answer within 1 s"):
            runner.run_bench(["network"], machine=fixture_machine(), timeout_s=1.0,
                             options={"peer": "127.0.0.1", "port": port})
        assert time.monotonic() - start < 5
    finally:
        silent.close()


def test_a_server_that_is_not_ours_is_refused():
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other.listen(1)

    def answer() -> None:
        conn, _ = other.accept()
        conn.sendall(b'{"hello": "I am a web server"}\n')
        conn.close()

    threading.Thread(target=answer, daemon=True).start()
    try:
        with pytest.raises(BadInputError, match="not as `gpuaudit bench network --serve`"):
            runner.run_bench(["network"], machine=fixture_machine(),
                             options={"peer": "127.0.0.1", "port": other.getsockname()[1]})
    finally:
        other.close()


def test_cli_errors():
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    assert_one_line_error(
        gpuaudit("bench", "network", "--peer", f"127.0.0.1:{port}", "--no-save"),
        "connection refused")
    assert_one_line_error(
        gpuaudit("bench", "network", "--peer", "no-such-host.invalid", "--no-save"),
        "unknown host")
    assert_one_line_error(gpuaudit("bench", "matmul", "--serve"),
                          "--serve is for the network suite")


def _serve(*prefix: str, bind: str = "127.0.0.1") -> tuple[subprocess.Popen[str], str]:
    env = cli_env()
    proc = subprocess.Popen([*prefix, sys.executable, "-m", "gpuaudit", "bench", "network",
                             "--serve", "--bind", bind, "--port", "0", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    return proc, json.loads(line)["serving"]


def _stop(proc: subprocess.Popen[str], sig: int = signal.SIGINT) -> int:
    """Ctrl-C, or SIGTERM (what a script's `kill` sends: background jobs ignore SIGINT)."""
    proc.send_signal(sig)
    return proc.wait(timeout=20)


def test_serve_and_peer_through_the_command_line():
    server, address = _serve()
    try:
        args = ["bench", "network", "--peer", address, "--json", "--no-save"]
        if shutil.which("iperf3"):
            args.append("--with-native")
        done = gpuaudit(*args, timeout=180)
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        ours = {m["name"]: m for m in doc["measurements"]
                if not m["params"].get("tool") and m["value"] is not None}
        assert {"tcp_send", "tcp_recv", "tcp_rtt_p50", "tcp_rtt_p99"} <= set(ours)
        if shutil.which("iperf3"):
            ref = {m["name"]: m for m in doc["measurements"] if m["params"].get("tool") ==
                   "iperf3"}
            assert ref["tcp_send"]["value"] > 0 and ref["tcp_recv"]["value"] > 0
    finally:
        assert _stop(server) == 0


# -- two namespaces and a veth pair ------------------------------------------------------------

RATE_MBIT = 200


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True)


@pytest.fixture
def namespaces() -> Iterator[tuple[str, str]]:
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("network namespaces need root, ip and tc")
    tag = uuid.uuid4().hex[:6]
    a, b = f"gpa{tag}", f"gpb{tag}"
    if _ip("netns", "add", a).returncode != 0:
        pytest.skip("creating a network namespace is not allowed here")
    _ip("netns", "add", b)
    try:
        steps = [
            ["link", "add", f"va{tag}", "type", "veth", "peer", "name", f"vb{tag}"],
            ["link", "set", f"va{tag}", "netns", a], ["link", "set", f"vb{tag}", "netns", b],
            ["-n", a, "addr", "add", "10.237.0.1/24", "dev", f"va{tag}"],
            ["-n", b, "addr", "add", "10.237.0.2/24", "dev", f"vb{tag}"],
            ["-n", a, "link", "set", f"va{tag}", "up"], ["-n", b, "link", "set", f"vb{tag}", "up"],
            ["-n", a, "link", "set", "lo", "up"], ["-n", b, "link", "set", "lo", "up"],
        ]
        for step in steps:
            done = _ip(*step)
            if done.returncode != 0:
                pytest.skip(f"ip {' '.join(step)}: {done.stderr.strip()}")
        for ns, dev in ((a, f"va{tag}"), (b, f"vb{tag}")):  # both directions limited
            done = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev,
                                   "root", "tbf", "rate", f"{RATE_MBIT}mbit", "burst", "64kb",
                                   "latency", "50ms"], capture_output=True, text=True)
            if done.returncode != 0:
                pytest.skip(f"tc tbf not available: {done.stderr.strip()}")
        yield a, b
    finally:
        _ip("netns", "del", a)
        _ip("netns", "del", b)


def test_rate_limited_veth_between_namespaces_is_measured(namespaces):
    a, b = namespaces
    server, address = _serve("ip", "netns", "exec", a, bind="10.237.0.1")
    try:
        assert address.startswith("10.237.0.1:")
        env = cli_env()
        args = ["ip", "netns", "exec", b, sys.executable, "-m", "gpuaudit", "bench", "network",
                "--peer", address, "--json", "--no-save"]
        if shutil.which("iperf3"):
            args.append("--with-native")
        done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=240)
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        want = RATE_MBIT / 1000
        for m in doc["measurements"]:
            if m["name"] in ("tcp_send", "tcp_recv") and m["value"] is not None:
                # tbf shapes at the IP layer; TCP/IP headers take ~3 % of a 1500-byte packet
                assert want * 0.85 < m["value"] < want * 1.02, m
        names = {(m["name"], m["params"].get("tool")) for m in doc["measurements"]
                 if m["value"] is not None}
        assert {("tcp_send", None), ("tcp_recv", None)} <= names
        if shutil.which("iperf3"):
            assert {("tcp_send", "iperf3"), ("tcp_recv", "iperf3")} <= names
    finally:
        assert _stop(server, signal.SIGTERM) == 0
