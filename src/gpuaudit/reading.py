"""The one reader of every file a user names: runs, snapshots, telemetry and profiler traces,
doctor evidence, catalogs, rule and expectation files.

What reaches a parser here is a regular file's bytes, bounded before and after gzip
decompression, decoded strictly; everything else is a `BadInputError` with one line that
names the file:

- not a regular file (a FIFO, a socket, a device such as /dev/zero, a directory) is refused
  from its `stat` before it is opened, and again from `fstat` after an open that cannot block
  (O_NONBLOCK: a FIFO swapped in between does not wait for a writer);
- more than `max_bytes` on disk, or unpacking to more than `max_bytes` (a gzip bomb: the
  stream is decompressed piece by piece, never past the limit), is refused;
- damaged gzip, a truncated gzip stream, text that is not UTF-8 or holds NUL bytes is refused;
- JSON is RFC 8259 JSON: `NaN`, `Infinity` and numbers too large for a float (1e999) are
  refused with their line, as is nesting deeper than the interpreter's stack;
- YAML's aliases (`*name`) are counted as expanded before the document is built: nine lines
  of nested aliases would make hundreds of millions of items (a "billion laughs" document).

docs/input.md ("Files") is the user's side of this.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuaudit.errors import BadInputError

MIB = 1 << 20
# Larger than any document gpuaudit writes (a day of telemetry from 8 GPUs is ~100 MiB).
MAX_FILE_BYTES = 256 * MIB
_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


def _mib(n: int) -> str:
    return f"{n / MIB:g} MiB" if n >= MIB else f"{n} bytes"


def _kind(mode: int) -> str | None:
    """What a file that is not a regular file is, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _refuse_kind(mode: int, what: str, path: Path) -> None:
    kind = _kind(mode)
    if kind is not None:
        raise BadInputError(f"{what} {path}: is {kind}, not a regular file")


def _os_error(exc: OSError, what: str, path: Path) -> BadInputError:
    if isinstance(exc, FileNotFoundError):
        return BadInputError(f"cannot read {what} {path}: no such file")
    return BadInputError(f"cannot read {what} {path}: {exc.strerror or exc}")


def _read_regular(path: Path, what: str, max_bytes: int) -> bytes:
    """At most `max_bytes` of a regular file, or BadInputError."""
    try:
        _refuse_kind(os.stat(path).st_mode, what, path)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _os_error(exc, what, path) from None
    try:
        info = os.fstat(fd)
        _refuse_kind(info.st_mode, what, path)  # swapped for a FIFO since the stat
        if info.st_size > max_bytes:
            raise BadInputError(f"{what} {path} is larger than {_mib(max_bytes)}: not one of "
                                "ours")
        parts, got = [], 0
        while got <= max_bytes:  # the size can grow while we read
            part = os.read(fd, min(_CHUNK, max_bytes + 1 - got))
            if not part:
                break
            parts.append(part)
            got += len(part)
    except OSError as exc:
        raise _os_error(exc, what, path) from None
    finally:
        os.close(fd)
    if got > max_bytes:
        raise BadInputError(f"{what} {path} is larger than {_mib(max_bytes)}: not one of ours")
    return b"".join(parts)


def gunzip(data: bytes, origin: str, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes a gzip stream (possibly several members) unpacks to, stopping as soon as
    they pass `max_bytes`; damaged or truncated gzip is BadInputError naming `origin`."""
    out: list[bytes] = []
    size = 0
    rest = data
    try:
        while rest:
            unpack = zlib.decompressobj(zlib.MAX_WBITS | 16)
            chunk = unpack.decompress(rest, max_bytes + 1 - size)
            while True:
                out.append(chunk)
                size += len(chunk)
                if size > max_bytes:
                    raise BadInputError(f"{origin} unpacks to more than {_mib(max_bytes)}: "
                                        "not one of ours")
                if not unpack.unconsumed_tail:
                    break
                chunk = unpack.decompress(unpack.unconsumed_tail, max_bytes + 1 - size)
            if not unpack.eof:
                raise BadInputError(f"{origin}: the gzip stream is cut short")
            rest = unpack.unused_data.lstrip(b"\0")  # more members may follow (zeros between)
            if rest and not rest.startswith(_GZIP_MAGIC):
                raise BadInputError(f"{origin}: data after the end of the gzip stream")
    except zlib.error as exc:
        raise BadInputError(f"{origin}: damaged gzip ({exc})") from None
    return b"".join(out)


def read_bytes(path: str | os.PathLike[str], what: str, *, max_bytes: int = MAX_FILE_BYTES,
               unpack: bool = True) -> bytes:
    """The bytes of a file the user named, unpacked when it is gzip (`unpack`), at most
    `max_bytes` before and after unpacking. `what` names the file in messages ("run file",
    "telemetry trace")."""
    p = Path(path)
    data = _read_regular(p, what, max_bytes)
    if unpack and data[:2] == _GZIP_MAGIC:
        data = gunzip(data, f"{what} {p}", max_bytes)
    return data


def decode(data: bytes, origin: str, *, encoding: str = "utf-8") -> str:
    """Text, strictly: NUL bytes (a binary file) and bytes that are not `encoding` are
    refused, naming `origin` and the first bad byte's offset."""
    if b"\0" in data:
        raise BadInputError(f"{origin} is a binary file, not text")
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        name = "UTF-8" if encoding.replace("-", "").lower().startswith("utf8") else encoding
        raise BadInputError(f"{origin} is not {name} text (byte {exc.start})") from None


def read_text(path: str | os.PathLike[str], what: str, *, max_bytes: int = MAX_FILE_BYTES,
              encoding: str = "utf-8", unpack: bool = True) -> str:
    """The text of a file the user named (see `read_bytes`, `decode`). A UTF-8 byte order
    mark, as spreadsheet programs write, is dropped."""
    data = read_bytes(path, what, max_bytes=max_bytes, unpack=unpack)
    text = decode(data, f"{what} {path}", encoding=encoding)
    return text.removeprefix("\ufeff")


@contextlib.contextmanager
def taking_apart(origin: str) -> Iterator[None]:
    """Around code that takes apart a document the user gave (a file's fields, a stored run's
    packed ones): what a damaged document makes Python raise there (a missing key, a list
    where a mapping was, "lots" where a number was) is bad input naming `origin` and the
    first problem, not a traceback."""
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, RecursionError
            ) as exc:
        errors = getattr(exc, "errors", None)
        if callable(errors) and errors():  # pydantic's: the first problem, at its field's path
            first = errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "document"
            said = f"{where}: {first.get('msg', '')}"
        else:
            said = " ".join(str(exc).split())[:160] or "no message"
        raise BadInputError(f"{origin} is damaged: {type(exc).__name__}: {said}") from None


