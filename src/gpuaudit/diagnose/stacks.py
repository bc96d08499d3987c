"""Where a trainer's main thread spends its time, from sampled Python stacks (`hw.pystacks`).

Each sample of the main thread (thread id = process id) is put in one class, by its frames:

- `compile`: torch.compile at work (dynamo tracing, Inductor, Triton's compiler);
- `loader`: inside the DataLoader's iterator (waiting for workers, or loading itself when
  `num_workers=0`);
- `sync`: blocked in a host sync (the bootstrap's wrappers of `.item()`, `.cpu()`,
  `torch.cuda.synchronize`, ...);
- `torch`: in PyTorch's own Python (modules' forward, autograd, the optimizer): issuing GPU
  work;
- `library`: in another installed package (numpy, PIL, pandas...) or the standard library;
- `own`: in the job's own code.

The job's own functions are named with their share of the thread's time (inclusive: a function
counts for every sample it is on the stack of) and the library the time was spent in.
"""

from __future__ import annotations

import collections
import linecache
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuaudit.hw.pystacks import Frame, StackChunk

CLASSES = ("compile", "loader", "sync", "torch", "library", "own")
# torch.profiler's own work (a short profile the doctor asked for, its trace being written):
# the doctor's, not the job's; its samples are left out.
_PROFILER = ("/torch/profiler/", "/torch/autograd/profiler")
_COMPILE = ("/torch/_dynamo/convert_frame.py", "/torch/_dynamo/symbolic_convert.py",
            "/torch/_dynamo/output_graph.py", "/torch/_inductor/compile_fx.py",
            "/torch/_inductor/codecache.py", "/torch/_inductor/select_algorithm.py",
            "/torch/_inductor/graph.py", "/torch/_functorch/aot_autograd.py",
            "/torch/_inductor/async_compile.py", "/triton/compiler/")
_SYNC_FILES = ("/_gpuaudit_bootstrap.py",)
_SITE = re.compile(r"/(?:site|dist)-packages/([^/]+)")
_STDLIB = re.compile(r"/lib/python3\.\d+/([^/]+)")
TOP = 5
_TORCH_PACKAGES = {"torch", "torchvision", "torchaudio", "functorch", "triton"}
_TRAINERS = {"lightning", "pytorch_lightning", "transformers", "accelerate"}


@dataclass(frozen=True)
class FunctionShare:
    function: str
    where: str  # file:line of the function's busiest line
    share: float  # of the thread's samples
    library: str | None = None  # where the time below it went, when not in its own code
    line: str | None = None  # the source line, where the file can be read


@dataclass(frozen=True)
class HostStacks:
    """The main thread of one trainer process over the diagnosis window."""

    pid: int
    samples: int
    seconds: float  # the samples' time (samples ÷ rate)
    shares: dict[str, float]  # class → share of the samples (CLASSES)
    functions: tuple[FunctionShare, ...] = ()  # the job's own functions, busiest first
    libraries: dict[str, float] | None = None  # library → share, for `library` samples
    processes: int = 1  # Python processes sampled

    def share(self, cls: str) -> float:
        return self.shares.get(cls, 0.0)


def _package(file: str) -> str | None:
    """The installed package or standard-library module a file belongs to, else None."""
    if (m := _SITE.search(file)) is not None:
        name = m[1]
        return name[:-3] if name.endswith(".py") else name
    if (m := _STDLIB.search(file)) is not None:
        name = m[1]
        return "python: " + (name[:-3] if name.endswith(".py") else name)
    return None


def _is_torch(file: str) -> bool:
    """PyTorch's own Python. By the installed package where the file is in site-packages (a
    virtualenv may itself live under a folder named torch: /srv/torch/.venv/...), else by
    the path (a source checkout, Inductor's generated code)."""
    if file.startswith("/tmp/torchinductor"):
        return True
    package = _package(file)
    if package is not None:
        return package in _TORCH_PACKAGES
    return "/torch/" in file or "/torchvision/" in file


def _is_trainer(file: str) -> bool:
    """The training frameworks that drive PyTorch (their loops issue the GPU work)."""
    return _package(file) in _TRAINERS


