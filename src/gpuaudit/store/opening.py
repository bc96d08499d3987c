"""Where a store is and how to reach it: the default location, URLs and their secrets, what a
SQLite file's directory allows, and who holds a locked file. Store uses these to open a
database; nothing here opens one."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import quote

import platformdirs
from sqlalchemy.exc import DBAPIError

from gpuaudit.errors import BadInputError

# A URL's password field: scheme://user:PASSWORD@host (user may be empty).
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][\w+.-]*://[^:/@\s]*:)[^@\s]*@")
# password=... as a URL query parameter or a libpq key=value pair ('quoted' or bare).
_PARAM_PASSWORD = re.compile(r"(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]*)")


def default_db_path() -> Path:
    """gpuaudit.db in the user's data directory (not created here)."""
    return Path(platformdirs.user_data_dir("gpuaudit")) / "gpuaudit.db"


def configured_db_url() -> str | None:
    """GPUAUDIT_DB when set to something, else None."""
    return os.environ.get("GPUAUDIT_DB", "").strip() or None


def default_db_url() -> str:
    """GPUAUDIT_DB when set, else gpuaudit.db in the user's data directory (created here)."""
    env = configured_db_url()
    if env:
        return env
    directory = default_db_path().parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(
            f"cannot create the data directory {directory}: {exc.strerror or exc}"
        ) from None
    return f"sqlite:///{directory / 'gpuaudit.db'}"


def mask_url(raw: str) -> str:
    """`raw` with its password replaced by ***, fit to show in a message."""
    return mask_secrets(raw)


def mask_secrets(text: str) -> str:
    """`text` with every URL password field and `password=` value replaced by ***; nothing
    else is touched (a password's letters elsewhere in a message are only letters)."""
    text = _URL_PASSWORD.sub(r"\1***@", text)
    return _PARAM_PASSWORD.sub(r"\1***", text)


def reason(exc: BaseException | None) -> str:
    """The driver's one-line account of `exc`, with any password field masked."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        exc = exc.orig  # the driver's words, without SQLAlchemy's SQL echo and help link
    if exc is None:
        return "unknown error"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return mask_secrets(" ".join(str(exc).split()) or type(exc).__name__)


def is_locked(exc: BaseException) -> bool:
    """SQLite's "database is locked" (or "... table is locked"), however wrapped."""
    return "is locked" in reason(exc)


# -- SQLite files -----------------------------------------------------------------------------


def read_only_why(path: Path) -> str | None:
    """Why a SQLite file at `path` cannot be written (its directory or itself: SQLite writes
    a journal beside the file), or None when it can. Root passes permission checks, but not a
    read-only file system."""
    directory = path.parent
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return f"{directory} is on a read-only file system"
    except OSError:
        pass
    if not os.access(directory, os.W_OK):
        return f"the directory {directory} is not writable"
    if path.exists() and not os.access(path, os.W_OK):
        return f"{path} is not writable"
    return None


def sqlite_uri(path: Path, *, immutable: bool = False) -> str:
    """A read-only `file:` URI for `path` (characters such as ? and # escaped). `immutable`
    also skips locking and the WAL index: for a file nobody can be writing (a read-only file
    system), which SQLite cannot otherwise open read-only when it is in WAL mode."""
    uri = f"file:{quote(str(path.absolute()))}?mode=ro"
    return uri + "&immutable=1" if immutable else uri


def holders(path: Path, limit: int = 3) -> list[str]:
    """'PID (command)' of other processes that have `path` (or its -wal/-shm) open, as far as
    /proc lets us see: the likely holders of its lock. Best effort; empty elsewhere."""
    wanted = {str(path.resolve()), f"{path.resolve()}-wal", f"{path.resolve()}-shm"}
    found: list[str] = []
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
    except OSError:
        return found
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if not any(os.readlink(f"/proc/{pid}/fd/{fd}") in wanted for fd in fds):
                continue
            command = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:  # gone, or not ours to look at
            continue
        found.append(f"{pid} ({command})")
        if len(found) >= limit:
            break
    return found
