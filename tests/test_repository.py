"""Nothing in the repository names the folders of the machines it was developed and measured
on: recordings, runs and scripts read the same on a user's machine (the machine-specific
conventions live in validation/launch.sh only, and it names no folder of theirs either)."""

from __future__ import annotations

import gzip
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Written in pieces so that this file does not name them itself.
FOLDERS = re.compile("|".join(re.escape(p) for p in (
    "/work" + "/main", "/work" + "/wt/", "/work" + "/shared", "/work" + "/.library",
    "/opt" + "/torch")))
# The tests that keep those folders out of docs/ and validation/ name them in their patterns.
PATTERN_HOLDERS = {"tests/test_docs.py", "tests/test_validation.py"}


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [p for p in out.stdout.decode().split("\0") if p and p not in PATTERN_HOLDERS]


def _text(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8", "replace")


def test_no_tracked_file_names_a_development_machines_folder():
    found = []
    for name in _tracked():
        path = ROOT / name
        if not path.is_file() or path.suffix in {".png", ".whl", ".deb"}:
            continue
        m = FOLDERS.search(_text(path))
        if m:
            found.append(f"{name}: {m.group(0)}")
    assert not found, found
