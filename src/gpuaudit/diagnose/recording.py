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

from pydantic import ConfigDict, TypeAdapter, ValidationError

from gpuaudit.errors import BadInputError
from gpuaudit.hw.proctree import ProcTick
from gpuaudit.hw.pystacks import StackChunk
from gpuaudit.model import Sample
from gpuaudit.model.schema import describe_validation_error
from gpuaudit.model.units import Count, GpuIndex, Mhz, Moment, Pid, Seconds
from gpuaudit.reading import load_json, read_text

from .channel import BootInfo, JobEvent, StepTimes, SyncSite
from .kineto import TraceStats

FORMAT = "gpuaudit-doctor-evidence"
VERSION = 1


@dataclass
class Evidence:
    # Read back strictly: finite figures of the right JSON type, within their units' bounds
    # (the nested records' fields carry theirs), or the file is refused naming the field.
    __pydantic_config__ = ConfigDict(strict=True, allow_inf_nan=False)

    started_at: Moment
    started_mono_s: float  # time.monotonic() at started_at: the job side's clock
    duration_s: Seconds
    pid: Pid
    command: tuple[str, ...] | None = None
    exit_code: int | None = None
    samples: list[Sample] = field(default_factory=list)
    proc_ticks: list[ProcTick] = field(default_factory=list)
    sm_clock_max_mhz: dict[GpuIndex, Mhz | None] = field(default_factory=dict)
    gpu_reason: str | None = None  # why there is no GPU telemetry
    boots: list[BootInfo] = field(default_factory=list)
    markers: list[StepTimes] = field(default_factory=list)
    auto: list[StepTimes] = field(default_factory=list)
    sync_sites: dict[int, list[SyncSite]] = field(default_factory=dict)
    events: list[JobEvent] = field(default_factory=list)
    alloc_retries: Count | None = None
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


def load(path: Path) -> Evidence:
    text = read_text(path, "doctor evidence")  # gzip or not, bounded both ways
    doc = load_json(text, f"doctor evidence {path}")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BadInputError(f"{path}: not a gpuaudit doctor evidence file "
                            "(`gpuaudit doctor --save-evidence FILE` writes one)")
    if doc.get("version") != VERSION:
        raise BadInputError(f"{path}: evidence version {doc.get('version')!r}; this gpuaudit "
                            f"reads version {VERSION}")
    try:  # from the text: strict JSON types (an array is a tuple, a string no number)
        return _ADAPTER.validate_json(text)
    except ValidationError as exc:
        raise BadInputError(f"{path}: {describe_validation_error(exc)}") from None
