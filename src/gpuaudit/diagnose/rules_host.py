"""The host side of a job: where its trainer's time goes while the GPU waits.

Evidence: the trainer's main thread sampled by py-spy (`stacks`: its time in the job's own
code, in libraries, in PyTorch's op dispatch, in the loader, in syncs, compiling), its CPU
(psutil per thread), the host syncs the bootstrap counted per step with their call sites, and
torch.compile's events. Shares and gains follow rules.py's conventions (Amdahl).
"""

from __future__ import annotations

from gpuaudit.model import Observation, Severity

from .evidence import (
    Signals,
    compile_source,
    gpu_obs,
    obs,
    process_source,
    stacks_source,
    steps_source,
    trace_source,
)
from .findings import Proposal, Result, amdahl
from .findings import finding as _finding
from .findings import pct as _pct
from .rules import _launch_result
from .stacks import HostStacks, short_path

IDLE = 0.5  # the GPU idle at least this share of the time: the host may be the limit
HOST_SHARE = 0.3  # the main thread's share in the job's own code and libraries
TORCH_SHARE = 0.5  # the main thread's share issuing PyTorch ops (launch-bound)
# The trainer busy on the CPU at least this much of a core: PyTorch issues its work from one
# thread at a time (the main thread forward, autograd's thread backward), so the process's
# CPU, not the main thread's alone, says the issuing is saturated (an H200 job launching 724
# kernels a step read 98 % for the process).
BUSY_TRAINER_PCT = 85.0
SYNC_SOURCE = "the bootstrap's sync wrappers (per step)"


def gpu_idle_share(sig: Signals) -> tuple[float, Observation] | None:
    """The job's GPU's idle share: NVML's utilization over the window where sampled, else the
    profile's idle share of the GPU's span."""
    for g in sig.gpus:
        if g.idle_share is not None:
            return g.idle_share, gpu_obs(g, "utilization_pct")
    t = sig.trace
    if t and t.cuda and t.devices:
        d = t.devices[0]
        return d.share(d.idle_us), obs("gpu_idle", d.share(d.idle_us), "of GPU span",
                                       trace_source(t))
    return None


def main_thread_cpu(sig: Signals) -> float | None:
    p = sig.process
    if p is None:
        return None
    return p.main_thread_cpu_pct if p.main_thread_cpu_pct is not None else p.trainer_cpu_pct


def _functions(h: HostStacks, limit: int = 3) -> list[Observation]:
    out = []
    for f in h.functions[:limit]:
        text = f"{f.function} ({f.where}) {_pct(f.share)}"
        if f.library:
            text += f", in {f.library}"
        if f.line:
            text += f": {f.line}"
        out.append(obs("main_thread_in", text, "", stacks_source(h)))
    return out


def _thread_obs(sig: Signals) -> list[Observation]:
    cpu = main_thread_cpu(sig)
    if cpu is None or sig.process is None:
        return []
    name = "main_thread_cpu" if sig.process.main_thread_cpu_pct is not None else "trainer_cpu"
    return [obs(name, cpu, "% of a core", process_source(sig.process), 1)]


# ---------------------------------------------------------------- the host's own work


def host_bound(sig: Signals) -> list[Result]:
    """The GPU idles (≥ 50 %) while the trainer's main thread works in the job's own code or
    in libraries (≥ 30 % of its samples: numpy, PIL, pandas, the job's Python), not in
    PyTorch, the loader or syncs. Share: the smaller of the GPU's idle share and that host
    share. Without stacks: the main thread ≥ 85 % busy, no loader workers and no measured
    batch wait, at low confidence (it may be PyTorch's own dispatch)."""
    idle = gpu_idle_share(sig)
    if idle is None or idle[0] < IDLE:
        return []
    h = sig.stacks
    cpu = main_thread_cpu(sig)
    ev = [idle[1], *_thread_obs(sig)]
    if h is not None:
        host = h.share("own") + h.share("library")
        if host < HOST_SHARE:
            return []
        share, confidence = min(idle[0], host), "high"
        ev += [obs("main_thread_in_own_code_and_libraries", host, "of its time",
                   stacks_source(h)), *_functions(h)]
        top = h.functions[0] if h.functions else None
        where = f" ({_pct(top.share)} in {top.function}, {top.where})" if top else ""
        waiting = cpu is not None and cpu < 50
        msg = (f"the GPU waits {_pct(idle[0])} of the time while the trainer's main thread "
               f"spends {_pct(host)} of its time in the job's own work{where}"
               + ("; the thread is mostly off the CPU: it waits (I/O, sleep, a lock)"
                  if waiting else ""))
        library = top.library if top else None
    else:
        p = sig.process
        if cpu is None or cpu < 85 or p is None or p.workers > 0 or _data_wait(sig) >= 0.05:
            return []
        share, confidence, library, top = min(idle[0], cpu / 100) * 0.5, "low", None, None
        msg = (f"the GPU waits {_pct(idle[0])} of the time while the trainer's main thread is "
               f"{cpu:.0f} % busy on the CPU; what it does was not sampled (its Python stacks "
               "would say: is py-spy installed and allowed to read the process?)")
    return [Result(_finding("host-bound", "Host bound (the trainer's own work)", share,
                            confidence, msg, ev, sig.gpus[0].index if sig.gpus else None),
                   _host_changes(share, top.function if top else None, library))]


