"""The doctor's side inside the job: what only the job's own interpreter can see, found without
changing the job's code, results, output or exit status.

`gpuaudit doctor -- python train.py` puts this folder first on the job's PYTHONPATH; its
`sitecustomize` calls `install()` in every Python process of the job. When torch is imported
(never before: this module imports nothing but the standard library), it adds:

- the steps: PyTorch's global optimizer-step hook (plain loops, Lightning, Hugging Face
  `Trainer` and accelerate all end a step in `Optimizer.step`); where no optimizer steps
  (inference), the DataLoader's batches;
- the batch waits: the time in the DataLoader iterator's `__next__`, per step;
- the host syncs: `Tensor.item/tolist/cpu/__float__/__int__` on CUDA tensors and
  `torch.cuda.synchronize` (and Event/Stream `synchronize`), counted per step with the time
  blocked in them and the line of the job that called them;
- compilation: torch.compile's start and end callbacks, the reasons dynamo gives for each
  recompile, and its recompile-limit warnings;
- cuDNN autotuning: with `torch.backends.cudnn.benchmark` on, the steps in which a
  convolution met an input shape it had not seen (each such shape is benchmarked again);
- `--profile-steps N`: torch.profiler over N steady steps (after warm-up and compilation).

What it finds goes to files in $GPUAUDIT_DOCTOR_DIR, one set per process (the doctor's
`diagnose.channel` reads them):

    boot-PID.json       what was installed, the interpreter, problems met
    autosteps-PID.txt   "END_S WAIT_S SYNCS SYNC_S SOURCE NEW" a step ("opt" or "batch";
                        WAIT_S "-" when the process never iterated a DataLoader; NEW 1
                        when a convolution met a new shape under cudnn.benchmark)
    steps-PID.txt       "END_S WAIT_S" a step marked by gpuaudit.step() (the Python API)
    syncs-PID.json      the sync call sites: what, where, calls, seconds blocked
    events-PID.jsonl    compile starts/ends, recompile reasons, limit warnings
    trace-PID.json.gz   the profiler's trace; memory-PID.json the allocator's retries

Times are time.monotonic() (one clock for every process of the host). Lines are written in
blocks about once a second, so a step costs the job microseconds. Every hook is wrapped: a
failure inside this module is written to boot-PID.json and the job goes on as if it were not
here. Standard library only, and Python 3.8 syntax: the job's interpreter may not be ours.
"""

import atexit
import contextlib
import json
import logging
import os
import sys
import threading
import time

ENV_DIR = "GPUAUDIT_DOCTOR_DIR"
ENV_PROFILE = "GPUAUDIT_PROFILE_STEPS"
PROFILE_REQUEST = "profile-request"  # the doctor asks for a profile now: "N" steps
FLUSH_S = 1.0
PROFILE_SKIP = 3  # steps before the profiler may start (allocation, autotuning)
PROFILE_LATEST = 20  # start by this step even if it still compiles (recompiling jobs)
SYNCED = ("item", "tolist", "cpu", "__float__", "__int__")  # Tensor methods that sync on CUDA
_HERE = os.path.dirname(os.path.abspath(__file__))

JOB = None  # this process's Job under the doctor (install() makes it)


def _write(path, text, mode="w"):
    """Write or append; False when the doctor's folder is gone (the job carries on)."""
    try:
        with open(path, mode) as f:
            f.write(text)
        return True
    except OSError:
        return False


class StepLog:
    """Step lines of one kind, appended to their file in blocks; kept in memory too where
    asked (the in-process diagnosis of `gpuaudit.watch()` reads them there)."""

    def __init__(self, path=None, keep=False):
        self.path = path
        self.keep = keep
        self.times = []
        self.waits = []
        self.count = 0
        self._pending = []
        self._flushed_at = 0.0

    def add(self, end_s, wait_s, extra=""):
        self.count += 1
        if self.keep:
            self.times.append(end_s)
            self.waits.append(wait_s)
        if self.path is None:
            return
        wait = "-" if wait_s is None else f"{wait_s:.6f}"
        self._pending.append(f"{end_s:.6f} {wait}{extra}\n")
        if end_s - self._flushed_at >= FLUSH_S:
            self.flush()
            self._flushed_at = end_s

    def flush(self):
        if self.path is not None and self._pending and \
                not _write(self.path, "".join(self._pending), "a"):
            self.path = None
        self._pending = []


