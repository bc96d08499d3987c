"""The doctor's records inside the job (loaded by `_gpuaudit_bootstrap`, beside it): a
process's `Job` and what it writes to $GPUAUDIT_DOCTOR_DIR (the steps, batch waits, syncs,
compile events, the profiler's trace; the file list is in the bootstrap's docstring).
Standard library only, and Python 3.8 syntax: the job's interpreter may not be ours.
"""

import contextlib
import json
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
        # Kineto detaches CUPTI when the profile stops only with TEARDOWN_CUPTI=1; attached,
        # it slows every later launch of the job (host-bound steps up to 1.8x on an H200).
        # A value the job set is kept (torch sets "0" itself for CUDA graphs).
        os.environ.setdefault("TEARDOWN_CUPTI", "1")
        # Input shapes give the first layer's batch (batch-too-small against launch-bound);
        # recorded in the profiled steps only, which are left out of the timed window.
        self.prof = torch.profiler.profile(activities=activities, schedule=sched,
                                           on_trace_ready=self._ready, record_shapes=True)
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