class _NotJson(ValueError):
    pass


def _constant(token: str) -> Any:
    raise _NotJson(f"{token} is not a JSON number")


def _float(token: str) -> float:
    value = float(token)
    if value in (float("inf"), float("-inf")):
        raise _NotJson(f"{token[:24]} is too large for a number")
    return value


def _where(text: str, token: str) -> str:
    """' (line L column C)' of the first `token` outside a string, best effort."""
    word = token.split(" ", 1)[0]
    pattern = re.compile(r'"(?:[^"\\]|\\.)*"|' + re.escape(word))
    for m in pattern.finditer(text):
        if m.group(0) == word:
            line = text.count("\n", 0, m.start()) + 1
            column = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
            return f" (line {line} column {column})"
    return ""


def load_json(text: str | bytes, origin: str, *, nan_ok: bool = False) -> Any:
    """JSON (RFC 8259: no NaN or Infinity, no number beyond a float), or a one-line
    BadInputError naming `origin` (also for nesting deeper than Python's stack). `nan_ok`:
    take NaN and Infinity as Python's json does (a snapshot keeps what NVML answered; its
    check names such readings)."""
    try:
        if nan_ok:
            return json.loads(text)
        return json.loads(text, parse_constant=_constant, parse_float=_float)
    except _NotJson as exc:
        shown = text if isinstance(text, str) else text.decode("utf-8", "replace")
        raise BadInputError(f"{origin} is not valid JSON: {exc}{_where(shown, str(exc))}"
                            ) from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise BadInputError(f"{origin} is not valid JSON: {why}") from None


def read_json(path: str | os.PathLike[str], what: str, *,
              max_bytes: int = MAX_FILE_BYTES, nan_ok: bool = False) -> Any:
    """A JSON (or gzip-compressed JSON) file the user named; anything else is one line."""
    return load_json(read_text(path, what, max_bytes=max_bytes), f"{what} {path}",
                     nan_ok=nan_ok)



MAX_YAML_ITEMS = 1_000_000  # items once aliases are expanded; our largest file has ~5,000


def _expanded_items(root: Any, origin: str) -> int:
    """How many nodes the document has once every alias is expanded (an alias is the node it
    names, shared): counted once per node, so a document that expands to 10^9 costs as
    much to count as it has lines. A node that holds itself (`&a [*a]`) is refused: it
    would be a list or mapping without end."""
    import yaml

    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: Any) -> int:
        if id(node) in open_nodes:
            raise BadInputError(f"{origin}: invalid YAML at line {node.start_mark.line + 1}: "
                                "an alias inside the node it names")
        if id(node) not in sizes:
            open_nodes.add(id(node))
            if isinstance(node, yaml.SequenceNode):
                n = 1 + sum(size(v) for v in node.value)
            elif isinstance(node, yaml.MappingNode):
                n = 1 + sum(size(k) + size(v) for k, v in node.value)
            else:
                n = 1
            open_nodes.discard(id(node))
            sizes[id(node)] = min(n, MAX_YAML_ITEMS + 1)
        return sizes[id(node)]

    return size(root)


def load_yaml(text: str, origin: str) -> Any:
    """YAML through PyYAML's safe loader, or a one-line BadInputError naming `origin`: also
    for nesting deeper than Python's stack, and for aliases that expand past
    MAX_YAML_ITEMS (nine lines of nested aliases make hundreds of millions of items: a
    "billion laughs" document)."""
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        if root is None:
            return None
        if _expanded_items(root, origin) > MAX_YAML_ITEMS:
            raise BadInputError(f"{origin}: invalid YAML: its aliases expand to more than "
                                f"{MAX_YAML_ITEMS:,} items")
        return yaml.SafeLoader("").construct_document(root)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        said = [getattr(exc, "context", None), getattr(exc, "problem", None)]
        why = ", ".join(str(x) for x in said if x) or type(exc).__name__
        raise BadInputError(f"{origin}: invalid YAML{at}: {' '.join(why.split())}") from None
    except RecursionError:
        raise BadInputError(f"{origin}: invalid YAML: nested too deeply") from None