class Profiler:
    """torch.profiler over `steps` steps after one warm-up step, driven by step()."""

    def __init__(self, steps, out, on_done=None):
        import torch

        self.out = out
        self.done = False
        self.on_done = on_done
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        sched = torch.profiler.schedule(wait=0, warmup=1, active=steps, repeat=1)
        self.prof = torch.profiler.profile(activities=activities, schedule=sched,
                                           on_trace_ready=self._ready)
        self.prof.start()

    def _ready(self, prof):
        prof.export_chrome_trace(str(self.out))
        self.done = True
        if self.on_done is not None:
            self.on_done()

    def step(self):
        if self.prof is not None:
            self.prof.step()
        if self.done:
            self.stop()

    def stop(self):
        prof, self.prof = self.prof, None
        if prof is not None:
            with contextlib.suppress(Exception):
                prof.stop()


class _Tally:
    """What happened since the last step of one kind: batch waits, syncs, new shapes."""

    __slots__ = ("new_shape", "sync_s", "syncs", "wait_s")

    def __init__(self):
        self.wait_s = 0.0
        self.syncs = 0
        self.sync_s = 0.0
        self.new_shape = False

    def take(self):
        out = (self.wait_s, self.syncs, self.sync_s, self.new_shape)
        self.wait_s, self.syncs, self.sync_s, self.new_shape = 0.0, 0, 0.0, False
        return out


