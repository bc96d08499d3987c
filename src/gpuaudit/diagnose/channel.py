"""What the job tells `gpuaudit doctor` from inside: the files its processes write in the
directory named by $GPUAUDIT_DOCTOR_DIR, read back into records.

The writer is the bootstrap (`diagnose/bootstrap/_gpuaudit_bootstrap.py`, loaded into every
Python process of the job; its docstring lists the files and their lines) and, through it,
the Python API's step markers. A line or file that cannot be read is a problem noted in the
diagnosis, never an error: the job's evidence is whatever survived.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuaudit.model.units import Count, Pid, Seconds

ENV_DIR = "GPUAUDIT_DOCTOR_DIR"
ENV_PROFILE = "GPUAUDIT_PROFILE_STEPS"
PROFILE_REQUEST = "profile-request"  # written by the doctor: "N" steps to profile now
_FILE = re.compile(r"^(?P<kind>[a-z]+)-(?P<pid>\d+)\.(?P<ext>[a-z.]+)$")
MAX_LINES = 2_000_000  # per file: a week of 3 steps a second


@dataclass(frozen=True)
class BootInfo:
    """One Python process of the job that loaded the bootstrap."""

    pid: Pid
    ppid: Pid
    argv: tuple[str, ...] = ()
    python: str | None = None
    torch: str | None = None
    hooks: tuple[str, ...] = ()  # what it installed: optimizer, dataloader, syncs, dynamo
    problems: tuple[str, ...] = ()
    markers: bool = False  # the job called gpuaudit.step() itself
    started_s: float | None = None  # time.monotonic()


@dataclass(frozen=True)
class StepTimes:
    """The steps of one process, as their ends (time.monotonic() s), with per-step batch
    waits (None where not measured), sync calls and seconds blocked in syncs."""

    pid: Pid
    source: str  # "markers" (gpuaudit.step()), "optimizer" (Optimizer.step), "batches"
    end_s: tuple[float, ...]
    wait_s: tuple[Seconds | None, ...] = ()
    syncs: tuple[Count, ...] = ()
    sync_s: tuple[Seconds, ...] = ()
    new_shapes: tuple[bool, ...] = ()  # a convolution met a new shape (cudnn.benchmark on)


@dataclass(frozen=True)
class SyncSite:
    what: str  # item, tolist, cpu, __float__, cuda.synchronize, Event.synchronize, ...
    where: str  # the job's file:line that asked for it
    calls: Count
    seconds: Seconds  # blocked in it, all calls together


@dataclass(frozen=True)
class JobEvent:
    pid: Pid
    kind: str  # compile_start, compile_end, recompile, limit, profile_start, profile_end
    t_s: float
    trigger: str | None = None
    id: str | None = None
    code: str | None = None
    reasons: tuple[str, ...] = ()
    message: str | None = None


@dataclass
class ChannelData:
    boots: list[BootInfo] = field(default_factory=list)
    markers: list[StepTimes] = field(default_factory=list)
    auto: list[StepTimes] = field(default_factory=list)  # optimizer or batch steps
    sync_sites: dict[int, list[SyncSite]] = field(default_factory=dict)
    events: list[JobEvent] = field(default_factory=list)
    traces: list[Path] = field(default_factory=list)
    alloc_retries: int | None = None
    problems: list[str] = field(default_factory=list)

    def main_steps(self) -> StepTimes | None:
        return main_steps(self.markers, self.auto)


def main_steps(markers: list[StepTimes], auto: list[StepTimes]) -> StepTimes | None:
    """The job's steps: its own markers where it set any, else those the bootstrap found
    (optimizer steps before batches); of the process with the most (rank 0 of a DDP job is
    as good as any)."""
    for kind in ("markers", "optimizer", "batches"):
        found = [s for s in (markers if kind == "markers" else auto)
                 if s.source == kind and len(s.end_s) >= 2]
        if found:
            return max(found, key=lambda s: (len(s.end_s), -s.pid))
    return None


def _float(text: str) -> float | None:
    return None if text == "-" else float(text)


def _read_steps(path: Path, pid: int, markers: bool, problems: list[str]) -> list[StepTimes]:
    rows: dict[str, list[tuple[float, float | None, int, float, bool]]] = {}
    with path.open(errors="replace") as f:
        for n, line in enumerate(f, 1):
            if n > MAX_LINES:
                problems.append(f"{path.name}: more than {MAX_LINES} lines, the rest not read")
                break
            parts = line.split()
            try:
                end, wait = float(parts[0]), _float(parts[1]) if len(parts) > 1 else None
                if markers:
                    rows.setdefault("markers", []).append((end, wait, 0, 0.0, False))
                else:
                    source = {"opt": "optimizer", "batch": "batches"}[parts[4]]
                    new = len(parts) > 5 and parts[5] == "1"
                    rows.setdefault(source, []).append((end, wait, int(parts[2]),
                                                        float(parts[3]), new))
            except (IndexError, ValueError, KeyError):
                problems.append(f"{path.name} line {n}: not a step line")
    out = []
    for source, got in rows.items():
        got.sort()
        out.append(StepTimes(pid, source, tuple(r[0] for r in got), tuple(r[1] for r in got),
                             tuple(r[2] for r in got), tuple(r[3] for r in got),
                             tuple(r[4] for r in got)))
    return out


def _json(path: Path, problems: list[str]) -> Any:
    try:
        return json.loads(path.read_text(errors="replace"))
    except (OSError, ValueError):
        problems.append(f"{path.name}: unreadable")
        return None


def _boot(doc: Any) -> BootInfo:
    return BootInfo(pid=int(doc["pid"]), ppid=int(doc.get("ppid") or 0),
                    argv=tuple(str(a) for a in doc.get("argv") or ()),
                    python=doc.get("python"), torch=doc.get("torch"),
                    hooks=tuple(doc.get("hooks") or ()),
                    problems=tuple(str(p) for p in doc.get("problems") or ()),
                    markers=bool(doc.get("markers")), started_s=doc.get("started_s"))


def _events(path: Path, problems: list[str]) -> list[JobEvent]:
    out = []
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        try:
            d = json.loads(line)
            out.append(JobEvent(pid=int(d["pid"]), kind=str(d["kind"]), t_s=float(d["t"]),
                                trigger=d.get("trigger"), id=d.get("id"), code=d.get("code"),
                                reasons=tuple(str(r) for r in d.get("reasons") or ()),
                                message=d.get("message")))
        except (ValueError, KeyError, TypeError):
            problems.append(f"{path.name} line {n}: not an event")
    return out


def read_channel(directory: Path) -> ChannelData:
    out = ChannelData()
    for path in sorted(directory.iterdir()) if directory.is_dir() else []:
        m = _FILE.match(path.name)
        if not m:
            continue
        kind, pid, ext = m["kind"], int(m["pid"]), m["ext"]
        try:
            if kind in ("steps", "autosteps") and ext == "txt":
                found = _read_steps(path, pid, kind == "steps", out.problems)
                (out.markers if kind == "steps" else out.auto).extend(found)
            elif kind == "trace":
                out.traces.append(path)
            elif kind == "events" and ext == "jsonl":
                out.events += _events(path, out.problems)
            elif ext == "json" and (doc := _json(path, out.problems)) is not None:
                if kind == "boot":
                    out.boots.append(_boot(doc))
                elif kind == "syncs":
                    out.sync_sites[pid] = [SyncSite(str(s["what"]), str(s["where"]),
                                                    int(s["calls"]), float(s["seconds"]))
                                           for s in doc["sites"]]
                elif kind == "memory":
                    out.alloc_retries = (out.alloc_retries or 0) + \
                        int(doc.get("num_alloc_retries", 0))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            out.problems.append(f"{path.name}: unreadable")
    out.events.sort(key=lambda e: e.t_s)
    for b in out.boots:
        out.problems += [f"bootstrap in pid {b.pid}: {p}" for p in b.problems]
    return out
