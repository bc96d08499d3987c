"""`gpuaudit serve`: the local web UI (runs, reports, compare, live page)."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuaudit import parse
from gpuaudit.cli import common
from gpuaudit.cli.common import DbOpt
from gpuaudit.errors import BadInputError, GpuauditError
from gpuaudit.model.base import SCHEMA_VERSION

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


def serve_cmd(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Address to listen on. Anything but 127.0.0.1 "
                                           "needs --token.")] = "127.0.0.1",
    port: Annotated[int, common.integer("--port", help="Port (0: any free one).", lo=0,
                                        hi=65535)] = str(DEFAULT_PORT),
    token: Annotated[str | None, typer.Option(
        envvar="GPUAUDIT_TOKEN", show_envvar=True,
        help="Require this token on every request (Authorization: Bearer, or ?token= once "
             "in a browser).")] = None,
    replay: Annotated[Path | None, typer.Option(
        help="Feed the live page from a recorded telemetry trace instead of the GPUs.",
        dir_okay=False)] = None,
    speed: Annotated[float, common.number(
        "--speed", help="With --replay: 1 = as recorded, 10 = ten times faster, 0 = at once.",
        hi=1e6)] = "1",
    loop: Annotated[bool, typer.Option("--loop/--once", help="With --replay: start again at "
                                                             "the end.")] = True,
    live: Annotated[bool, typer.Option("--live/--no-live", help="Watch this machine's GPUs "
                                                                "for the live page.")] = True,
    interval: Annotated[float, common.duration(
        "--interval", help="Live sampling interval (1s, 500ms).", lo_s=0.01, hi_s=parse.HOUR)
    ] = "1s",
    json_: Annotated[bool, typer.Option(
        "--json", help="Once listening, print {url, host, port, live, token_required} as one "
                       "JSON line on stdout (for scripts that start it).")] = False,
    db: DbOpt = None,
) -> None:
    """A local web UI over the store: runs with filters, each run's report, two runs
    compared, and a live page of the GPUs fed by the monitor.

    Binds 127.0.0.1 by default. Reads the store only (opened read-only). Stop with Ctrl-C.
    """
    common.needs(ctx, "speed", on="--replay", present=replay is not None)
    common.needs(ctx, "loop", on="--replay", present=replay is not None)
    common.refuse_together(ctx, ("replay", "interval"))
    check_bind(host, token)
    try:
        import uvicorn

        from gpuaudit.web.app import LOCAL_HOSTS, create_app
        from gpuaudit.web.live import nvml_feed, replay_feed
    except ImportError as exc:
        raise GpuauditError(f"gpuaudit serve needs {exc.name}: pip install 'gpuaudit[web]'"
                            ) from None
    feed: Any = None
    if replay is not None:
        feed = replay_feed(replay, speed=speed or None, loop=loop)
    elif live:
        feed = nvml_feed(interval)
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
    if json_:
        sys.stdout.write(json.dumps({
            "schema_version": SCHEMA_VERSION, "kind": "serve", "url": url, "host": host,
            "port": sock.getsockname()[1], "token_required": token is not None,
            "live": "replay" if replay is not None else "gpus" if feed is not None else None,
        }) + "\n")
        sys.stdout.flush()
    config = uvicorn.Config(app, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=2, lifespan="on")
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        if feed is not None:
            feed.stop()
        sock.close()
