"""What a fleet expects of each of its nodes, and the nodes that differ (NHC-style checks).

An Expectation names the GPU count, GPU model, driver and CUDA version a node must have and
whether NVML must answer. It comes from a file (`--expect FILE`, what was bought) or from the
fleet itself: each field the value a strict majority of the nodes share (a fleet of 8-GPU
nodes names the one with 7; one node on driver 570 among 580s is named). A field on which no
value has a majority is not judged, and a note says so: naming half the fleet bad on a tie
would be a guess.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import Field, ValidationError

from gpuaudit.errors import BadInputError
from gpuaudit.model import Machine, Record, Run, Severity
from gpuaudit.model.units import MAX_GPUS
from gpuaudit.reading import load_yaml, read_text

FIELDS = ("gpu_count", "gpu_model", "driver_version", "cuda_version")


@dataclass(frozen=True)
class NodeFacts:
    """What one node's audit showed about the things a fleet expects. None: not known."""

    name: str
    gpu_count: int
    gpu_model: str | None  # "NVIDIA H200"; models joined with " + " on a mixed node
    driver_version: str | None
    cuda_version: str | None
    nvml_error: str | None = None  # why NVML did not answer; None when it did


def facts_of(name: str, machine: Machine) -> NodeFacts:
    return NodeFacts(name=name, gpu_count=len(machine.gpus),
                     gpu_model=model_of(g.name for g in machine.gpus),
                     driver_version=machine.driver_version,
                     cuda_version=machine.cuda_driver_version,
                     nvml_error=(machine.nvml_error or "NVML reports no GPU")
                     if not machine.gpus else None)


def model_of(names: Sequence[str] | object) -> str | None:
    found = sorted(set(names)) if isinstance(names, Iterable) else []
    return " + ".join(found) if found else None


class Expectation(Record):
    """What every node must show. Text fields are shell-style patterns ("580.*")."""

    source: str  # where it came from: "--expect FILE", "the majority of 12 nodes"
    gpu_count: Annotated[int, Field(ge=0, le=MAX_GPUS)] | None = None
    gpu_model: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    nvml: bool = True  # NVML must answer (the driver is loaded and sees the GPUs)


def load_expectation(path: Path) -> Expectation:
    """An expectation file (YAML or JSON): any of gpu_count, gpu_model, driver_version,
    cuda_version, nvml. A bad file is a one-line BadInputError."""
    text = read_text(path, "--expect")  # a regular UTF-8 file, bounded: else one line
    data = load_yaml(text, f"--expect {path}")
    if not isinstance(data, dict) or not data:
        raise BadInputError(f"--expect {path}: expected a mapping of {', '.join(FIELDS)}, nvml")
    unknown = sorted(set(data) - {*FIELDS, "nvml"})
    if unknown:
        raise BadInputError(f"--expect {path}: unknown key(s) {', '.join(unknown)} (known: "
                            f"{', '.join(FIELDS)}, nvml)")
    data = {k: str(v) if k in FIELDS[1:] and v is not None else v for k, v in data.items()}
    try:
        return Expectation(source=f"--expect {path}", **data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise BadInputError(f"--expect {path}: {first['loc'][0]}: {first['msg']}") from None


def majority(nodes: Sequence[NodeFacts]) -> tuple[Expectation, list[str]]:
    """The fleet's own expectation: each field the value more than half of the nodes have
    (only nodes whose NVML answered count for the GPU's model and versions; NVML must answer
    when it does on more than half), and notes for the fields without one."""
    answering = [n for n in nodes if n.nvml_error is None]
    values: dict[str, object] = {}
    notes = []
    for field in FIELDS:
        pool = nodes if field == "gpu_count" else answering
        seen = Counter(getattr(n, field) for n in pool if getattr(n, field) is not None)
        if not seen:
            continue
        value, count = seen.most_common(1)[0]
        if 2 * count > len(pool):
            values[field] = value
        elif len(seen) > 1:
            shares = ", ".join(f"{v} on {c}" for v, c in seen.most_common(3))
            notes.append(f"{field.replace('_', ' ')} not judged: no value on more than half "
                         f"of the {len(pool)} nodes ({shares})")
    # A fleet mostly without GPUs (a CPU rehearsal) does not make each node bad for it.
    values["nvml"] = 2 * len(answering) > len(nodes)
    return Expectation(source=f"the majority of {len(nodes)} nodes", **values), notes


def _matches(value: str | None, pattern: str) -> bool:
    return value is not None and fnmatch.fnmatchcase(value, pattern)


def judge(node: NodeFacts, expected: Expectation) -> tuple[str, ...]:
    """Why `node` is not what the fleet expects; empty when it is (or nothing is known)."""
    why = f"the fleet expects {{}} ({expected.source})"
    if node.nvml_error is not None:
        return (f"NVML does not answer: {node.nvml_error}",) if expected.nvml else ()
    problems = []
    if expected.gpu_count is not None and node.gpu_count != expected.gpu_count:
        problems.append(f"{node.gpu_count} GPU(s), " + why.format(expected.gpu_count))
    for field, label in (("gpu_model", "GPU model"), ("driver_version", "driver"),
                         ("cuda_version", "CUDA")):
        pattern = getattr(expected, field)
        value = getattr(node, field)
        if pattern is not None and value is not None and not _matches(value, pattern):
            problems.append(f"{label} {value}, " + why.format(pattern))
    return tuple(problems)


def node_check(name: str, run: Run, expected: Expectation) -> tuple[str, ...]:
    """Why the node `run` inspected is bad by itself: its FAIL findings, then where it is
    not what `expected` says (a scheduler's health check of one node)."""
    reasons = [f"FAIL {f.code}" + (f" on GPU {f.gpu_index}" if f.gpu_index is not None else "")
               + f": {f.message}" for f in run.findings if f.severity is Severity.FAIL]
    if run.machine is not None:
        reasons += judge(facts_of(name, run.machine), expected)
    return tuple(reasons)


__all__ = ["Expectation", "NodeFacts", "facts_of", "judge", "load_expectation", "majority",
           "model_of", "node_check"]
