"""Reaching a Ray cluster and finding its GPU nodes. Ray is imported here, inside functions."""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from gpuaudit.errors import BadInputError

CONNECT_TIMEOUT_S = 10.0
RETRY_AFTER_S = 3.0
GPU_RESOURCE = "GPU"


@dataclass(frozen=True)
class ClusterNode:
    node_id: str
    hostname: str
    ip: str
    gpus: int  # the GPU resource Ray offers on the node


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise BadInputError("Ray is not installed: pip install 'gpuaudit[fleet]'") from None
    return ray


def _host_port(address: str) -> tuple[str, int] | None:
    """The host and port a Ray address names, when it names one ("auto" and "local" do
    not); for `ray://` (Ray Client) too."""
    text = address.strip().removeprefix("ray://")
    host, sep, port = text.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()):
        return None
    return host.strip("[]"), int(port)


# HTTP/2's connection preface and an empty SETTINGS frame (RFC 9113 §3.4, §6.5): what a
# gRPC client sends first. Ray's GCS and its client server are gRPC servers: they answer
# with a SETTINGS frame of their own. Anything else listening does not.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_H2_SETTINGS = 4


def check_address(address: str) -> None:
    """The address's form: auto, local, HOST:PORT or ray://HOST:PORT, with a port."""
    text = address.strip()
    if text in ("auto", "local"):
        return
    target = _host_port(text)
    if target is None or not target[0] or not 0 < target[1] < 65536:
        raise BadInputError(f"--address {address!r}: expected HOST:PORT of the head (its GCS, "
                            "e.g. 10.0.0.1:6379), ray://HOST:10001 or auto")


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """A one-line error now for an address where no Ray answers: nothing listens, the host
    is silent, or what listens does not speak gRPC (a web server, say). Ray itself would
    retry for minutes, or for ever, before it gives up."""
    target = _host_port(address)
    if target is None:
        return
    # A cluster with TLS (RAY_USE_TLS) answers a TLS handshake first: only the port is tried.
    tls = os.environ.get("RAY_USE_TLS", "").strip().lower() in ("1", "true", "yes")
    why = None
    try:
        with socket.create_connection(target, timeout=timeout_s) as s:
            if tls:
                return
            s.settimeout(timeout_s)
            s.sendall(_H2_PREFACE)
            header = b""
            while len(header) < 9:
                part = s.recv(9 - len(header))
                if not part:
                    break
                header += part
        if len(header) < 9 or header[3] != _H2_SETTINGS:
            said = header.split(b"\r\n", 1)[0].decode("ascii", "replace").strip()
            why = ("what listens there does not speak gRPC (Ray's protocol)"
                   + (f"; it said {said[:40]!r}" if said.isprintable() and said else ""))
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        if isinstance(exc, TimeoutError | socket.timeout):
            why = f"no answer within {timeout_s:g} s"
    if why:
        raise BadInputError(f"cannot reach the Ray cluster at {address}: {why}")


def connect(address: str, *, timeout_s: float = CONNECT_TIMEOUT_S) -> Any:
    """ray, connected to the cluster at `address` ("auto", HOST:PORT of the GCS, or
    ray://HOST:PORT for Ray Client). Any failure is a one-line BadInputError."""
    if not address.strip():
        raise BadInputError("--address is empty (give HOST:PORT, ray://HOST:PORT or auto)")
    check_address(address)
    ray = import_ray()
    check_reachable(address, timeout_s)
    if ray.is_initialized():
        ray.shutdown()
    for attempt in (1, 2):
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
            return ray
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
            # Ray Client puts the server's own reason on the lines after its first.
            said = " ".join(str(exc).split()) or type(exc).__name__
            # The client server starts a server process per client; on a busy head that
            # start can fail once ("Initialization failure from server"). One more try.
            if attempt == 1 and "Initialization failure" in said:
                time.sleep(RETRY_AFTER_S)
                continue
            raise BadInputError(f"cannot connect to the Ray cluster at {address}: "
                                f"{said[:400]}") from None
    return ray


def gpu_nodes(ray: Any, resource: str | None = None) -> list[ClusterNode]:
    """The alive nodes that offer GPUs (the `resource`, default GPU), by host name then IP."""
    resource = resource or GPU_RESOURCE
    found = []
    for n in ray.nodes():
        gpus = int(n.get("Resources", {}).get(resource, 0))
        if n.get("Alive") and gpus > 0:
            found.append(ClusterNode(node_id=n["NodeID"], hostname=n.get("NodeManagerHostname")
                                     or n.get("NodeManagerAddress", "?"),
                                     ip=n.get("NodeManagerAddress", ""), gpus=gpus))
    return sorted(found, key=lambda c: (c.hostname, c.ip, c.node_id))


def alive_node_ids(ray: Any) -> set[str]:
    return {n["NodeID"] for n in ray.nodes() if n.get("Alive")}


def choose(nodes: list[ClusterNode], count: int | None, address: str) -> list[ClusterNode]:
    """`count` of the GPU nodes (all of them when None); bad input when there are none or
    fewer than asked."""
    if not nodes:
        raise BadInputError(f"the Ray cluster at {address} has no node with GPUs (no alive "
                            f"node offers the {GPU_RESOURCE} resource)")
    if count is None:
        return nodes
    if count < 1:
        raise BadInputError(f"--nodes {count}: must be at least 1")
    if count > len(nodes):
        raise BadInputError(f"--nodes {count}: the Ray cluster at {address} has "
                            f"{len(nodes)} GPU node(s)")
    return nodes[:count]
