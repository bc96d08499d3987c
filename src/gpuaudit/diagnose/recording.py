"""Everything a doctor's watch gathered, as one record that can be saved and diagnosed again
(`doctor --save-evidence FILE`, then `doctor --evidence FILE`): the GPU samples, the process
tree's ticks, what the job's bootstrap wrote, the sampled Python stacks, the profile's
analysis. A colleague, a newer gpuaudit, or a test on a machine with no GPU sees exactly what
the live run saw.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from gpuaudit import parse
from gpuaudit.errors import BadInputError
from gpuaudit.hw.proctree import ProcTick
from gpuaudit.hw.pystacks import StackChunk
from gpuaudit.model import Sample

from .channel import BootInfo, JobEvent, StepTimes, SyncSite
from .kineto import TraceStats

FORMAT = "gpuaudit-doctor-evidence"
VERSION = 1


@dataclass
class Evidence:
    started_at: datetime
    started_mono_s: float  # time.monotonic() at started_at: the job side's clock
    duration_s: float
    pid: int
    command: tuple[str, ...] | None = None
    exit_code: int | None = None
    samples: list[Sample] = field(default_factory=list)
    proc_ticks: list[ProcTick] = field(default_factory=list)
    sm_clock_max_mhz: dict[int, int | None] = field(default_factory=dict)
    gpu_reason: str | None = None  # why there is no GPU telemetry
    boots: list[BootInfo] = field(default_factory=list)
    markers: list[StepTimes] = field(default_factory=list)
    auto: list[StepTimes] = field(default_factory=list)
    sync_sites: dict[int, list[SyncSite]] = field(default_factory=dict)
    events: list[JobEvent] = field(default_factory=list)
    alloc_retries: int | None = None
    trace: TraceStats | None = None
    trace_name: str | None = None
    stacks: list[StackChunk] = field(default_factory=list)
    stacks_reason: str | None = None  # why there are no stacks
    source_lines: dict[str, str] = field(default_factory=dict)  # "file:line" → the line
    injected: bool = False  # the bootstrap was put on the job's PYTHONPATH
    profile_requested: str | None = None  # why the doctor asked for a profile mid-run
    notes: list[str] = field(default_factory=list)

    def mono(self, when: datetime) -> float:
        """A sample's time on the job's clock."""
        return self.started_mono_s + (when - self.started_at).total_seconds()

    @property
    def ended_mono_s(self) -> float:
        return self.started_mono_s + self.duration_s


_ADAPTER = TypeAdapter(Evidence)


def dump(ev: Evidence) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, **_ADAPTER.dump_python(ev, mode="json")}


def save(ev: Evidence, path: Path) -> None:
    text = json.dumps(dump(ev))
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)


def _read(path: Path) -> Any:
    """The file's JSON; gzip-compressed where it starts so, unpacked no further than the
    size limit of any file we read."""
    try:
        with path.open("rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
    except OSError as exc:
        raise BadInputError(f"cannot read doctor evidence {path}: {exc.strerror or exc}"
                            ) from None
    if not gz:
        return parse.read_json(path, "doctor evidence")
    try:
        with gzip.open(path, "rb") as f:
            data = f.read(parse.MAX_FILE_BYTES + 1)
    except (OSError, EOFError) as exc:
        raise BadInputError(f"doctor evidence {path}: not readable gzip ({exc})") from None
    if len(data) > parse.MAX_FILE_BYTES:
        raise BadInputError(f"doctor evidence {path} unpacks to more than "
                            f"{parse.human_bytes(parse.MAX_FILE_BYTES)}")
    return parse.load_json(data, f"doctor evidence {path}")


def load(path: Path) -> Evidence:
    doc = _read(path)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BadInputError(f"{path}: not a gpuaudit doctor evidence file "
                            "(`gpuaudit doctor --save-evidence FILE` writes one)")
    if doc.get("version") != VERSION:
        raise BadInputError(f"{path}: evidence version {doc.get('version')!r}; this gpuaudit "
                            f"reads version {VERSION}")
    body = {k: v for k, v in doc.items() if k not in ("format", "version")}
    try:
        return _ADAPTER.validate_python(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BadInputError(f"{path}: {where}: {first['msg']}") from None