def _data_wait(sig: Signals) -> float:
    return (sig.steps.data_wait_share or 0.0) if sig.steps else 0.0


def _host_changes(share: float, function: str | None, library: str | None
                  ) -> tuple[Proposal, ...]:
    fn = function or "make_batch"
    out = [Proposal(
        action=f"run {fn} in DataLoader workers, so the host's work overlaps the GPU's",
        settings=("class Batches(torch.utils.data.IterableDataset):\n"
                  "    def __iter__(self):\n"
                  f"        while True: yield {fn}()\n"
                  "loader = DataLoader(Batches(), batch_size=None, num_workers=4, "
                  "pin_memory=True,\n                    persistent_workers=True)"),
        gain_low=amdahl(share / 2), gain_high=amdahl(share),
        gain_basis=f"the GPU waits {_pct(share)} of the time for the main thread's work")]
    if library in ("numpy", "PIL", "pillow", "pandas", "scipy", "cv2"):
        out.append(Proposal(
            action=f"do {fn}'s {library} work on the GPU with torch operations",
            gain_high=amdahl(share), gain_basis="array work on the GPU takes a fraction of "
                                                "the CPU's time"))
    return tuple(out)


# ---------------------------------------------------------------- PyTorch's own dispatch


def launch_bound_host(sig: Signals) -> list[Result]:
    """The SMs are mostly idle (< 50 % busy) while the trainer, busy on the CPU (≥ 85 % of a
    core), spends ≥ 50 % of its main thread's samples in PyTorch's Python (modules' forward,
    autograd, the optimizer): the host cannot issue kernels as fast as the GPU runs them.
    Share: the smaller of that share and the SMs' idle share."""
    h = sig.stacks
    g = sig.gpus[0] if sig.gpus else None
    if h is None or g is None or g.sm_busy is None or sig.process is None:
        return []
    torch_share = h.share("torch")
    if g.sm_busy >= 0.5 or torch_share < TORCH_SHARE or \
            sig.process.trainer_cpu_pct < BUSY_TRAINER_PCT:
        return []
    share = min(torch_share, 1 - g.sm_busy)
    ev = [gpu_obs(g, "utilization_pct"),
          gpu_obs(g, "sm_activity_pct") if g.sm_activity_pct is not None else None,
          obs("trainer_cpu", sig.process.trainer_cpu_pct, "% of a core",
              process_source(sig.process), 1),
          obs("main_thread_in_pytorch", torch_share, "of its time",
                                 stacks_source(h)), *_functions(h, 2)]
    return [_launch_result(share, "medium", [e for e in ev if e is not None], g.index)]


# ---------------------------------------------------------------- host syncs


