"""The Python API of `gpuaudit doctor`: what only the job knows.

    import gpuaudit

    with gpuaudit.watch():                     # diagnosis printed to stderr at the end
        for x, y in gpuaudit.loader(train_loader):   # times the wait for each batch
            train_step(x, y)
            gpuaudit.step()                      # marks the end of a step

Under `gpuaudit doctor -- python train.py` the doctor watches from outside: `watch()` then
only turns the markers on, and `step()` hands them over (files in $GPUAUDIT_DOCTOR_DIR).
Without either, `step()` and `loader()` cost next to nothing and record nothing.

`watch(profile_steps=N)` (or `doctor --profile-steps N`) records N steps with torch.profiler
after a few warm-up steps, for kernel-level evidence. For PyTorch Lightning:
`Trainer(callbacks=[gpuaudit.lightning_callback()])`.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from gpuaudit.diagnose.channel import ENV_DIR, ENV_PROFILE, StepLog

PROFILE_SKIP = 3  # steps before the profiler starts recording (allocation, autotuning)


class _Profiler:
    """torch.profiler over `steps` steps after PROFILE_SKIP + 1 warm-up, driven by step()."""

    def __init__(self, steps: int, out: Path) -> None:
        import torch

        self.out = out
        self.done = False
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        sched = torch.profiler.schedule(skip_first=PROFILE_SKIP, wait=0, warmup=1,
                                        active=steps, repeat=1)
        self.prof = torch.profiler.profile(activities=activities, schedule=sched,
                                           on_trace_ready=self._ready)
        self.prof.start()

    def _ready(self, prof: Any) -> None:
        prof.export_chrome_trace(str(self.out))
        self.done = True

    def step(self) -> None:
        self.prof.step()
        if self.done:
            self.stop()

    def stop(self) -> None:
        prof, self.prof = self.prof, None
        if prof is not None:
            with contextlib.suppress(Exception):
                prof.stop()


class _State:
    """The process's markers: one per process, made on first use."""

    def __init__(self) -> None:
        directory = os.environ.get(ENV_DIR)
        self.doctor_dir = Path(directory) if directory and Path(directory).is_dir() else None
        self.log = StepLog(self.doctor_dir)
        self.on = self.doctor_dir is not None
        self.wait_s: float | None = None  # batch wait of the step in progress
        self.last_end: float | None = None
        self.profiler: _Profiler | None = None
        self.profile_steps = int(os.environ.get(ENV_PROFILE, "0") or 0) if self.on else 0
        self.profile_path: Path | None = None
        self.lock = threading.Lock()
        if self.on:
            atexit.register(self.close)

    def start_profiler(self, steps: int, path: Path) -> None:
        if self.profiler is None and steps > 0 and "torch" in sys.modules:
            try:
                self.profiler = _Profiler(steps, path)
                self.profile_path = path
            except Exception as exc:  # a profiler that cannot start must not stop the job
                sys.stderr.write(f"gpuaudit: profiler not started: {exc}\n")
                self.profile_steps = 0

    def step(self) -> None:
        now = time.monotonic()
        with self.lock:
            self.log.add(now, self.wait_s)
            self.wait_s = None
            self.last_end = now
        if self.profile_steps and self.profiler is None and self.doctor_dir is not None:
            self.start_profiler(self.profile_steps,
                                self.doctor_dir / f"trace-{os.getpid()}.json.gz")
            self.profile_steps = 0
        if self.profiler is not None:
            self.profiler.step()
            if self.profiler.done:
                self.profiler = None

    def waited(self, seconds: float) -> None:
        with self.lock:
            self.wait_s = (self.wait_s or 0.0) + seconds

    def close(self) -> None:
        if self.profiler is not None:
            self.profiler.stop()
            self.profiler = None
        self.log.flush()
        if self.doctor_dir is not None:
            retries = _alloc_retries()
            if retries is not None:
                with contextlib.suppress(OSError):
                    (self.doctor_dir / f"memory-{os.getpid()}.json").write_text(
                        json.dumps({"num_alloc_retries": retries}))


def _alloc_retries() -> int | None:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_initialized():
            return None
        return int(torch.cuda.memory_stats().get("num_alloc_retries", 0))
    except Exception:
        return None


_state: _State | None = None


def _get() -> _State:
    global _state
    if _state is None:
        _state = _State()
    return _state


def step() -> None:
    """Mark the end of a training step (call it once per optimizer step)."""
    s = _get()
    if s.on:
        s.step()


def loader(iterable: Iterable[Any]) -> Iterator[Any]:
    """Iterate over `iterable` (a DataLoader), timing how long each batch keeps the step
    waiting: the input pipeline's share of the step."""
    s = _get()
    it = iter(iterable)
    while True:
        t0 = time.monotonic()
        try:
            batch = next(it)
        except StopIteration:
            return
        if s.on:
            s.waited(time.monotonic() - t0)
        yield batch


