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

Hashing a 1 MB catalog costs a fast command ~3 ms, so an entry also keeps the sources' `stat`
(device, inode, size, modification and change times, as git's index does): while it is
unchanged the bytes are not read. The change time cannot be set back (a tool that restores
the modification time, `cp -p` or `touch -d`, still changes it), and a source changed less
than `RACY_S` seconds before the entry was written is never trusted on its `stat` alone (two
writes within one tick of a coarse clock leave the same times): its bytes are hashed.

Entries are pickles of plain data (the caller encodes and decodes its records), written
atomically. They are read only from the user's own cache directory, which is as trusted as
the user's own files.
"""

from __future__ import annotations

import gc
import os
import pickle
import sys
import time
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
FORMAT = 2  # of the entry file itself
_MAGIC = b"gpuaudit-cache\n"
RACY_S = 3.0  # a source changed this recently is hashed (FAT keeps times to 2 s)

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


def stamp(sources: Sequence[Path], salt: str = "") -> bytes:
    """The sources' `stat` (no byte read), or b"-" when one changed too recently to be
    trusted on it (`RACY_S`)."""
    h = blake2b(digest_size=20)
    h.update(f"{__version__}\0{sys.version}\0{FORMAT}\0{salt}\0".encode())
    now = time.time_ns()
    for src in sources:
        try:
            st = os.stat(src)
        except OSError as exc:
            h.update(f"{src}\0{type(exc).__name__}\0".encode())
            continue
        if now - max(st.st_mtime_ns, st.st_ctime_ns) < RACY_S * 1e9:
            return b"-"
        h.update(f"{src}\0{st.st_dev} {st.st_ino} {st.st_size} {st.st_mtime_ns} "
                 f"{st.st_ctime_ns}\0".encode())
    return h.hexdigest().encode()


def _entry(name: str, sources: Sequence[Path], salt: str) -> Path:
    # One entry per (name, sources, salt): two catalogs or two option sets do not evict
    # each other.
    ident = blake2b(repr((name, [str(s) for s in sources], salt)).encode(),
                            digest_size=10).hexdigest()
    return cache_dir() / f"{name}-{ident}.pickle"


def load(name: str, sources: Sequence[Path], salt: str = ""
         ) -> tuple[bytes, bytes, Any | None]:
    """(the sources' fingerprint, or b"" when their `stat` alone proved the entry valid; their
    `stamp`, taken before anything is read; the cached payload or None when there is no
    valid entry)."""
    now = stamp(sources, salt)
    path = _entry(name, sources, salt)
    try:
        raw = path.read_bytes()
    except OSError:
        return fingerprint(sources, salt), now, None
    # MAGIC, the stamp line, the fingerprint line, the pickle
    parts = raw.split(b"\n", 3)
    if len(parts) != 4 or parts[0] + b"\n" != _MAGIC:
        return fingerprint(sources, salt), now, None
    _, kept_stamp, kept_key, body = parts
    key = b""
    if now == b"-" or now != kept_stamp:
        key = fingerprint(sources, salt)
        if key != kept_key:
            return key, now, None
        if now != b"-":  # the same fingerprint under a new stat (a chmod): keep the stat
            _write(path, b"\n".join((_MAGIC[:-1], now, key, body)))
    try:
        return key, now, pickle.loads(body)
    except Exception:
        return key or fingerprint(sources, salt), now, None


def _write(path: Path, data: bytes) -> None:
    """Write the entry atomically; a cache that cannot be written is silently not kept."""
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass


def store(name: str, sources: Sequence[Path], salt: str, key: bytes, payload: Any,
          stamped: bytes = b"-") -> None:
    """Write the entry (`key`: the sources' fingerprint, `stamped`: their `stamp`, both taken
    before they were read); a cache that cannot be written is silently not kept."""
    try:
        body = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        return
    _write(_entry(name, sources, salt), b"\n".join((_MAGIC[:-1], stamped, key, body)))


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
        key, stamped, payload = load(name, sources, salt)
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
    key = key or fingerprint(sources, salt)  # taken before `build` reads the sources
    value = build()
    store(name, sources, salt, key, encode(value), stamped)
    return value
