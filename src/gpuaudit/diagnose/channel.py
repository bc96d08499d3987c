"""What the job tells `gpuaudit doctor` from inside: files in the directory named by
$GPUAUDIT_DOCTOR_DIR, one set per process (each rank of a DDP job writes its own).

- `steps-PID.txt`: a line per step, "END_S WAIT_S" (time.monotonic() at the step's end; the
  time spent waiting for its batch, or "-" when not measured). Written in blocks (about once
  a second) so that marking a step costs microseconds.
- `trace-PID.json.gz`: the short torch.profiler capture, when asked for.
- `memory-PID.json`: the caching allocator's retries at the end of the job.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

ENV_DIR = "GPUAUDIT_DOCTOR_DIR"
ENV_PROFILE = "GPUAUDIT_PROFILE_STEPS"
FLUSH_S = 1.0


class StepLog:
    """Step ends and data waits of this process, appended to its file in blocks."""

    def __init__(self, directory: Path | None, pid: int | None = None) -> None:
        self.path = directory / f"steps-{pid or os.getpid()}.txt" if directory else None
        self.times: list[float] = []  # kept in memory too (the in-process diagnosis reads it)
        self.waits: list[float | None] = []
        self._pending: list[str] = []
        self._flushed_at = 0.0

    def add(self, end_s: float, wait_s: float | None) -> None:
        self.times.append(end_s)
        self.waits.append(wait_s)
        if self.path is None:
            return
        self._pending.append(f"{end_s:.6f} {'-' if wait_s is None else f'{wait_s:.6f}'}\n")
        if end_s - self._flushed_at >= FLUSH_S:
            self.flush()
            self._flushed_at = end_s

    def flush(self) -> None:
        if self.path is None or not self._pending:
            return
        try:
            with self.path.open("a") as f:
                f.writelines(self._pending)
        except OSError:
            self.path = None  # the doctor went away: keep the job running regardless
        self._pending.clear()


@dataclass
class ChannelData:
    steps: dict[int, tuple[list[float], list[float]]] = field(default_factory=dict)
    traces: list[Path] = field(default_factory=list)
    alloc_retries: int | None = None
    problems: list[str] = field(default_factory=list)

    def main_steps(self) -> tuple[int, list[float], list[float]] | None:
        """The process with the most steps (rank 0 of a DDP job is as good as any)."""
        if not self.steps:
            return None
        pid = max(self.steps, key=lambda p: (len(self.steps[p][0]), -p))
        times, waits = self.steps[pid]
        return pid, times, waits


def read_channel(directory: Path) -> ChannelData:
    out = ChannelData()
    for path in sorted(directory.glob("steps-*.txt")):
        pid = int(path.stem.split("-", 1)[1])
        times: list[float] = []
        waits: list[float] = []
        for n, line in enumerate(path.read_text().splitlines(), 1):
            parts = line.split()
            try:
                times.append(float(parts[0]))
                if len(parts) > 1 and parts[1] != "-":
                    waits.append(float(parts[1]))
            except (IndexError, ValueError):
                out.problems.append(f"{path.name} line {n}: not 'END WAIT'")
        out.steps[pid] = (times, waits)
    out.traces = sorted(directory.glob("trace-*.json*"))
    for path in sorted(directory.glob("memory-*.json")):
        try:
            retries = int(json.loads(path.read_text()).get("num_alloc_retries", 0))
        except (OSError, ValueError, TypeError, AttributeError):
            out.problems.append(f"{path.name}: unreadable")
            continue
        out.alloc_retries = (out.alloc_retries or 0) + retries
    return out