class Watch:
    """`with gpuaudit.watch():` — see the module doc. After the block, `diagnosis` holds the
    result (None under `gpuaudit doctor`, which diagnoses from outside)."""

    def __init__(self, *, profile_steps: int = 0, interval_s: float = 0.5,
                 report: bool = True) -> None:
        self.profile_steps = profile_steps
        self.interval_s = interval_s
        self.report = report
        self.diagnosis: Any = None
        self._watcher: Any = None
        self._trace_dir: str | None = None

    def __enter__(self) -> Watch:
        s = _get()
        if s.doctor_dir is not None:  # the doctor outside does the watching
            s.profile_steps = max(s.profile_steps, self.profile_steps)
            return self
        from gpuaudit.diagnose.session import Watcher
        from gpuaudit.hw.torch_env import apply_safe_env

        apply_safe_env()
        s.on = True
        s.log = StepLog(None)
        self._watcher = Watcher(os.getpid(), interval_s=self.interval_s).start()
        if self.profile_steps:
            self._trace_dir = tempfile.mkdtemp(prefix="gpuaudit-profile-")
            s.start_profiler(self.profile_steps, Path(self._trace_dir) / "trace.json.gz")
        return self

    def __exit__(self, *exc: object) -> None:
        s = _get()
        if self._watcher is None:
            return
        data = self._watcher.stop()
        s.on = False
        if s.profiler is not None:
            s.profiler.stop()
            s.profiler = None
        self.diagnosis = _diagnose_here(data, s, self._trace_dir)
        if self.report:
            from gpuaudit.report.doctor_view import render_text

            sys.stderr.write(render_text(self.diagnosis))


def _diagnose_here(data: Any, s: _State, trace_dir: str | None) -> Any:
    import shutil

    from gpuaudit.diagnose.engine import build_signals, make_diagnosis
    from gpuaudit.diagnose.hoststats import step_stats
    from gpuaudit.diagnose.kineto import analyse, read_trace

    waits = [w for w in s.log.waits if w is not None]
    steps = step_stats(s.log.times, waits)
    trace = None
    sources: dict[str, str] = {}
    if trace_dir and s.profile_path and s.profile_path.exists():
        trace = analyse(read_trace(s.profile_path))
        sources["profiler"] = f"torch.profiler, {trace.steps} steps"
    if trace_dir:
        shutil.rmtree(trace_dir, ignore_errors=True)
    pids = {p.pid for t in data.proc_ticks for p in t.procs} | {os.getpid()}
    sig, how = build_signals(data.samples, job_pids=pids, proc_ticks=data.proc_ticks,
                             steps=steps, trace=trace, sm_clock_max_mhz=data.sm_clock_max_mhz,
                             alloc_retries=_alloc_retries())
    sources["gpu"] = (f"NVML, {len(data.samples)} samples; job GPUs: {how}" if data.samples
                      else f"none: {data.gpu_reason or 'no sample taken'}")
    if steps:
        sources["steps"] = f"gpuaudit.step() markers, {steps.steps} steps"
    return make_diagnosis(sig, started_at=data.started_at, duration_s=data.duration_s,
                          command=tuple(sys.argv), pid=os.getpid(), sources=sources)


def watch(*, profile_steps: int = 0, interval_s: float = 0.5, report: bool = True) -> Watch:
    """Watch this process (and its loader workers) for the `with` block and diagnose it."""
    return Watch(profile_steps=profile_steps, interval_s=interval_s, report=report)


def lightning_callback(*, profile_steps: int = 0, report: bool = True) -> Any:
    """A PyTorch Lightning callback doing `watch()` over `fit`, with step markers and batch
    wait times from the trainer's hooks. Needs `lightning` or `pytorch_lightning`."""
    try:
        from lightning.pytorch import Callback
    except ImportError:
        try:
            from pytorch_lightning import Callback
        except ImportError:
            from gpuaudit.errors import BadInputError

            raise BadInputError("gpuaudit.lightning_callback needs PyTorch Lightning "
                                "(pip install lightning)") from None

    class GpuauditCallback(Callback):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            self.watch = Watch(profile_steps=profile_steps, report=report)
            self._batch_done: float | None = None

        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            self.watch.__enter__()

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                                 batch_idx: int) -> None:
            if self._batch_done is not None:  # the loader's time between two batches
                _get().waited(time.monotonic() - self._batch_done)

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                               batch_idx: int) -> None:
            step()
            self._batch_done = time.monotonic()

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            self._batch_done = None  # validation and the next epoch's start are not waits

        def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
            self.watch.__exit__(None, None, None)

        @property
        def diagnosis(self) -> Any:
            return self.watch.diagnosis

    return GpuauditCallback()
