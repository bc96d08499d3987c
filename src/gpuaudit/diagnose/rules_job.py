"""The job as a whole: its GPU memory, a GPU shared with other processes, a GPU left idle,
and the account of idle time that no other rule explains (a job whose GPU is mostly idle never
gets a silent "healthy")."""

from __future__ import annotations

from collections.abc import Sequence

from gpuaudit.model import Severity

from .evidence import Signals, gpu_obs, gpu_source, obs, process_source, stacks_source, steps_source
from .findings import Proposal, Result, amdahl
from .findings import finding as _finding
from .findings import pct as _pct
from .rules_host import gpu_idle_share

GIB = 1 << 30
UNDERUSED = 0.5  # the GPU idle at least this share: some finding must account for it
# Findings that account for a GPU's idle time (their share is idle time they explain).
EXPLAINS_IDLE = ("input-bound", "host-bound", "launch-bound", "host-syncs", "copy-bound",
                 "batch-too-small", "comm-bound", "compilation", "gpu-idle", "shared-gpu",
                 "cudnn-autotune")


def memory_nearly_full(sig: Signals) -> list[Result]:
    """GPU memory ≥ 95 % used at some tick, or the caching allocator had to retry (free its
    cache and call cudaMalloc again)."""
    for g in sig.gpus:
        mem = g.memory_used_fraction
        retries = sig.alloc_retries or 0
        if (mem is None or mem < 0.95) and not retries:
            continue
        ev = []
        if mem is not None:
            ev.append(obs("memory_used_max", mem, "fraction", gpu_source(g)))
        if retries:
            ev.append(obs("alloc_retries", retries, "", "torch.cuda.memory_stats()"))
        msg = (f"GPU memory is {_pct(mem or 0)} used: one more batch shape away from out of "
               "memory" + (f"; the allocator retried {retries} times" if retries else ""))
        return [Result(
            _finding("memory-nearly-full", "GPU memory nearly full", 0.05 if retries else 0.0,
                     "high", msg, ev, g.index, Severity.WARN),
            (Proposal(action="less memory per step: activation checkpointing, or a smaller "
                             "micro-batch with gradient accumulation (`gpuaudit tune`)",
                      settings="torch.utils.checkpoint.checkpoint(block, x, "
                               "use_reentrant=False)",
                      gain_basis="keeps the job clear of out-of-memory; no speed-up"),
             Proposal(action="less fragmentation in PyTorch's allocator",
                      settings="export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                      gain_basis="fewer allocator retries"),))]
    return []


def shared_gpu(sig: Signals) -> list[Result]:
    """Another process holds memory on one of the job's GPUs (NVML's process list). Its cost,
    the share of the job's GPU time it takes:

    - where the others ran before the job reached the GPU, from what they asked of it on
      their own: busy a share *d* of the time (NVML utilization), a time-sliced GPU gives
      them an equal turn while they have work, so a job that could use the whole GPU keeps
      1/(1 + *d*) of it and loses *d*/(1 + *d*);
    - else from NVML's per-process samples: the others' mean share over the window (a
      weaker witness: NVML gives each sample period mostly to one process, and on an H200
      it read 27 % and 50 % where the jobs lost 21 % and 31 %);
    - not measured where neither exists (NVML may never catch a neighbour beside a job that
      keeps the GPU busy)."""
    for g in sig.gpus:
        others = [p for p in g.other_processes if (p[2] or 0) > 0 or p[2] is None]
        if not others:
            continue
        ev = [obs("other_process", f"pid {pid} {(cmd or '?')[:60]}", "",
                  f"NVML process list, GPU {g.index} ({(used or 0) / GIB:.1f} GiB)")
              for pid, cmd, used in others[:3]]
        held = f"{sum(u or 0 for *_x, u in others) / GIB:.1f} GiB of its memory"
        sampled = f"NVML per-process utilization, mean of the ticks, GPU {g.index}"
        if g.others_sm_pct is not None:
            ev += [obs("others_sm_utilization", g.others_sm_pct, "%", sampled, 1),
                   obs("job_sm_utilization", g.job_sm_pct, "%", sampled, 1)]
        taken, confidence = None, "medium"
        if g.others_alone_busy_pct:
            d = min(g.others_alone_busy_pct / 100, 1.0)
            taken = d / (1 + d)
            ev.insert(len(others[:3]), obs(
                "others_alone_busy", g.others_alone_busy_pct, "%",
                f"GPU {g.index} utilization before the job reached it, only the others on it",
                1))
            cost = (f"on their own they kept it {_pct(d)} busy; time-sliced with them, the job "
                    f"keeps about {_pct(1 - taken)} of the GPU (an estimate); and {held}")
            basis = (f"the other processes, busy {_pct(d)} of the time on their own, take "
                     f"about {_pct(taken)} of a time-sliced GPU")
        elif g.others_sm_pct is not None:
            taken, confidence = g.others_sm_pct / 100, "low"
            cost = (f"they take about {_pct(taken)} of its SM time (NVML's per-process "
                    f"samples, the job: {g.job_sm_pct or 0:.0f} %) and {held}")
            basis = f"the other processes use about {_pct(taken)} of the GPU's SM time"
        else:
            cost = f"they take SM time (not measured per process) and {held}"
            basis = "what the other processes take, not measured"
        msg = f"{len(others)} other process(es) use GPU {g.index}: {cost}"
        return [Result(
            _finding("shared-gpu", "Another process shares the GPU", taken or 0.0,
                     confidence, msg, ev, g.index, Severity.WARN),
            (Proposal(action="run on a GPU of its own (pick a free one with "
                             "CUDA_VISIBLE_DEVICES)",
                      settings="CUDA_VISIBLE_DEVICES=<free GPU> python train.py",
                      gain_high=amdahl(taken) if taken else None, gain_basis=basis),))]
    return []


def gpu_idle(sig: Signals) -> list[Result]:
    """No GPU work at all: NVML utilization ≤ 5 %, under 5 % of the ticks active."""
    for g in sig.gpus:
        if g.utilization_pct is None or g.utilization_pct > 5 or g.active_fraction >= 0.05:
            continue
        held = g.job_memory_bytes
        ev = [gpu_obs(g, "utilization_pct"),
              obs("active_ticks", g.active_fraction, "fraction", gpu_source(g))]
        if held:
            ev.append(obs("job_memory", held / GIB, "GiB", gpu_source(g), 2))
            msg = (f"the job holds {held / GIB:.1f} GiB on GPU {g.index} but runs no kernels: "
                   "it waits on input, I/O or another rank, or computes on the CPU")
        else:
            msg = f"GPU {g.index} did no work while the job ran"
        return [Result(
            _finding("gpu-idle", "GPU idle", 1 - g.utilization_pct / 100, "medium", msg, ev,
                     g.index),
            (Proposal(action="find what the host is doing: mark steps with gpuaudit.step() or "
                             "profile a few steps",
                      settings="gpuaudit doctor --profile-steps 5 -- python train.py",
                      gain_basis="the GPU's whole time is idle"),))]
    return []


def unexplained_idle(sig: Signals, found: Sequence[Result]) -> list[Result]:
    """The GPU idles ≥ 50 % of the time and no finding accounts for at least half of it: say
    so, with what the host was doing (the main thread's time by kind, batch waits, syncs),
    rather than nothing."""
    idle = gpu_idle_share(sig)
    if idle is None or idle[0] < UNDERUSED:
        return []
    explained = sum(r.finding.share for r in found if r.finding.code in EXPLAINS_IDLE)
    if explained >= idle[0] / 2:
        return []
    ev = [idle[1]]
    parts = []
    if sig.stacks is not None:
        h = sig.stacks
        ev += [obs(f"main_thread_{cls}", h.share(cls), "of its time", stacks_source(h))
               for cls in ("own", "library", "torch", "loader", "sync", "compile")
               if h.share(cls) >= 0.05]
        parts.append("the main thread's time: " + ", ".join(
            f"{cls} {_pct(h.share(cls))}" for cls in ("own", "library", "torch", "loader",
                                                       "sync", "compile")
            if h.share(cls) >= 0.05))
    if sig.process is not None:
        p = sig.process
        ev.append(obs("trainer_cpu", p.trainer_cpu_pct, "% of a core", process_source(p), 1))
        parts.append(f"trainer CPU {p.trainer_cpu_pct:.0f} % of a core, {p.workers} loader "
                     "worker(s)")
    if sig.steps is not None:
        st = sig.steps
        ev.append(obs("step_time", st.median_s, "s", steps_source(st), 4))
        if st.data_wait_share is not None:
            parts.append(f"batch wait {_pct(st.data_wait_share)} of the step")
    what = "; ".join(parts) or "nothing on the host side was measured"
    msg = (f"the GPU is idle {_pct(idle[0])} of the time and no rule names the cause ({what})")
    return [Result(
        _finding("gpu-underused", "GPU mostly idle, cause not named", idle[0], "low", msg, ev,
                 sig.gpus[0].index if sig.gpus else None, Severity.WARN),
        (Proposal(action="profile a few steps to see what the GPU waits for (kernel gaps, "
                         "syncs, copies)",
                  settings="gpuaudit doctor --profile-steps 5 -- python train.py",
                  gain_high=amdahl(idle[0]),
                  gain_basis=f"the GPU is idle {_pct(idle[0])} of the time"),))]


RULES = (memory_nearly_full, shared_gpu, gpu_idle)