class Job:
    """One process's evidence. `directory` None: kept in memory only (`gpuaudit.watch()`)."""

    def __init__(self, directory=None, profile_steps=0, keep=False):
        self.dir = directory
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.info = {"pid": self.pid, "ppid": os.getppid(), "argv": list(sys.argv),
                     "executable": sys.executable, "python": sys.version.split()[0],
                     "started_s": time.monotonic(), "torch": None, "hooks": [],
                     "problems": [], "markers": False}
        self.markers = StepLog(self._path("steps"), keep=keep)
        self.auto = StepLog(self._path("autosteps"), keep=keep)
        self.batches = StepLog(self._path("autosteps"), keep=False)
        self.opt_tally, self.batch_tally = _Tally(), _Tally()
        self.marker_wait = None  # batch wait of the marked step in progress (loader())
        self.loader_seen = False
        self.first_optimizer = None
        self.batch_started = None  # when the DataLoader's previous __next__ began
        self.sync_sites = {}  # (what, where) -> [calls, seconds]
        self.compiling = 0  # compiles in progress
        self.last_compile_end = None
        self.profile_steps = profile_steps
        self.profiler = None
        self.profile_path = None
        self._asked_at = 0.0  # when the doctor's profile request was last looked for

    def _path(self, kind, ext="txt"):
        if self.dir is None:
            return None
        return os.path.join(self.dir, f"{kind}-{self.pid}.{ext}")

    # -- what the doctor is told about this process

    def problem(self, what, exc=None):
        text = what if exc is None else f"{what}: {type(exc).__name__}: {exc}"
        self.info["problems"].append(text[:300])
        self.write_info()

    def write_info(self):
        path = self._path("boot", "json")
        if path is not None:
            _write(path, json.dumps(self.info))

    def event(self, record):
        path = self._path("events", "jsonl")
        if path is not None:
            record["pid"] = self.pid
            _write(path, json.dumps(record) + "\n", "a")

    # -- steps

    def optimizer_stepped(self, optimizer):
        if self.first_optimizer is None:
            self.first_optimizer = id(optimizer)
        elif id(optimizer) != self.first_optimizer:
            return  # a second optimizer (a GAN's) in the same step
        now = time.monotonic()
        with self.lock:
            wait, syncs, sync_s, new = self.opt_tally.take()
            self.auto.add(now, wait if self.loader_seen else None,
                          f" {syncs} {sync_s:.6f} opt {int(new)}")
        self._profile_step(now)

    def batch_begins(self, now):
        """A DataLoader's __next__ starts: the previous batch's step ends (inference jobs)."""
        if self.batch_started is not None and self.auto.count == 0:
            with self.lock:
                wait, syncs, sync_s, new = self.batch_tally.take()
                self.batches.add(now, wait, f" {syncs} {sync_s:.6f} batch {int(new)}")
            self._profile_step(now)
        self.batch_started = now

    def waited(self, seconds, marked=False):
        """Time spent waiting for a batch: in the DataLoader (found), or in the Python API's
        `loader()` (marked: it belongs to the marked steps)."""
        with self.lock:
            if marked:
                self.marker_wait = (self.marker_wait or 0.0) + seconds
                return
            self.loader_seen = True
            self.opt_tally.wait_s += seconds
            self.batch_tally.wait_s += seconds

    def marker_step(self):
        """gpuaudit.step(): the job marks its own steps; they win over the found ones."""
        now = time.monotonic()
        with self.lock:
            if not self.info["markers"]:
                self.info["markers"] = True
                self.write_info()
            self.markers.add(now, self.marker_wait)
            self.marker_wait = None
        if self.auto.count == 0:
            self._profile_step(now)

    def new_shape(self):
        self.opt_tally.new_shape = self.batch_tally.new_shape = True

    def synced(self, what, started, where):
        seconds = time.perf_counter() - started
        with self.lock:
            for tally in (self.opt_tally, self.batch_tally):
                tally.syncs += 1
                tally.sync_s += seconds
            site = self.sync_sites.setdefault((what, where), [0, 0.0])
            site[0] += 1
            site[1] += seconds

    # -- the profiler

    def start_profiler(self, steps, path):
        if self.profiler is not None or steps <= 0 or "torch" not in sys.modules:
            return
        self.event({"kind": "profile_start", "t": time.monotonic()})
        self.profile_path = path
        try:
            self.profiler = Profiler(steps, path, on_done=lambda: self.event(
                {"kind": "profile_end", "t": time.monotonic()}))
        except Exception as exc:  # a profiler that cannot start must not stop the job
            self.problem("profiler not started", exc)
        self.profile_steps = 0

    def _profile_step(self, now):
        if self.profiler is not None:
            try:
                self.profiler.step()
            except Exception as exc:
                self.problem("profiler stopped", exc)
                self.profiler.done = True
            if self.profiler.done:
                self.profiler = None
            return
        if self.dir is None or self.profile_path is not None:
            return  # one profile a process
        if not self.profile_steps and now - self._asked_at >= FLUSH_S:
            self._asked_at = now
            self.profile_steps = _requested(os.path.join(self.dir, PROFILE_REQUEST))
        if not self.profile_steps:
            return
        steps = max(self.auto.count, self.batches.count, self.markers.count)
        recent = self.last_compile_end is not None and now - self.last_compile_end < 2.0
        if steps >= PROFILE_LATEST or (steps >= PROFILE_SKIP and not self.compiling
                                       and not recent):
            self.start_profiler(self.profile_steps, self._path("trace", "json.gz"))

    # -- compilation (dynamo's callbacks)

    def compile_started(self, trigger, compile_id):
        self.compiling += 1
        self.event({"kind": "compile_start", "t": time.monotonic(), "trigger": trigger,
                    "id": compile_id})

    def compile_ended(self, trigger, compile_id):
        self.compiling = max(0, self.compiling - 1)
        self.last_compile_end = time.monotonic()
        self.event({"kind": "compile_end", "t": self.last_compile_end, "trigger": trigger,
                    "id": compile_id})

    def recompiled(self, code, reasons):
        where = "?" if code is None else \
            f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"
        self.event({"kind": "recompile", "t": time.monotonic(), "code": where,
                    "reasons": [str(r)[:300] for r in list(reasons)[:3]]})

    # -- the end

    def flush(self):
        for log in (self.markers, self.auto, self.batches):
            log.flush()
        path = self._path("syncs", "json")
        if path is not None and self.sync_sites:
            sites = [{"what": w, "where": where, "calls": c, "seconds": round(s, 6)}
                     for (w, where), (c, s) in sorted(self.sync_sites.items(),
                                                      key=lambda kv: -kv[1][1])[:20]]
            _write(path, json.dumps({"sites": sites}))

    def close(self):
        if self.profiler is not None:
            self.profiler.stop()
            self.profiler = None
        self.flush()
        retries = alloc_retries()
        path = self._path("memory", "json")
        if path is not None and retries is not None:
            _write(path, json.dumps({"num_alloc_retries": retries}))
        self.write_info()


def _requested(path):
    """The steps the doctor asks to profile (0: none asked)."""
    try:
        with open(path) as f:
            return max(0, int(f.read().strip() or 0))
    except (OSError, ValueError):
        return 0


def alloc_retries():
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_initialized():
            return None
        return int(torch.cuda.memory_stats().get("num_alloc_retries", 0))
    except Exception:
        return None


