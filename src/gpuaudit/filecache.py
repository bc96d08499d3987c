"""Parsed files kept between runs: a command that reads the same large file every time (the
price catalog, 10,000 rows; the GPU datasheet YAML) parses it once and later reads the parsed
form back, in a few milliseconds instead of a second.

An entry is kept in the user cache directory (`platformdirs.user_cache_dir("gpuaudit")`, or
`$GPUAUDIT_CACHE_DIR`) and is valid only for the exact sources it was made from: each source's
path, modification time, size and BLAKE2 hash of its bytes (a missing source counts too, so
creating it invalidates the entry), plus a salt the caller gives (options, format version)
and gpuaudit's and Python's versions. Anything else — a changed, moved or deleted source, a
new gpuaudit, an unreadable or truncated entry — means parse again. The cache is never a
source of errors: when the directory cannot be written the command just parses every time.

Entries are pickles of plain data (the caller encodes and decodes its records), written
atomically. They are read only from the user's own cache directory, which is as trusted as
the user's own files.
"""

from __future__ import annotations

import gc
import os
import pickle
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from gpuaudit._version import __version__
from gpuaudit.errors import BadInputError
from gpuaudit.reading import read_bytes

try:  # the BLAKE2 module itself: `hashlib` loads OpenSSL first (~3 ms of a fast command)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - a Python built without it
    from hashlib import blake2b

CACHE_DIR_ENV = "GPUAUDIT_CACHE_DIR"
FORMAT = 1  # of the entry file itself
_MAGIC = b"gpuaudit-cache\n"

T = TypeVar("T")


def cache_dir() -> Path:
    env = os.environ.get(CACHE_DIR_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("gpuaudit"))


def fingerprint(sources: Sequence[Path], salt: str = "") -> bytes:
    """What the entry depends on: every source's path, mtime, size and content hash."""
    h = blake2b(digest_size=20)
    for part in (f"gpuaudit {__version__}", f"python {sys.version}", f"format {FORMAT}", salt):
        h.update(part.encode() + b"\0")
    for src in sources:
        h.update(str(src).encode() + b"\0")
        try:
            st = os.stat(src)
            # the one reader: a FIFO or /dev/zero named as a source never blocks or fills
            # memory here (regular files only, bounded)
            data = read_bytes(src, "source", unpack=False)
        except (OSError, BadInputError) as exc:  # part of the key; the parse says why
            h.update(f"unreadable {type(exc).__name__}".encode() + b"\0")
            continue
        h.update(f"{st.st_mtime_ns} {st.st_size}".encode() + b"\0")
        h.update(blake2b(data, digest_size=20).digest())
    return h.hexdigest().encode()


def _entry(name: str, sources: Sequence[Path], salt: str) -> Path:
    # One entry per (name, sources, salt): two catalogs or two option sets do not evict
    # each other.
    ident = blake2b(repr((name, [str(s) for s in sources], salt)).encode(),
                            digest_size=10).hexdigest()
    return cache_dir() / f"{name}-{ident}.pickle"


def load(name: str, sources: Sequence[Path], salt: str = "") -> tuple[bytes, Any | None]:
    """(the sources' fingerprint, the cached payload or None when there is no valid entry)."""
    key = fingerprint(sources, salt)
    try:
        raw = _entry(name, sources, salt).read_bytes()
    except OSError:
        return key, None
    head = _MAGIC + key + b"\n"
    if not raw.startswith(head):
        return key, None
    try:
        return key, pickle.loads(raw[len(head):])
    except Exception:
        return key, None


def store(name: str, sources: Sequence[Path], salt: str, key: bytes, payload: Any) -> None:
    """Write the entry; a cache that cannot be written is silently not kept."""
    import tempfile

    path = _entry(name, sources, salt)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(_MAGIC + key + b"\n")
                pickle.dump(payload, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except (OSError, pickle.PicklingError):
        pass


def cached(name: str, sources: Sequence[Path], build: Callable[[], T], *,
           encode: Callable[[T], Any], decode: Callable[[Any], T | None],
           salt: str = "") -> T:
    """`decode` of the cached payload when the sources are unchanged (None from `decode`
    means the payload is stale after all, e.g. dated another day); else `build()`, whose
    `encode`d form is kept for next time. Errors of `build` pass through unchanged."""
    # Reading back 10,000 records makes 20,000 tuples at once: the cyclic garbage collector,
    # run every 700 allocations, would scan them again and again (a third of the time) for
    # cycles that plain data cannot have.
    collecting = gc.isenabled()
    gc.disable()
    try:
        key, payload = load(name, sources, salt)
        value = None
        if payload is not None:
            try:
                value = decode(payload)
            except Exception:  # an entry of an older layout: parse again
                value = None
    finally:
        if collecting:
            gc.enable()
    if value is not None:
        return value
    value = build()
    store(name, sources, salt, key, encode(value))
    return value
