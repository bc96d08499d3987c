"""Finding the reference tools gpuaudit runs beside its own figures (nccl-tests, nvbandwidth,
dcgmi, fio): the one rule for where an executable comes from."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_binary(name: str, *, path_env: str | None = None, dir_env: str | None = None,
                directory: str | None = None) -> str | None:
    """The executable `name`, or None. Where the variable `path_env` is set it names the file:
    that file if it can run, else None (a path the user gave is never swapped for another
    binary). Otherwise `name` in `directory` (or the folder `dir_env` names, e.g. an
    nccl-tests build), else on PATH."""
    given = os.environ.get(path_env) if path_env else None
    if given:
        return given if _executable(Path(given)) else None
    folder = directory if directory is not None else (os.environ.get(dir_env) if dir_env
                                                      else None)
    if folder and _executable(Path(folder) / name):
        return str(Path(folder) / name)
    found = shutil.which(name)
    return found if found and _executable(Path(found)) else None