# ---------------------------------------------------------------- hooks into torch


def _torch_dir():
    """The folder of the imported torch package (not "/torch/" in a path: a virtualenv may
    live under a folder named torch, and so may the job)."""
    torch = sys.modules.get("torch")
    file = getattr(torch, "__file__", None)
    return os.path.dirname(file) + os.sep if file else None


def _caller(depth=2):
    """file:line of the nearest frame outside torch and this module (who asked for the sync)."""
    try:
        torch_dir = _torch_dir()
        f = sys._getframe(depth)
        while f is not None:
            name = f.f_code.co_filename
            in_torch = name.startswith(torch_dir) if torch_dir else "/torch/" in name
            if not in_torch and not name.startswith(_HERE):
                return f"{name}:{f.f_lineno}"
            f = f.f_back
    except Exception:
        pass
    return "?"


def _not_compiling():
    """False while torch.compile traces (our wrappers then step aside: no graph breaks)."""
    torch = sys.modules.get("torch")
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return compiling is None or not compiling()


def _on_cuda(args):
    return bool(args) and getattr(args[0], "is_cuda", False)


def _synced(orig, what, when=None):
    """`orig` (a Tensor method or a torch.cuda function) timed and counted as a host sync,
    where `when(args)` says it is one (a CPU tensor's .item() is not)."""
    def wrapper(*args, **kwargs):
        job = JOB
        if job is None or not _not_compiling() or (when is not None and not when(args)):
            return orig(*args, **kwargs)
        started = time.perf_counter()
        try:
            return orig(*args, **kwargs)
        finally:
            with contextlib.suppress(Exception):
                job.synced(what, started, _caller())

    wrapper.__name__ = getattr(orig, "__name__", what)
    wrapper.__qualname__ = getattr(orig, "__qualname__", what)
    wrapper.__doc__ = getattr(orig, "__doc__", None)
    wrapper.__wrapped__ = orig
    return wrapper


def _safely(method, *args):
    """Call JOB's method: never an error into the job's own call (optimizer.step, next)."""
    job = JOB
    if job is None:
        return
    try:
        getattr(job, method)(*args)
    except Exception as exc:
        if not job.info.get("failed_" + method):
            job.info["failed_" + method] = True
            job.problem(f"recording {method} failed", exc)


def _hook_optimizer(torch):
    import torch.optim.optimizer as optim

    optim.register_optimizer_step_post_hook(
        lambda optimizer, args, kwargs: _safely("optimizer_stepped", optimizer))


def _hook_dataloader(torch):
    from torch.utils.data import dataloader

    cls = dataloader._BaseDataLoaderIter
    orig = cls.__next__

    def __next__(self):
        started = time.monotonic()
        _safely("batch_begins", started)
        try:
            return orig(self)
        finally:
            _safely("waited", time.monotonic() - started)

    __next__.__wrapped__ = orig
    cls.__next__ = __next__


def _hook_syncs(torch):
    for name in SYNCED:
        setattr(torch.Tensor, name, _synced(getattr(torch.Tensor, name), name, _on_cuda))
    torch.cuda.synchronize = _synced(torch.cuda.synchronize, "cuda.synchronize")
    for owner in (torch.cuda.Event, torch.cuda.Stream):
        owner.synchronize = _synced(owner.synchronize, owner.__name__ + ".synchronize")


CONVS = ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
         "conv_transpose3d")


def _hook_conv_shapes(torch):
    """Under cudnn.benchmark every new input shape of a convolution is benchmarked again:
    note the steps that met one."""
    import torch.nn.functional as F

    cudnn = torch.backends.cudnn
    seen = set()

    def watch(orig, name):
        def wrapper(input, weight, *args, **kwargs):
            if cudnn.benchmark and JOB is not None and _not_compiling():
                try:
                    if input.is_cuda:
                        key = (name, tuple(input.shape), tuple(weight.shape), input.dtype,
                               tuple(None if hasattr(a, "shape") else a for a in args),
                               tuple(sorted(kwargs.items())))
                        if key not in seen:
                            seen.add(key)
                            JOB.new_shape()
                except Exception:
                    pass
            return orig(input, weight, *args, **kwargs)

        wrapper.__name__ = getattr(orig, "__name__", name)
        wrapper.__doc__ = getattr(orig, "__doc__", None)
        wrapper.__wrapped__ = orig
        return wrapper

    for name in CONVS:
        if hasattr(F, name):
            setattr(F, name, watch(getattr(F, name), name))


