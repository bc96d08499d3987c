"""The feed suites' command-line pieces: `bench storage PATH...` arguments, the options that
become the suites' ctx.options, and `bench network --serve`."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence

from rich.console import Console

from gpuaudit.bench.suites import SUITES
from gpuaudit.errors import BadInputError

FILE_SIZE_HELP = ("Storage test file size per PATH, e.g. 4G (binary multiples) [default: "
                  "quick 1G, standard 4G, full 16G]")
PEER_HELP = ("Network peer HOST[:PORT] running `gpuaudit bench network --serve` (TCP "
             "throughput and latency to it)")
JOB_HELP = ("The training job to feed: RATE:BYTES (samples/s, stored bytes per sample), then "
            "optionally :jpeg or :raw, :seq or :random, and :DEVICE_BYTES; e.g. "
            "2500:110K:jpeg:random [default: the train suite's rate where measured]")


def split_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """`storage /data /scratch memory` → (["storage", "memory"], ["/data", "/scratch"]):
    words after `storage` that are not suite names are its paths."""
    suites: list[str] = []
    paths: list[str] = []
    in_storage = False
    for arg in args:
        if arg in SUITES:
            suites.append(arg)
            in_storage = arg == "storage"
        elif in_storage:
            paths.append(arg)
        else:
            suites.append(arg)  # unknown: check_suites says so
    return suites, paths


def feed_options(*, paths: Sequence[str] = (), file_size: str | None = None,
                 peer: str | None = None, port: int | None = None,
                 job: str | None = None) -> dict[str, object]:
    """ctx.options for the feed suites from the command line (bad text is bad input)."""
    from gpuaudit.parse import size_bytes

    options: dict[str, object] = {}
    if paths:
        options["paths"] = tuple(paths)
    if file_size is not None:
        try:
            options["file_bytes"] = size_bytes(file_size, "--file-size")
        except (ValueError, IndexError, BadInputError):
            raise BadInputError(f"--file-size {file_size!r}: expected a size like 512M or "
                                "4G") from None
    if peer is not None:
        from gpuaudit.bench.feed.network import parse_peer

        options["peer"], options["port"] = parse_peer(peer, port)
    if job is not None:
        from gpuaudit.bench.feed.verdict import parse_job

        options["job"] = parse_job(job)
    return options


def serve(bind: str, port: int | None, *, json_: bool, console: Console) -> None:
    """Serve the network tests until Ctrl-C (or SIGTERM)."""
    import signal

    from gpuaudit.bench.feed import netproto
    from gpuaudit.bench.feed.serve import serve as start

    serving = start(bind, netproto.DEFAULT_PORT if port is None else port)
    host, real = serving.address
    if json_:
        sys.stdout.write(json.dumps({"serving": f"{host}:{real}", "notes": serving.notes})
                         + "\n")
        sys.stdout.flush()
    console.print(f"serving network tests on {host}:{real}"
                  + (f" ({'; '.join(serving.notes)})" if serving.notes else "")
                  + "; Ctrl-C stops")
    if bind in ("127.0.0.1", "::1", "localhost"):
        console.print("only this host can connect: --bind ADDRESS (or 0.0.0.0) lets the other "
                      "node in")

    def stop(*_: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        serving.close()
