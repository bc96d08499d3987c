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
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from gpuaudit.diagnose.channel import ENV_DIR

_BOOTSTRAP = Path(__file__).parent / "diagnose" / "bootstrap" / "_gpuaudit_bootstrap.py"


def _bootstrap() -> Any:
    """The doctor's job-side module: the one `gpuaudit doctor` loaded into this process, else
    loaded now from the package (the same file)."""
    mod = sys.modules.get("_gpuaudit_bootstrap")
    if mod is None:
        spec = importlib.util.spec_from_file_location("_gpuaudit_bootstrap", _BOOTSTRAP)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules["_gpuaudit_bootstrap"] = mod
        spec.loader.exec_module(mod)
    return mod


class _State:
    """This process's markers. Under the doctor they go to the bootstrap's Job (the doctor's
    own, or one made here when the bootstrap was not injected); otherwise to `watch()`'s."""

    def __init__(self) -> None:
        self.job: Any = None
        boot = _bootstrap()
        directory = os.environ.get(ENV_DIR)
        if boot.JOB is not None:
            self.job = boot.JOB
        elif directory and Path(directory).is_dir():  # doctor --no-inject, python -I...
            self.job = boot.JOB = boot.Job(directory, profile_steps=_env_profile(boot))
            atexit.register(self.job.close)
        self.doctor = self.job is not None

    @property
    def on(self) -> bool:
        return self.job is not None


def _env_profile(boot: Any) -> int:
    try:
        return int(os.environ.get(boot.ENV_PROFILE) or 0)
    except ValueError:
        return 0


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
        s.job.marker_step()


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
            s.job.waited(time.monotonic() - t0, marked=True)
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
        if s.doctor:  # the doctor outside does the watching
            s.job.profile_steps = max(s.job.profile_steps, self.profile_steps)
            return self
        from gpuaudit.diagnose.session import Watcher
        from gpuaudit.hw.torch_env import apply_safe_env

        apply_safe_env()
        s.job = _bootstrap().Job(None, keep=True)
        self._watcher = Watcher(os.getpid(), interval_s=self.interval_s).start()
        if self.profile_steps:
            self._trace_dir = tempfile.mkdtemp(prefix="gpuaudit-profile-")
            s.job.start_profiler(self.profile_steps, Path(self._trace_dir) / "trace.json.gz")
        return self

    def __exit__(self, *exc: object) -> None:
        s = _get()
        if self._watcher is None:
            return
        data = self._watcher.stop()
        job, s.job = s.job, None
        if job.profiler is not None:
            job.profiler.stop()
            job.profiler = None
        self.diagnosis = _diagnose_here(data, job, self._trace_dir)
        if self.report:
            from gpuaudit.report.doctor_view import render_text

            sys.stderr.write(render_text(self.diagnosis))


def _diagnose_here(data: Any, job: Any, trace_dir: str | None) -> Any:
    from gpuaudit.diagnose.engine import build_signals, make_diagnosis
    from gpuaudit.diagnose.hoststats import step_stats
    from gpuaudit.diagnose.kineto import analyse, read_trace

    steps = step_stats(job.markers.times, job.markers.waits)
    trace = None
    sources: dict[str, str] = {}
    path = job.profile_path
    if trace_dir and path is not None and Path(path).exists():
        trace = analyse(read_trace(Path(path)))
        sources["profiler"] = f"torch.profiler, {trace.steps} steps"
    if trace_dir:
        shutil.rmtree(trace_dir, ignore_errors=True)
    pids = {p.pid for t in data.proc_ticks for p in t.procs} | {os.getpid()}
    sig, how = build_signals(data.samples, job_pids=pids, proc_ticks=data.proc_ticks,
                             steps=steps, trace=trace, sm_clock_max_mhz=data.sm_clock_max_mhz,
                             alloc_retries=_bootstrap().alloc_retries())
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

    class GpuauditCallback(Callback):
        def __init__(self) -> None:
            self.watch = Watch(profile_steps=profile_steps, report=report)
            self._batch_done: float | None = None

        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            self.watch.__enter__()

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                                 batch_idx: int) -> None:
            if self._batch_done is not None:  # the loader's time between two batches
                s = _get()
                if s.on:
                    s.job.waited(time.monotonic() - self._batch_done, marked=True)

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