def _compile_args(args):
    a = args[0] if args else None
    trigger = getattr(getattr(a, "callback_trigger", None), "name", None)
    compile_id = getattr(a, "compile_id", None)
    return trigger, None if compile_id is None else str(compile_id)


def _hook_dynamo(dynamo):
    from torch._dynamo import callback, convert_frame

    callback.on_compile_start(lambda *a: _safely("compile_started", *_compile_args(a)))
    callback.on_compile_end(lambda *a: _safely("compile_ended", *_compile_args(a)))
    orig = convert_frame.get_and_maybe_log_recompilation_reasons

    def reasons_of(*args, **kwargs):
        reasons = orig(*args, **kwargs)
        if reasons:
            frame = args[1] if len(args) > 1 else kwargs.get("frame")
            _safely("recompiled", getattr(frame, "f_code", None), reasons)
        return reasons

    reasons_of.__wrapped__ = orig
    convert_frame.get_and_maybe_log_recompilation_reasons = reasons_of

    class LimitHit(logging.Handler):  # dynamo's warning is printed as before; we note it
        def emit(self, record):
            try:
                msg = record.getMessage()
            except Exception:
                return
            if "recompile_limit" in msg or "cache_size_limit" in msg:
                _safely("event", {"kind": "limit", "t": time.monotonic(),
                                  "message": msg.splitlines()[0][:300]})

    logging.getLogger("torch._dynamo").addHandler(LimitHit(logging.WARNING))


TORCH_HOOKS = (("optimizer", _hook_optimizer), ("dataloader", _hook_dataloader),
               ("syncs", _hook_syncs), ("conv-shapes", _hook_conv_shapes))


def _torch_imported(job, torch):
    job.info["torch"] = getattr(torch, "__version__", "?")
    for name, hook in TORCH_HOOKS:
        try:
            hook(torch)
            job.info["hooks"].append(name)
        except Exception as exc:
            job.problem(f"the {name} hook was not installed", exc)
    job.write_info()


def _dynamo_imported(job, dynamo):
    try:
        _hook_dynamo(dynamo)
        job.info["hooks"].append("dynamo")
    except Exception as exc:
        job.problem("the compile hooks were not installed", exc)
    job.write_info()


class _AfterImport:
    """A meta-path finder that runs a function once a module named in `then` has been
    imported (found by the other finders, loaded by its own loader, then handed to us)."""

    def __init__(self, then):
        self.then = dict(then)
        self.busy = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.then or fullname in self.busy:
            return None
        self.busy.add(fullname)
        try:
            import importlib.util

            spec = importlib.util.find_spec(fullname)
        except Exception:
            spec = None
        finally:
            self.busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, after = spec.loader, self.then.pop(fullname)
        run = loader.exec_module

        def exec_module(module):
            try:
                run(module)
            finally:
                with contextlib.suppress(AttributeError):
                    del loader.exec_module  # this loader's own method again
            after(module)

        loader.exec_module = exec_module
        if not self.then:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self)
        return spec


def _forked():
    """In a forked child (a loader worker): a new process with nothing of the parent's to
    write; the hooks find the new Job through JOB."""
    global JOB
    if JOB is not None:
        JOB = Job(JOB.dir)


def install():
    """Start watching this process from inside, when the doctor asked for it."""
    global JOB
    directory = os.environ.get(ENV_DIR)
    if JOB is not None or not directory or not os.path.isdir(directory):
        return
    try:
        profile = int(os.environ.get(ENV_PROFILE) or 0)
    except ValueError:
        profile = 0
    job = JOB = Job(directory, profile_steps=profile)
    try:
        then = {"torch": lambda m: _torch_imported(JOB, m),
                "torch._dynamo": lambda m: _dynamo_imported(JOB, m)}
        for name in list(then):
            if name in sys.modules:  # imported before us (a .pth file, an embedding host)
                then.pop(name)(sys.modules[name])
        if then:
            sys.meta_path.insert(0, _AfterImport(then))
        atexit.register(_close)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_forked)
        job.write_info()
    except Exception as exc:
        job.problem("bootstrap not installed", exc)


def _close():
    job = JOB
    if job is not None and job.pid == os.getpid():
        with contextlib.suppress(Exception):
            job.close()