def classify(frames: Sequence[Frame]) -> str:
    files = [f.file for f in frames]
    if not frames:
        return "none"  # no Python on the thread: the interpreter starting or shutting down
    if any(p in f for f in files for p in _PROFILER):
        return "profiler"
    # (a module being imported is not compiling: torch's import runs through these files)
    if any(c in f.file for f in frames if f.function != "<module>" for c in _COMPILE):
        return "compile"
    if any("/torch/utils/data/" in f for f in files):
        return "loader"
    leaf = files[-1]
    if any(leaf.endswith(s) for s in _SYNC_FILES) or \
            (leaf.endswith("/torch/cuda/__init__.py") and frames[-1].function == "synchronize"):
        return "sync"
    if _is_torch(leaf) or _is_trainer(leaf):
        return "torch"
    if _package(leaf) is not None:
        return "library"
    return "own"


def _own(frame: Frame) -> bool:
    return (not _is_torch(frame.file) and _package(frame.file) is None
            and not frame.file.endswith(_SYNC_FILES) and not frame.file.startswith("<"))


def source_lines(chunks: Iterable[StackChunk]) -> dict[str, str]:
    """"file:line" → the source line, for the job's own frames: read while the job's files
    are at hand (a saved evidence file may be diagnosed elsewhere)."""
    out = {}
    for c in chunks:
        for f in c.frames:
            key = f"{f.file}:{f.line}"
            if f.line is not None and key not in out and _own(f):
                text = linecache.getline(f.file, f.line).strip()
                if text:
                    out[key] = text[:120]
    return out


def main_thread(chunks: Iterable[StackChunk], pid: int | None = None,
                sources: dict[str, str] | None = None) -> HostStacks | None:
    """The stacks of the main thread of `pid` (None: the process with the most samples);
    `sources`: the source lines of the job's frames (`source_lines`)."""
    sources = sources or {}
    chunks = list(chunks)
    by_pid: dict[int, list] = collections.defaultdict(list)
    rate = max((c.rate_hz for c in chunks), default=100) or 100
    for c in chunks:
        for s in c.stacks:
            if s.tid == s.pid:
                by_pid[s.pid].append((c.resolve(s), s.count))
    if not by_pid:
        return None
    if pid is None or pid not in by_pid:
        pid = max(by_pid, key=lambda p: sum(n for _f, n in by_pid[p]))
    stacks = by_pid[pid]
    shares: collections.Counter[str] = collections.Counter()
    libraries: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[tuple[str, str]] = collections.Counter()
    lines: dict[tuple[str, str], collections.Counter[Frame]] = collections.defaultdict(
        collections.Counter)
    below: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(
        collections.Counter)
    stacks = [(frames, count, classify(frames)) for frames, count in stacks]
    stacks = [s for s in stacks if s[2] not in ("profiler", "none")]
    total = sum(n for _f, n, _c in stacks)
    if not total:
        return None
    for frames, count, cls in stacks:
        shares[cls] += count
        leaf_lib = _package(frames[-1].file) if frames else None
        if cls == "library" and leaf_lib:
            libraries[leaf_lib] += count
        seen: set[tuple[str, str]] = set()
        for f in frames:
            key = (f.function, f.file)
            if not _own(f) or key in seen:
                continue
            seen.add(key)
            inclusive[key] += count
            lines[key][f] += count
            below[key][_spent_in(cls, leaf_lib)] += count
    functions = []
    for key, count in inclusive.most_common():
        if key[0] == "<module>" and len(inclusive) > 1:
            continue  # the script itself is on every stack: it says nothing
        frame = lines[key].most_common(1)[0][0]
        lib = below[key].most_common(1)[0][0]
        functions.append(FunctionShare(
            function=key[0], where=f"{short_path(frame.file)}:{frame.line or '?'}",
            share=round(count / total, 3), library=lib if lib != "own" else None,
            line=sources.get(f"{frame.file}:{frame.line}")))
        if len(functions) == TOP:
            break
    return HostStacks(pid=pid, samples=total, seconds=round(total / rate, 3),
                      shares={c: round(shares[c] / total, 3) for c in CLASSES},
                      functions=tuple(functions),
                      libraries={k: round(v / total, 3) for k, v in libraries.most_common(5)},
                      processes=len(by_pid))


def _spent_in(cls: str, leaf_lib: str | None) -> str:
    """What a sample under one of the job's functions was doing: its class, or the library."""
    if cls == "library" and leaf_lib:
        return leaf_lib
    return {"torch": "PyTorch ops", "sync": "waiting for the GPU (sync)",
            "loader": "the DataLoader", "compile": "torch.compile"}.get(cls, "own")


def short_path(file: str) -> str:
    """The file's folder and name: enough to find it, short enough to read."""
    parts = file.rsplit("/", 2)
    return "/".join(parts[-2:]) if len(parts) > 2 else file
