"""Results are never lost to the store: check it can take them before the work, and if saving
still fails after the work, keep the run in a file the error names."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import platformdirs
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from gpuaudit.errors import BadInputError, GpuauditError
from gpuaudit.model import Run

from .opening import configured_db_url, default_db_path, mask_url, read_only_why
from .store import Store


class UnsavedRunError(GpuauditError):
    """The work was done but the store refused the run; `kept_at` is the file that holds it
    instead (None when even that could not be written). Exit code 1."""

    def __init__(self, message: str, run_id: str, kept_at: Path | None) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.kept_at = kept_at


def check_store(url: str | os.PathLike[str] | None = None) -> str:
    """Open the store for writing and close it: a missing driver, an unreachable server, a
    read-only file system or a database that is not ours is a one-line BadInputError now,
    before any work whose results would have nowhere to go. Returns the store's URL as
    messages show it (password masked). A SQLite file that does not exist yet is not created
    (a command that fails before its work leaves nothing behind): its directory, or the
    nearest that exists, must take new files."""
    new = _new_sqlite_file(url)
    if new is None:
        with Store(url) as store:
            return store.url
    shown = mask_url(os.fspath(url)) if url is not None else str(new)
    folder = "the data directory" if url is None and not configured_db_url() else \
        "the directory"
    existing = next(p for p in new.parents if p.exists())
    if not existing.is_dir():
        raise BadInputError(f"cannot create {folder} {new.parent} for database {shown}: "
                            f"{existing} is not a directory")
    why = read_only_why(existing / new.name) or (
        None if os.access(existing, os.W_OK | os.X_OK) else f"{existing} does not take new "
        "files")
    if why:
        raise BadInputError(f"cannot write database {shown}: {why}")
    if new.parent.is_dir():  # else the first save makes the folders
        from gpuaudit.parse import writable_file

        writable_file(new, "--db")  # a name the file system cannot hold, say
    return shown


def _new_sqlite_file(url: str | os.PathLike[str] | None) -> Path | None:
    """The SQLite file `url` names when it does not exist yet; None otherwise (another
    database, an existing file, a URL the store itself will judge)."""
    raw = os.fspath(url) if url is not None else (configured_db_url() or "")
    if not raw:
        path = default_db_path()
    elif "://" not in raw:
        path = Path(raw).expanduser().absolute()
    else:
        try:
            parsed = make_url(raw)
        except (ArgumentError, ValueError):
            return None
        database = parsed.database or ""
        if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") \
                or database.startswith("file:"):
            return None
        path = Path(database).expanduser().absolute()
    return None if os.path.lexists(path) else path


def unsaved_dirs() -> list[Path]:
    """Where a run the store refused is written, in order of preference: beside the default
    store in the user's data directory, else the temporary directory."""
    return [Path(platformdirs.user_data_dir("gpuaudit")) / "unsaved",
            Path(tempfile.gettempdir()) / "gpuaudit-unsaved"]


def keep_run(run: Run, directories: list[Path] | None = None) -> Path | None:
    """Write `run` as its JSON document (what --json prints; `load_run` reads it back) to the
    first of `directories` that takes it; None when none does."""
    document = run.model_dump_json(indent=2) + "\n"
    for directory in directories if directories is not None else unsaved_dirs():
        path = directory / f"run-{run.id}.json"
        try:
            directory.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(".json.partial")
            partial.write_text(document, encoding="utf-8")
            partial.replace(path)  # never a half-written file under the name we give
        except OSError:
            continue
        return path
    return None


def save_or_keep(run: Run, url: str | os.PathLike[str] | None = None, *,
                 directories: list[Path] | None = None) -> str:
    """Save `run` in the store and return its id. When the store fails (it went away, the
    disk filled, the run is already there), write the run to a file instead and raise
    UnsavedRunError naming that file: the caller still has `run` to print."""
    try:
        with Store(url) as store:
            return store.save(run)
    except GpuauditError as exc:
        problem = str(exc)
    tried = directories if directories is not None else unsaved_dirs()
    kept = keep_run(run, tried)
    where = (f"the run is kept in {kept}" if kept is not None
             else "it could not be written to a file either ("
                  + ", ".join(str(d) for d in tried) + " refused it)")
    raise UnsavedRunError(f"run {run.id} was not saved ({problem}); {where}", run.id, kept)