def host_syncs(sig: Signals) -> list[Result]:
    """The step waits for the GPU: `.item()` / `.cpu()` / synchronize at least once a step.

    With a profile: at least every other profiled step, its cost the GPU's idle time in the
    gaps a sync call returned in (HTA's view; a CPU-only run has no GPU to idle: the finding
    stands, the share is not measured). From the bootstrap's counts alone: a sync stops the
    host from running ahead, so the host's part of the step (h, the time not blocked in
    syncs) and the GPU's (g, its utilization) add up instead of overlapping; without the
    syncs the step would take max(h, g): share 1 − max(h, g), reported from 5 %."""
    found = _syncs_from_trace(sig) or _syncs_from_counts(sig)
    if not found:
        return []
    share, confidence, ev, msg, cuda = found
    ev += [obs("sync_site", f"{s.what} at {short_path(s.where)}: {s.calls} calls, "
               f"{s.seconds:.2f} s blocked", "", SYNC_SOURCE) for s in sig.sync_sites[:2]]
    top = sig.sync_sites[0] if sig.sync_sites else None
    where = f" ({top.what} at {short_path(top.where)})" if top else ""
    return [Result(
        _finding("host-syncs", "Host syncs in the loop", share, confidence, msg + where, ev,
                 severity=Severity.WARN if share >= 0.05 or not cuda else Severity.INFO),
        (Proposal(action="keep values on the GPU; read them every N steps, not every step",
                  settings=("running = running + loss.detach()  # no sync\n"
                            "if step % 100 == 0: print((running / 100).item()); "
                            "running.zero_()"),
                  gain_high=amdahl(share) if share else None,
                  gain_basis=f"time lost to syncs: {_pct(share)} of the step" if cuda
                  else "not measurable on the CPU: on a GPU each sync drains the queue"),))]


def _syncs_from_trace(sig: Signals) -> tuple | None:
    t = sig.trace
    if not t or not t.steps:
        return None
    items, syncs = t.per_step(t.item_calls), t.per_step(t.sync_calls)
    if max(items, syncs) < 0.5:  # the last profiled step is often cut short
        return None
    # What a sync costs is the GPU's idle time after it, while the CPU launches the next work
    # (the queue was drained). The CPU's blocked time is not: a CPU ahead of the GPU blocks
    # anyway, and an .item() blocks inside its copy call (an H200 run read 1 % here while
    # the GPU sat idle 16 % of the time).
    share = t.devices[0].share(t.devices[0].sync_idle_us) if t.cuda and t.devices else 0.0
    ev = [obs("item_calls_per_step", items, "", trace_source(t), 1),
          obs("sync_calls_per_step", syncs, "", trace_source(t), 1)]
    if t.cuda:
        ev += [obs("gpu_idle_after_syncs", share, "of GPU span", trace_source(t)),
               obs("sync_wait", t.sync_share, "of the step", trace_source(t))]
    msg = (f"{max(items, syncs):.1f} host sync(s) per step (.item(), .cpu(), synchronize): "
           "the CPU stops queuing work until the GPU catches up")
    return share, "high" if t.cuda else "medium", ev, msg, t.cuda


def _syncs_from_counts(sig: Signals) -> tuple | None:
    st = sig.steps
    if st is None or not st.syncs_per_step or st.syncs_per_step < 1 or not sig.gpus \
            or st.sync_wait_share is None:
        return None
    g = sig.gpus[0]
    if g.utilization_pct is None:
        return None
    host, gpu = 1 - st.sync_wait_share, g.utilization_pct / 100
    share = max(0.0, 1 - max(host, gpu))
    if share < 0.05:
        return None
    ev = [obs("syncs_per_step", st.syncs_per_step, "", steps_source(st), 1),
          obs("blocked_in_syncs", st.sync_wait_share, "of the step", steps_source(st)),
          gpu_obs(g, "utilization_pct")]
    msg = (f"{st.syncs_per_step:.0f} host sync(s) per step: the host's part of the step "
           f"({_pct(host)}) and the GPU's ({_pct(gpu)}) run one after the other instead of "
           "overlapping")
    return share, "medium", ev, msg, True


# ---------------------------------------------------------------- compilation


