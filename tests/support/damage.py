"""Damaged files, as users end up handing them to gpuaudit: special files named by mistake
(a FIFO, a socket, a directory, /dev/zero), files cut short, gzip that is broken or unpacks to
far more than it weighs, bytes that are not UTF-8, sparse files of zeros larger than any
document, and JSON documents with values no record holds. Shared by the bad-input suites."""

from __future__ import annotations

import copy
import gzip
import hashlib
import os
import signal
import socket
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MIB = 1 << 20


class Hang(BaseException):
    """Raised by `deadline` inside the command: a BaseException, so that no `except
    Exception` in the code under test can swallow it."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail (raise Hang) when the block runs longer than `seconds`: a blocking open() of a
    FIFO or a read() of a device is interrupted by the timer's signal too."""

    def fire(_signum: int, _frame: Any) -> None:
        raise Hang(f"still running after {seconds:g} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def checksum(path: Path) -> str | None:
    """sha256 of a file and of the SQLite journal beside it; None when there is none."""
    if not path.exists():
        return None
    h = hashlib.sha256(path.read_bytes())
    for extra in (Path(f"{path}-wal"), Path(f"{path}-journal")):
        if extra.exists():
            h.update(extra.read_bytes())
    return h.hexdigest()


# -- special files ---------------------------------------------------------------------------

_SOCKETS: list[socket.socket] = []  # kept open (and bound) while the session runs


def fifo(d: Path, name: str) -> Path:
    p = d / name
    os.mkfifo(p)
    return p


def unix_socket(d: Path, name: str) -> Path:
    p = d / name
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    _SOCKETS.append(s)
    return p


def directory(d: Path, name: str) -> Path:
    p = d / name
    p.mkdir()
    return p


def missing(d: Path, name: str) -> Path:
    return d / name


def dev_zero(_d: Path, _name: str) -> Path:
    return Path("/dev/zero")


def sparse_zeros(d: Path, name: str) -> Path:
    """A file of 300 MiB of zeros that takes no disk (a hole): larger than any document."""
    p = d / name
    with p.open("wb") as f:
        f.truncate(300 * MIB)
    return p


def empty(d: Path, name: str) -> Path:
    p = d / name
    p.write_bytes(b"")
    return p


_BOMBS: dict[bytes, bytes] = {}


def gzip_bomb(inner: bytes = b"\0", mib: int = 300) -> bytes:
    """gzip of `mib` MiB (of `inner` repeated): about a thousandth of that on disk."""
    if inner not in _BOMBS:
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)
        chunk = (inner * (MIB // len(inner) + 1))[:MIB]
        parts = [packer.compress(chunk) for _ in range(mib)]
        _BOMBS[inner] = b"".join(parts) + packer.flush()
    return _BOMBS[inner]


def bomb(d: Path, name: str) -> Path:
    p = d / name
    p.write_bytes(gzip_bomb())
    return p


def json_bomb(d: Path, name: str) -> Path:
    """A gzip whose JSON text would be 300 MiB of one string: valid JSON past the limit."""
    if b"json" not in _BOMBS:
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)
        body = [packer.compress(b'{"a": "')]
        body += [packer.compress(b"x" * MIB) for _ in range(300)]
        body += [packer.compress(b'"}'), packer.flush()]
        _BOMBS[b"json"] = b"".join(body)
    p = d / name
    p.write_bytes(_BOMBS[b"json"])
    return p


def corrupt_gzip(d: Path, name: str) -> Path:
    p = d / name
    p.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"garbage!" * 64)
    return p


SPECIAL: dict[str, Callable[[Path, str], Path]] = {
    "fifo": fifo, "socket": unix_socket, "directory": directory, "missing": missing,
    "/dev/zero": dev_zero, "300 MiB of zeros": sparse_zeros, "empty": empty,
    "gzip bomb": bomb, "gzip of a JSON bomb": json_bomb, "corrupt gzip": corrupt_gzip,
}


# -- byte damage -----------------------------------------------------------------------------

def truncated(data: bytes, at: int) -> bytes:
    return data[: at % max(1, len(data))]


def with_bytes(data: bytes, at: int, junk: bytes) -> bytes:
    at %= max(1, len(data))
    return data[:at] + junk + data[at:]


def gzip_cut(data: bytes, at: int) -> bytes:
    packed = gzip.compress(data)
    return packed[: 10 + at % max(1, len(packed) - 10)]


# -- JSON value damage -------------------------------------------------------------------------

def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path in a JSON document (lists: their first three items only)."""
    if prefix:
        yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):
            yield from paths(v, (*prefix, i))


def number_paths(doc: Any) -> list[tuple[Any, ...]]:
    """The paths that hold a number (not a bool)."""
    found = []
    for p in paths(doc):
        v = doc
        for k in p:
            v = v[k]
        if isinstance(v, int | float) and not isinstance(v, bool):
            found.append(p)
    return found


def mutated(doc: Any, picks: list[tuple[int, Any]], among: list[tuple[Any, ...]] | None = None
            ) -> Any:
    """`doc` with the values at a few of its paths (or of `among`) replaced."""
    doc = copy.deepcopy(doc)
    pool = among if among is not None else list(paths(doc))
    for index, value in picks:
        if not pool:
            break
        path = pool[index % len(pool)]
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier pick replaced the path's parent
    return doc
