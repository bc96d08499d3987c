"""`gpuaudit serve`: the local web UI (runs, reports, compare, live page)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuaudit.errors import BadInputError, GpuauditError

DEFAULT_PORT = 8765
# Addresses that need no token: this machine only.
LOCAL = ("127.0.0.1", "localhost", "::1")
MIN_TOKEN_CHARS = 16


def check_bind(host: str, token: str | None) -> None:
    """Any address but this machine's loopback needs a token (and a real one)."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise BadInputError(f"--token: use at least {MIN_TOKEN_CHARS} characters "
                            "(e.g. `python3 -c 'import secrets; print(secrets.token_urlsafe())'`)")
    if host not in LOCAL and token is None:
        raise BadInputError(f"--host {host}: serving beyond 127.0.0.1 needs --token (or "
                            "GPUAUDIT_TOKEN); every request must then carry it")


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        infos = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(infos[0][4])
    except OSError as exc:
        raise BadInputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _seconds(text: str) -> float:
    from gpuaudit.telemetry.rules import parse_duration

    try:
        value = parse_duration(text)
    except ValueError:
        raise BadInputError(f"--interval {text!r}: expected a duration like 1s, 500ms"
                            ) from None
    if value <= 0:
        raise BadInputError(f"--interval {text!r}: must be more than zero")
    return value


def serve_cmd(
    host: Annotated[str, typer.Option(help="Address to listen on. Anything but 127.0.0.1 "
                                           "needs --token.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free one).")
                    ] = DEFAULT_PORT,
    token: Annotated[str | None, typer.Option(
        envvar="GPUAUDIT_TOKEN", show_envvar=True,
        help="Require this token on every request (Authorization: Bearer, or ?token= once "
             "in a browser).")] = None,
    replay: Annotated[Path | None, typer.Option(
        help="Feed the live page from a recorded telemetry trace instead of the GPUs.",
        dir_okay=False)] = None,
    speed: Annotated[float, typer.Option(min=0, help="With --replay: 1 = as recorded, 0 = at "
                                                     "once.")] = 1.0,
    loop: Annotated[bool, typer.Option("--loop/--once", help="With --replay: start again at "
                                                             "the end.")] = True,
    live: Annotated[bool, typer.Option("--live/--no-live", help="Watch this machine's GPUs "
                                                                "for the live page.")] = True,
    interval: Annotated[str, typer.Option(help="Live sampling interval.")] = "1s",
    db: Annotated[str | None, typer.Option(
        "--db", envvar="GPUAUDIT_DB", show_envvar=True,
        help="Store URL [default: a SQLite file in the user data directory]")] = None,
) -> None:
    """A local web UI over the store: runs with filters, each run's report, two runs
    compared, and a live page of the GPUs fed by the monitor.

    Binds 127.0.0.1 by default. Stop with Ctrl-C.
    """
    check_bind(host, token)
    try:
        import uvicorn

        from gpuaudit.web.app import LOCAL_HOSTS, create_app
        from gpuaudit.web.live import nvml_feed, replay_feed
    except ImportError as exc:
        raise GpuauditError(f"gpuaudit serve needs {exc.name}: pip install 'gpuaudit[web]'"
                            ) from None
    interval_s = _seconds(interval)
    feed: Any = None
    if replay is not None:
        feed = replay_feed(replay, speed=speed or None, loop=loop)
    elif live:
        feed = nvml_feed(interval_s)
    app = create_app(db, token=token, feed=feed,
                     allowed_hosts=[*LOCAL_HOSTS, host] if host not in LOCAL else None)
    sock = bind(host, port)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{sock.getsockname()[1]}/"
    if feed is not None:
        feed.start()
    sys.stderr.write(f"gpuaudit serve: {url}" + (" (send the token: ?token=… once, or "
                                                  "Authorization: Bearer …)" if token else "")
                     + ("" if feed else "; live page: no GPU found (--replay TRACE to "
                                         "replay one)") + "; Ctrl-C stops\n")
    sys.stderr.flush()
    config = uvicorn.Config(app, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=2, lifespan="on")
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        if feed is not None:
            feed.stop()
        sock.close()
