"""The validation harness: one entry per capability, each a list of steps run as subprocesses
from the repository root, leaving its raw files in one folder and writing one result (JSON) and
one markdown evidence table beside them.

Nothing here knows a machine's folders: the output folder, the scratch folder and where the
reference tools' sources are come in as arguments; the steps read them from the environment
(VALIDATION_OUT, VALIDATION_WORK, VALIDATION_PEERS) and DRY=1 for a run without a GPU.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
SCHEMA_VERSION = 1

# NVLink multicast stays off on every run: on a shared host it can take GPUs out of service.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1", "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}


@dataclass(frozen=True)
class Step:
    """One command of a capability's run. `stdout` names the raw file its output goes to."""

    name: str
    argv: tuple[str, ...]
    timeout_s: float = 600
    env: tuple[tuple[str, str], ...] = ()
    stdout: str | None = None
    # A step whose failure does not fail the run (a probe, a summary of what is there).
    optional: bool = False


@dataclass(frozen=True)
class Context:
    """What a capability's steps are built from."""

    raw: Path          # the capability's raw files
    work: Path         # scratch, removed afterwards
    peers: Path | None  # the reference tools' sources (never committed)
    dry: bool          # no GPU: the CPU part, on recorded inputs where there are some
    args: tuple[str, ...]  # the entry's own options, as typed after `--`
    mode: str | None

    @property
    def python(self) -> str:
        return sys.executable


@dataclass(frozen=True)
class Capability:
    name: str
    what: str                 # one line: what it validates
    reference: str            # the tool or figure ours is set beside
    docs: str                 # the doc page whose evidence table it feeds
    steps: Callable[[Context], list[Step]]
    # the raw files holding its evidence tables (markdown as is, other text fenced)
    table: tuple[str, ...] = ()
    gpu: bool = True          # needs a GPU for the real run
    dry: bool = True          # has a CPU mode (--dry) that runs end to end
    modes: tuple[str, ...] = ()


@dataclass
class StepResult:
    name: str
    command: str
    rc: int | None
    wall_s: float
    optional: bool


@dataclass
class Result:
    capability: str
    command: str
    started_utc: str
    finished_utc: str = ""
    wall_s: float = 0.0
    dry: bool = False
    mode: str | None = None
    machine: dict[str, object] = field(default_factory=dict)
    steps: list[StepResult] = field(default_factory=list)
    table_md: str = ""

    @property
    def ok(self) -> bool:
        return all(s.rc == 0 or s.optional for s in self.steps)

    def to_json(self) -> dict[str, object]:
        return {"schema_version": SCHEMA_VERSION, "capability": self.capability,
                "command": self.command, "started_utc": self.started_utc,
                "finished_utc": self.finished_utc, "wall_s": self.wall_s, "dry": self.dry,
                "mode": self.mode, "ok": self.ok, "machine": self.machine,
                "steps": [vars(s) for s in self.steps], "table_md": self.table_md}


def machine_facts() -> dict[str, object]:
    """The GPUs, driver, CPU count and torch of the machine the run is on (no hostnames)."""
    facts: dict[str, object] = {"cpus": os.cpu_count(), "python": platform.python_version(),
                                "gpus": []}
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total",
                                  "--format=csv,noheader"], capture_output=True, text=True,
                                 timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]
        facts["gpus"] = [r[0] for r in rows]
        if rows and len(rows[0]) > 1:
            facts["driver"] = rows[0][1]
    try:  # torch's version without importing it here (the harness needs no torch)
        from importlib.metadata import version
        facts["torch"] = version("torch")
    except Exception:  # absent or broken metadata: leave it out
        pass
    return facts


def machine_line(facts: dict[str, object]) -> str:
    gpus = facts.get("gpus") or []
    assert isinstance(gpus, list)
    if gpus:
        kinds = sorted(set(gpus))
        what = ", ".join(f"{gpus.count(k)}× {k}" for k in kinds)
        if facts.get("driver"):
            what += f", driver {facts['driver']}"
    else:
        what = "no GPU"
    return f"{what}; {facts.get('cpus')} CPUs; torch {facts.get('torch', 'absent')}"


def _env(ctx: Context, step: Step) -> dict[str, str]:
    env = dict(os.environ)
    for k, v in SAFE_ENV.items():
        env.setdefault(k, v)
    src = str(ROOT / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, str(ROOT), env.get("PYTHONPATH", "")) if p)
    # `python3` in the steps' shell scripts is the interpreter running the harness
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    env["VALIDATION_OUT"] = str(ctx.raw)
    env["VALIDATION_WORK"] = str(ctx.work)
    if ctx.peers is not None:
        env["VALIDATION_PEERS"] = str(ctx.peers)
    if ctx.dry:
        env["DRY"] = "1"
    for key, value in step.env:  # PYTHONPATH: a folder of the repository added after ours
        env[key] = os.pathsep.join((env[key], str(ROOT / value))) if key == "PYTHONPATH" else value
    return env


