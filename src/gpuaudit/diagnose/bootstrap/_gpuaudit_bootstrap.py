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
import importlib.util
import logging
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))


def _sibling(name):
    """The module `name` from this folder, loaded by its path: under the doctor this folder is
    on the job's path, but `gpuaudit.watch()` loads this file alone."""
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, os.path.join(_HERE, name + ".py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


_job = _sibling("_gpuaudit_job")
ENV_DIR, ENV_PROFILE, SYNCED = _job.ENV_DIR, _job.ENV_PROFILE, _job.SYNCED
Job, alloc_retries = _job.Job, _job.alloc_retries

JOB = None  # this process's Job under the doctor (install() makes it)


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