def compilation(sig: Signals) -> list[Result]:
    """torch.compile's time: in the steady state (recompiles) ≥ 5 % of it, or a job that
    never reached a steady state (it recompiled every few steps, or ended while compiling).
    A warm-up followed by a steady state is an INFO (it was left out of the window)."""
    c = sig.compile
    if c is None:
        return []
    src = compile_source(c)
    ev = [obs("compile_time", c.compile_s, "s", src, 1),
          obs("compilations", c.compiles, "", src), obs("recompiles", c.recompiles, "", src)]
    ev += [obs("recompile_reason", f"{n}× {r}", "", "dynamo's guard failures")
           for r, n in c.reasons[:2]]
    if c.limit_hit:
        ev.append(obs("recompile_limit", c.limit_hit, "", "dynamo's warning"))
    share = c.window_share
    steady = c.warmup_s is not None
    if steady and share < 0.05 and c.recompiles < 2:
        ev.insert(0, obs("warmup", c.warmup_s, "s", src, 1))
        msg = (f"torch.compile warmed up for {c.warmup_s:.1f} s ({c.compiles} compilations); "
               "that time is left out of the diagnosis")
        return [Result(_finding("compilation", "Compilation warm-up", 0.0, "high", msg, ev,
                                severity=Severity.INFO))]
    cause = f" ({c.reasons[0][0]})" if c.reasons else ""
    if c.still_compiling and not steady:
        msg = (f"the job ended while torch.compile was still compiling: {c.compile_s:.0f} s "
               f"of its {c.window_s:.0f} s compiling, no steady state reached")
    elif c.recompiles:
        msg = (f"torch.compile recompiled {c.recompiles} times{cause}: "
               f"{_pct(share)} of the time compiling")
    else:
        msg = f"torch.compile takes {_pct(share)} of the time and never settles"
    props = []
    if c.recompiles:
        props.append(Proposal(
            action="stop the recompiles: mark the dimension that changes as dynamic, or pad "
                   "inputs to a few fixed sizes",
            settings=("torch._dynamo.mark_dynamic(x, 1)  # the changing dim, before the call\n"
                      "# or: model = torch.compile(model, dynamic=True)"),
            gain_low=amdahl(share / 2), gain_high=amdahl(share),
            gain_basis=f"{_pct(share)} of the time compiling"))
    else:
        props.append(Proposal(
            action="let the job run past the warm-up (compiled steps come after it); keep "
                   "Inductor's caches between runs; mode='max-autotune' compiles longer",
            settings="export TORCHINDUCTOR_FX_GRAPH_CACHE=1 TORCHINDUCTOR_AUTOGRAD_CACHE=1",
            gain_basis="the warm-up is paid once per process; the caches shorten the next"))
    return [Result(_finding("compilation", "Compilation", share, "high", msg, ev,
                            severity=Severity.WARN if share >= 0.2 or c.limit_hit else None),
                   tuple(props))]


# ---------------------------------------------------------------- cuDNN autotuning


def cudnn_autotune(sig: Signals) -> list[Result]:
    """`torch.backends.cudnn.benchmark` on while the convolutions' input shapes change: each
    new shape is benchmarked again. At least 3 steps of the window met a new shape and those
    steps took ≥ 5 % of the steps' time beyond an ordinary step (their median). Where almost
    no step is ordinary (≥ half met a new shape, < 3 did not) there is nothing to compare
    with: the share is then the share of the steps that paid for tuning, said so."""
    st = sig.steps
    if st is None or st.new_shape_steps < 3:
        return []
    src = "the bootstrap's convolution shapes, per step"
    ev = [obs("new_shape_steps", st.new_shape_steps, "", src),
          obs("steps", st.steps, "", steps_source(st))]
    if st.new_shape_extra_share is None:
        share = st.new_shape_steps / st.steps
        if share < 0.5:
            return []
        cost = (f"{_pct(share)} of the steps: no step ran with algorithms already tuned, so "
                "the cost is not measured against an ordinary one")
        basis = f"{_pct(share)} of the steps pay for tuning (the cost of each not measured)"
    else:
        share = st.new_shape_extra_share
        if share < 0.05:
            return []
        ev.append(obs("new_shape_extra_time", share, "of the steps' time", src))
        cost = f"{_pct(share)} of the time"
        basis = f"the new-shape steps' extra time is {_pct(share)} of the steps' time"
    msg = (f"cudnn.benchmark is on and {st.new_shape_steps} of {st.steps} steps met a "
           f"convolution input shape not seen before: each new shape is benchmarked again "
           f"({cost})")
    return [Result(
        _finding("cudnn-autotune", "cuDNN autotuning every new shape", share, "high", msg, ev,
                 sig.gpus[0].index if sig.gpus else None),
        (Proposal(action="turn cudnn.benchmark off while the input shapes vary, or bring the "
                         "inputs to a few fixed sizes (each is then tuned once)",
                  settings="torch.backends.cudnn.benchmark = False  # the shapes vary",
                  gain_low=amdahl(share / 2), gain_high=amdahl(share), gain_basis=basis),))]


RULES = (host_syncs, compilation, cudnn_autotune, host_bound, launch_bound_host)