def _shown(argv: tuple[str, ...], ctx: Context) -> str:
    """The command as a result records it: the interpreter as `python3`, paths in the
    repository relative to it (a result names no folder of the machine it ran on)."""
    words = ["python3" if a == ctx.python else a for a in argv]
    return shlex.join(w.replace(f"{ROOT}/", "") for w in words)


def run_step(ctx: Context, step: Step, log: Callable[[str], None]) -> StepResult:
    command = _shown(step.argv, ctx)
    log(f"validation: {step.name}: {command}")
    out_name = step.stdout or f"{step.name}.log"
    t0 = time.monotonic()
    # a step whose stdout is a result file keeps its stderr apart, in NAME.err
    err_name = out_name if step.stdout is None else f"{step.name}.err"
    with open(ctx.raw / out_name, "ab") as out, open(ctx.raw / err_name, "ab") as err:
        try:
            proc = subprocess.run(step.argv, cwd=ROOT, env=_env(ctx, step), stdout=out,
                                  stderr=subprocess.STDOUT if step.stdout is None else err,
                                  timeout=step.timeout_s, check=False)
            rc: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            rc = None
            log(f"validation: {step.name}: stopped after {step.timeout_s:.0f} s")
        except OSError as exc:
            rc = 127
            log(f"validation: {step.name}: {exc}")
    wall = round(time.monotonic() - t0, 1)
    log(f"validation: {step.name}: rc={rc} wall_s={wall}")
    return StepResult(step.name, command, rc, wall, step.optional)


def table_of(cap: Capability, result: Result, raw: Path) -> str:
    """The evidence table: a line saying when, on what and how, then the capability's own
    table (markdown as written, other text fenced), or the steps' outcomes."""
    how = f"`python -m validation run {cap.name}"
    if result.mode:
        how += f" --mode {result.mode}"
    how += " --dry`" if result.dry else "`"
    head = (f"Measured {result.started_utc[:16].replace('T', ' ')} UTC on "
            f"{machine_line(result.machine)}: {how} ({result.wall_s:.0f} s). "
            f"Reference: {cap.reference}.")
    parts = []
    for name in cap.table:
        if (raw / name).is_file():
            text = (raw / name).read_text(errors="replace").strip()
            parts.append(text if name.endswith(".md") else f"```\n{text}\n```")
    body = "\n\n".join(p for p in parts if p.strip("`\n"))
    if not body:
        rows = ["| step | exit | wall (s) |", "| --- | --- | --- |"]
        rows += [f"| {s.name} | {s.rc} | {s.wall_s} |" for s in result.steps]
        body = "\n".join(rows)
    return f"{head}\n\n{body}\n"


def run_capability(cap: Capability, out: Path, *, dry: bool = False,
                   peers: Path | None = None, mode: str | None = None,
                   args: Sequence[str] = (), log: Callable[[str], None] = print) -> Result:
    """Run every step of `cap`, then write OUT/<name>.json, OUT/<name>.md and the raw files
    packed in OUT/<name>-raw.tar.gz (the raw folder is kept beside them)."""
    out.mkdir(parents=True, exist_ok=True)
    raw = out / f"{cap.name}-raw"
    raw.mkdir(exist_ok=True)
    command = f"python -m validation run {cap.name}" + (f" --mode {mode}" if mode else "") + (
        " --dry" if dry else "") + (" -- " + shlex.join(args) if args else "")
    result = Result(cap.name, command, datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    dry=dry, mode=mode, machine=machine_facts())
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"validation-{cap.name}-") as work:
        ctx = Context(raw, Path(work), peers, dry, tuple(args), mode)
        for step in cap.steps(ctx):
            result.steps.append(run_step(ctx, step, log))
            if result.steps[-1].rc is None and not step.optional:
                break  # a step that ran out of time leaves the rest without theirs
    result.finished_utc = datetime.now(timezone.utc).isoformat(timespec="seconds")
    result.wall_s = round(time.monotonic() - t0, 1)
    result.table_md = table_of(cap, result, raw)
    write(result, out)
    with tarfile.open(out / f"{cap.name}-raw.tar.gz", "w:gz") as tar:
        tar.add(raw, arcname=raw.name)
    return result


def write(result: Result, out: Path) -> tuple[Path, Path]:
    js, md = out / f"{result.capability}.json", out / f"{result.capability}.md"
    js.write_text(json.dumps(result.to_json(), indent=1) + "\n")
    md.write_text(result.table_md)
    return js, md


def load_result(path: Path) -> dict[str, object]:
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path}: not a validation result (schema_version {SCHEMA_VERSION})")
    return data


def publish(out: Path, names: Sequence[str], dest: Path = RESULTS) -> list[Path]:
    """Copy the results found in OUT into validation/results/ (the latest per capability;
    git keeps the older ones)."""
    dest.mkdir(parents=True, exist_ok=True)
    done = []
    for name in names:
        js = out / f"{name}.json"
        if not js.is_file():
            continue
        load_result(js)
        for suffix in (".json", ".md"):
            shutil.copyfile(out / f"{name}{suffix}", dest / f"{name}{suffix}")
            done.append(dest / f"{name}{suffix}")
    return done
