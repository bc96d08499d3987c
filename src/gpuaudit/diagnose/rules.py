"""The rules: pure functions from the evidence (`Signals`) to findings, each with the changes
that answer it and their expected gain.

Each rule estimates `share`, the fraction of the job's time its bottleneck costs. Gains follow
from it by Amdahl's law: removing a share s of the time speeds the job up 1/(1 − s) times;
making it k times faster, 1/(1 − s + s/k). `gain_high` assumes the change removes all of it,
`gain_low` half, unless the rule says otherwise. The thresholds are stated beside each rule;
docs/doctor.md lists them with the traces they were checked on.
"""

from __future__ import annotations

import math

from gpuaudit.model import Observation, Severity

from .evidence import (
    Signals,
    gpu_obs,
    gpu_source,
    obs,
    process_source,
    steps_source,
    trace_source,
)
from .findings import Proposal, Result, amdahl
from .findings import finding as _finding
from .findings import pct as _pct
from .gpustats import GpuStats
from .kineto import TraceStats

GB = 1e9
GIB = 1 << 30
COPY_RATE = 1 * GB  # host↔device bytes/s above which copies are a suspect
PINNED_OF_LINK = 0.8  # pinned copies reach about this much of the link (H200: 55 of 63 GB/s)
LOADER_SHARE = 0.05  # the TensorBoard plugin's DataLoader rule: > 5 % of the step
PINNED_SETTINGS = ("DataLoader(..., pin_memory=True)\n"
                   "x = x.to('cuda', non_blocking=True)  # from a pinned tensor: "
                   "x = x.pin_memory()")


def _copies(g: GpuStats) -> bool:
    return (g.pcie_bytes_per_s or 0.0) >= COPY_RATE


# ---------------------------------------------------------------- input pipeline


def input_bound(sig: Signals) -> list[Result]:
    """The GPU waits for batches. Evidence, strongest first: the time spent waiting for the
    next batch (step markers / Lightning, or the profiler's DataLoader ops) ≥ 5 % of the
    step; the GPU idle ≥ 30 % while loader workers run and the trainer does not use its core;
    or, from GPU telemetry alone, the GPU idle ≥ 50 % with its work arriving in bursts (≤ 60 %
    of the ticks active), each with a host→device upload (5 × the idle ticks' rate)."""
    ev: list[Observation] = []
    share: float | None = None
    confidence = "medium"
    if sig.steps and (w := sig.steps.data_wait_share) is not None and w >= LOADER_SHARE:
        share, confidence = w, "high"
        ev += [obs("data_wait_per_step", sig.steps.data_wait_median_s, "s",
                   steps_source(sig.steps)),
               obs("step_time", sig.steps.median_s, "s", steps_source(sig.steps))]
    elif sig.trace and sig.trace.loader_share >= LOADER_SHARE:
        share, confidence = sig.trace.loader_share, "high"
        ev.append(obs("dataloader_share", sig.trace.loader_share, "of the step",
                      trace_source(sig.trace)))
    traced = sig.trace.devices[0] if sig.trace and sig.trace.cuda and sig.trace.devices \
        else None
    for g in sig.gpus:
        # NVML's utilization counts kernels, not copies: a job copying pageable batches read
        # 0 % with its copies filling 90 % of the GPU's time (H200). The trace knows.
        idle = traced.share(traced.idle_us) if traced else g.idle_share
        if idle is None:
            continue
        p = sig.process
        waiting = p is not None and p.workers > 0 and p.trainer_cpu_pct < 60
        bursty = (idle >= 0.5 and 0.0 < g.active_fraction <= 0.6
                  and (g.h2d_burst_ratio or 0) >= 5)
        if share is None and idle >= 0.3 and waiting:
            share = idle
        elif share is None and bursty:
            share, confidence = idle, "medium"
        if share is not None and (waiting or bursty or idle >= 0.3):
            ev.append(gpu_obs(g, "utilization_pct"))
            if bursty:
                ev += [obs("active_ticks", g.active_fraction, "fraction", gpu_source(g)),
                       obs("h2d_rate_active_over_idle", g.h2d_burst_ratio, "×",
                           gpu_source(g), 1)]
            break
    if share is None:
        return []
    p = sig.process
    if p is not None:
        ev += [obs("loader_workers", p.workers, "", process_source(p)),
               obs("worker_cpu", p.worker_cpu_pct, "% of a core", process_source(p), 1),
               obs("trainer_cpu", p.trainer_cpu_pct, "% of a core", process_source(p), 1)]
    msg = (f"the job waits for its next batch about {_pct(share)} of the time: the data "
           "loader does not keep up")
    return [Result(_finding("input-bound", "Input pipeline bound", share, confidence, msg, ev,
                            sig.gpus[0].index if sig.gpus else None),
                   _loader_changes(sig, share))]


def _data_wait_share(sig: Signals) -> float:
    """The share of the step spent waiting for the next batch (0 when not measured)."""
    if sig.steps and sig.steps.data_wait_share is not None:
        return sig.steps.data_wait_share
    return sig.trace.loader_share if sig.trace else 0.0


def _loader_changes(sig: Signals, share: float) -> tuple[Proposal, ...]:
    p = sig.process
    cores = p.cores if p else None
    have = p.workers if p else None
    # Workers W deliver a batch per step time T; to keep up with compute, T × (1 − share),
    # they must be 1/(1 − share) times as many (20 % margin). Never fewer than now.
    need = max(math.ceil(round(have / max(1 - share, 0.05) * 1.2, 6)), have + 1) if have \
        else 4
    spare = max((cores or 8) - (p.trainers if p else 1), 1)
    workers = max(need if need <= spare else max(spare, (have or 0) + 1), 1)
    basis = (f"the GPU waits {_pct(share)} of the time for batches; with workers "
             f"producing {1 / max(1 - share, 0.05):.1f}× faster it would not")
    out = [Proposal(
        action=f"more data-loader workers ({have if have is not None else '?'} → {workers}), "
               "pinned memory, batches prepared ahead",
        settings=(f"DataLoader(..., num_workers={workers}, pin_memory=True, "
                  "persistent_workers=True, prefetch_factor=4)"),
        gain_low=amdahl(share / 2), gain_high=amdahl(share), gain_basis=basis)]
    if need > spare:
        out.append(Proposal(
            action=f"make each sample cheaper: about {need} workers are needed and {spare} "
                   "core(s) are free (decode on the GPU, cache decoded data, faster storage)",
            gain_high=amdahl(share), gain_basis="the rest of the wait, once workers are "
                                                "maxed out"))
    return tuple(out)


# ---------------------------------------------------------------- launch / overhead


def launch_bound(sig: Signals) -> list[Result]:
    """Many short kernels: the GPU runs something nearly all the time but its SMs mostly idle
    (NVML utilization ≥ 50 %, SM activity under half of it, no copy traffic), or the profiled
    kernels mostly finish before their launch call returns (HTA's short kernels ≥ 50 %) with
    host and kernel wait ≥ 30 % of the GPU's span."""
    t = sig.trace
    if _small_batch_launches(sig) is not None:
        return []  # the step's kernels are short because its batch is: batch-too-small's
    if t and t.cuda and t.devices and t.launched_kernels and not _small_batch_trace(sig):
        # (a few small matmuls a step: batch-too-small's case, a bigger batch is the answer)
        d = t.devices[0]
        wait = _launch_wait(sig)
        short = t.short_kernels / t.launched_kernels
        if short >= 0.5 and wait >= 0.3:
            ev = [obs("short_kernels", short, "of launched", trace_source(t)),
                  obs("host_wait", d.share(d.host_wait_us), "of GPU span", trace_source(t)),
                  obs("kernel_wait", d.share(d.kernel_wait_us), "of GPU span",
                      trace_source(t)),
                  obs("median_kernel", t.median_kernel_us, "µs", trace_source(t), 1)]
            return [_launch_result(wait, "high", ev, d.device)]
    for g in sig.gpus:
        if g.utilization_pct is None or g.sm_activity_pct is None or _copies(g):
            continue
        u, s = g.utilization_pct, g.sm_activity_pct
        if u >= 50 and s < 0.5 * u:
            share = 1 - s / u
            ev = [gpu_obs(g, "utilization_pct"), gpu_obs(g, "sm_activity_pct"),
                  gpu_obs(g, "sm_occupancy_pct")]
            return [_launch_result(share, "medium", ev, g.index)]
    return []


def _launch_wait(sig: Signals) -> float:
    """The share of the GPU's span spent waiting on the host and between kernels that
    neither a host sync nor the data loader explains (on an H200 a loader-starved job showed
    host wait 100 % and ranked launch-bound first)."""
    d = sig.trace.devices[0] if sig.trace and sig.trace.devices else None
    if d is None:
        return 0.0
    return max(d.share(d.host_wait_us + d.kernel_wait_us - d.sync_idle_us)
               - _data_wait_share(sig), 0.0)


def _launch_result(share: float, confidence: str, ev: list[Observation], gpu: int | None
                   ) -> Result:
    msg = (f"kernels are too short to fill the GPU: about {_pct(share)} of the time goes to "
           "launching them and waiting between them")
    return Result(
        _finding("launch-bound", "Launch / overhead bound", share, confidence, msg, ev, gpu),
        (Proposal(action="capture the step in CUDA graphs and fuse small kernels",
                  settings='model = torch.compile(model, mode="reduce-overhead")',
                  gain_low=amdahl(share / 2), gain_high=amdahl(share),
                  gain_basis=f"launch and wait time is {_pct(share)} of the GPU's time"),
         Proposal(action="a bigger batch per step (more work per kernel launch)",
                  gain_high=amdahl(share), gain_basis="the same overhead spread over more "
                                                      "samples; `gpuaudit tune` finds it")))


# ---------------------------------------------------------------- tensor cores


def tensor_cores_unused(sig: Signals) -> list[Result]:
    """FP32 matmuls: the SMs are busy (≥ 40 %) with the FP32 pipes doing the work (≥ 15 %)
    and tensor activity under 5 % (GPM); or the profiled matmul kernels take ≥ 20 % of
    kernel time and under 10 % of it runs on tensor cores (kernel names). The share is of
    the job's time, not of the GPU's busy time: FP32 matmuls on a GPU that idles 97 % of
    the time cost little (an H200 job whose batches were built on the CPU read 81 % of its
    kernel time in FP32 matmuls, 2.5 % of its time)."""
    ratio_tf32, ratio_bf16, ratio_basis = _tc_ratios(sig)
    t = sig.trace
    if t and t.cuda and t.kernel_time_us > 0 and (tc := t.tensor_core_share) is not None:
        no_tc = t.matmul_time_us.get("no tensor cores (fp32)", 0.0)
        f = no_tc / t.kernel_time_us
        if tc < 0.1 and f >= 0.2:
            of_job = min(f, t.devices[0].share(no_tc)) if t.devices else f
            ev = [obs("matmul_time_on_tensor_cores", tc, "fraction", trace_source(t)),
                  obs("fp32_matmul_time", f, "of kernel time", trace_source(t))]
            ev += [obs("kernel", name[:90], "", f"{us / 1000:.1f} ms, {kind}")
                   for name, us, kind in t.top_matmuls[:3]]
            return [_tc_result(of_job, "high", ev, None, ratio_tf32, ratio_bf16,
                               ratio_basis)]
    for g in sig.gpus:
        s, tensor, fp32 = g.sm_activity_pct, g.tensor_activity_pct, g.fp32_activity_pct
        if s is None or tensor is None or fp32 is None:
            continue
        if s >= 40 and tensor < 5 and fp32 >= 15:
            f = min(fp32 / 100, 1.0)  # the share of the time in FP32 math
            ev = [gpu_obs(g, "sm_activity_pct"), gpu_obs(g, "tensor_activity_pct"),
                  gpu_obs(g, "fp32_activity_pct")]
            return [_tc_result(f, "high", ev, g.index, ratio_tf32, ratio_bf16, ratio_basis)]
    return []


def _tc_ratios(sig: Signals) -> tuple[float, float, str]:
    pk = sig.peaks_tflops or {}
    if pk.get("fp32") and pk.get("tf32") and pk.get("bf16"):
        return (pk["tf32"] / pk["fp32"], pk["bf16"] / pk["fp32"],
                f"datasheet peaks fp32 {pk['fp32']:g}, tf32 {pk['tf32']:g}, bf16 "
                f"{pk['bf16']:g} TFLOP/s")
    return 8.0, 16.0, "A100-class ratios tf32 8×, bf16 16× fp32 (GPU not in the catalog)"


def _tc_result(f: float, confidence: str, ev: list[Observation], gpu: int | None,
               r_tf32: float, r_bf16: float, basis: str) -> Result:
    share = f * (1 - 1 / r_tf32)
    msg = (f"matmuls run in FP32 on the CUDA cores ({_pct(f)} of the time): tensor cores are "
           "not used")
    return Result(
        _finding("tensor-cores-unused", "Tensor cores unused", share, confidence, msg, ev, gpu),
        (Proposal(action="mixed precision: matmuls in bf16 on tensor cores",
                  settings='with torch.autocast("cuda", dtype=torch.bfloat16):\n'
                           '    loss = model(x, y)',
                  gain_low=amdahl(f, r_tf32), gain_high=amdahl(f, r_bf16),
                  gain_basis=f"{_pct(f)} of the time in FP32 math; {basis}"),
         Proposal(action="TF32 for the remaining float32 matmuls (one line, no code changes)",
                  settings='torch.set_float32_matmul_precision("high")',
                  gain_low=amdahl(f, r_tf32 / 2), gain_high=amdahl(f, r_tf32),
                  gain_basis=f"{_pct(f)} of the time in FP32 math; {basis}")))


# ---------------------------------------------------------------- memory bandwidth


def memory_bound(sig: Signals) -> list[Result]:
    """The kernels stream memory: SMs busy (≥ 50 %), DRAM bandwidth ≥ 60 % of peak, tensor
    activity under 20 % (GPM)."""
    for g in sig.gpus:
        s, dram, tensor = g.sm_activity_pct, g.dram_bandwidth_pct, g.tensor_activity_pct
        if s is None or dram is None:
            continue
        if s >= 50 and dram >= 60 and (tensor or 0) < 20:
            share = s / 100 * min(1.0, dram / 80)
            ev = [gpu_obs(g, "dram_bandwidth_pct"), gpu_obs(g, "sm_activity_pct"),
                  gpu_obs(g, "tensor_activity_pct")]
            msg = (f"DRAM bandwidth is {dram:.0f} % of peak while tensor cores idle: the "
                   "kernels wait on memory, not math")
            return [Result(
                _finding("memory-bound", "Memory-bandwidth bound", share, "high", msg, ev,
                         g.index),
                (Proposal(action="fuse elementwise ops so data is read once",
                          settings="model = torch.compile(model)",
                          gain_high=amdahl(share / 2),
                          gain_basis="fewer passes over memory; the gain depends on how many "
                                     "kernels fuse (up to half the traffic assumed)"),
                 Proposal(action="16-bit activations (bf16 autocast): half the bytes moved",
                          settings='with torch.autocast("cuda", dtype=torch.bfloat16): ...',
                          gain_low=amdahl(share, 1.5), gain_high=amdahl(share, 2.0),
                          gain_basis=f"{_pct(share)} of the time at the memory roofline; "
                                     "2× fewer bytes at most")))]
    return []


# ---------------------------------------------------------------- communication


def comm_bound(sig: Signals) -> list[Result]:
    """Collectives are exposed: NCCL kernels take ≥ 10 % of the GPU's span and under half of
    their time overlaps compute (the profiler, HTA's overlap)."""
    t = sig.trace
    if not (t and t.cuda and t.devices and t.comm_time_us > 0):
        return []
    d = t.devices[0]
    overlap = t.comm_overlap_share or 0.0
    comm = d.share(t.comm_time_us)
    exposed = comm * (1 - overlap)
    if comm < 0.1 or overlap >= 0.5:
        return []
    ev = [obs("communication_time", comm, "of GPU span", trace_source(t)),
          obs("overlap_with_compute", overlap, "of communication time", trace_source(t))]
    msg = (f"collectives take {_pct(comm)} of the GPU's time and only {_pct(overlap)} of "
           "it overlaps compute")
    return [Result(
        _finding("comm-bound", "Communication bound", exposed, "high", msg, ev, d.device),
        (Proposal(action="all-reduce less often: gradient accumulation with no_sync()",
                  settings=("for i, batch in enumerate(loader):\n"
                            "    ctx = model.no_sync() if (i + 1) % ACCUM else nullcontext()\n"
                            "    with ctx: (loss(model(batch)) / ACCUM).backward()\n"
                            "    if (i + 1) % ACCUM == 0: opt.step(); opt.zero_grad()"),
                  gain_low=amdahl(exposed / 2), gain_high=amdahl(exposed * 0.75),
                  gain_basis=f"exposed communication is {_pct(exposed)}; ACCUM=4 sends a "
                             "quarter as often"),
         Proposal(action="compress gradients to bf16 for the all-reduce",
                  settings=("from torch.distributed.algorithms.ddp_comm_hooks import "
                            "default_hooks\nmodel.register_comm_hook(None, "
                            "default_hooks.bf16_compress_hook)"),
                  gain_high=amdahl(exposed / 2), gain_basis="half the bytes on the wire")))]


# ---------------------------------------------------------------- clocks


def throttled(sig: Signals) -> list[Result]:
    """Under load (SM activity ≥ 50 %) in at least 3 ticks, half of them with a power or
    thermal clock-event reason, and the median clock ≤ 95 % of the GPU's maximum."""
    for g in sig.gpus:
        if g.loaded_ticks < 3 or g.throttle_fraction < 0.5 or not g.sm_clock_max_mhz \
                or g.sm_clock_mhz is None:
            continue
        ratio = g.sm_clock_mhz / g.sm_clock_max_mhz
        if ratio > 0.95:
            continue
        share = 1 - ratio
        thermal = any("thermal" in r or r == "hw_slowdown" for r in g.throttle_reasons)
        ev = [obs("sm_clock", g.sm_clock_mhz, "MHz", gpu_source(g), 0),
              obs("sm_clock_max", g.sm_clock_max_mhz, "MHz", "NVML max clock"),
              obs("reasons", ", ".join(g.throttle_reasons), "",
                  f"NVML clock-event reasons, {_pct(g.throttle_fraction)} of loaded ticks"),
              gpu_obs(g, "power_w", "W"), gpu_obs(g, "power_limit_w", "W")]
        if thermal:
            msg = f"the GPU slows itself for heat: clock {ratio:.0%} of its maximum"
            action = "cooling: check fans/airflow and the GPU's temperature (the host's job)"
        else:
            msg = (f"the GPU runs at its power limit ({g.power_w or 0:.0f} of "
                   f"{g.power_limit_w or 0:.0f} W): clock {ratio:.0%} of its maximum")
            action = ("nothing in the job: this is the board's power cap; a higher limit "
                      "(where the host allows) or fewer wasted FLOPs")
        return [Result(
            _finding("throttled", "Throttled clocks", share, "high", msg, ev, g.index,
                     Severity.WARN if thermal else Severity.INFO),
            (Proposal(action=action,
                      settings=None if thermal else "sudo nvidia-smi -i "
                      f"{g.index} -pl <watts>  # up to the board's maximum",
                      gain_high=round(g.sm_clock_max_mhz / g.sm_clock_mhz, 2),
                      gain_basis="at most the clock ratio, for compute-bound kernels"),))]
    return []


# ---------------------------------------------------------------- batch size


def batch_too_small(sig: Signals) -> list[Result]:
    """The GPU gets too little work per step. Profiled on a GPU: fewer than 200 kernels per
    step (more is launch-bound's case), median kernel under 20 µs, matmuls ≥ 30 % of kernel
    time (the model's math is what is small), the GPU idle ≥ 50 % of its span beyond what
    syncs and the loader explain, memory under half used. From telemetry:
    SMs busy under 30 %, work arriving steadily (≥ 90 % of ticks active: not input-bound), no
    copy traffic, memory under half used.
    On a CPU-only profile: matmuls of under 50 µs median (the per-op overhead, ~10 µs,
    is then a large part of each)."""
    t = sig.trace
    launches = _small_batch_launches(sig)
    if t and t.devices and launches is not None:
        short, share = launches
        g = sig.gpus[0] if sig.gpus else None
        mem = g.memory_used_fraction if g else None
        ev = [obs("batch", t.batch, f"rows into {t.batch_op} a step", trace_source(t), 0),
              obs("short_kernels", short, "of launched", trace_source(t)),
              obs("gpu_waiting", share, "of GPU span", trace_source(t)),
              obs("median_kernel", t.median_kernel_us, "µs", trace_source(t), 1)]
        if g is not None and mem is not None:
            ev.append(obs("memory_used", mem, "fraction", gpu_source(g)))
        return [_batch_result(share, "high", ev, t.devices[0].device, mem, t.batch)]
    if t and t.cuda and t.per_step(t.kernels) >= MANY_KERNELS:
        return []  # many small kernels, not a few: launch-bound's (a bigger batch won't fix)
    if t and _small_batch_trace(sig):
        idle = _unexplained_idle(sig)
        g = sig.gpus[0] if sig.gpus else None
        mem = g.memory_used_fraction if g else None
        # not doing math: idle, or busy with SMs mostly empty (GPM) where it was read
        share = max(idle, 1 - g.sm_busy) if g and g.sm_busy is not None else idle
        ev = [obs("gpu_idle", idle, "of GPU span", trace_source(t)),
              obs("matmul_time", _matmul_share(t), "of kernel time", trace_source(t)),
              obs("kernels_per_step", t.per_step(t.kernels), "", trace_source(t), 0),
              obs("median_kernel", t.median_kernel_us, "µs", trace_source(t), 1)]
        if g is not None and mem is not None:
            ev.append(obs("memory_used", mem, "fraction", gpu_source(g)))
        return [_batch_result(share, "high", ev, t.devices[0].device, mem)]
    for g in sig.gpus:
        busy = g.sm_busy
        mem = g.memory_used_fraction
        if busy is None or mem is None or _copies(g):
            continue
        if busy < 0.3 and g.active_fraction >= 0.9 and mem < 0.5:
            share = 1 - busy
            ev = [gpu_obs(g, "sm_activity_pct") if g.sm_activity_pct is not None
                  else gpu_obs(g, "utilization_pct"),
                  obs("memory_used", mem, "fraction", gpu_source(g)),
                  gpu_obs(g, "sm_occupancy_pct")]
            return [_batch_result(share, "medium", ev, g.index, mem)]
    t = sig.trace
    if t and not t.cuda and t.median_matmul_op_us is not None and t.steps \
            and t.median_matmul_op_us < 50 and t.per_step(t.matmul_ops) >= 3:
        share = min(10.0 / t.median_matmul_op_us, 0.9)  # ~10 µs of dispatch per op
        ev = [obs("median_matmul_time", t.median_matmul_op_us, "µs", trace_source(t), 1),
              obs("matmuls_per_step", t.per_step(t.matmul_ops), "", trace_source(t), 0)]
        return [_batch_result(share, "medium", ev, None, None)]
    return []


MANY_KERNELS = 200  # kernels per profiled step
# Fewer rows than this into the step's first layer: its kernels are sized by the batch, not
# by the model (on an H200 a ResNet-18 at batch 2 ran 82 % of its kernels shorter than their
# launch; the zoo's launch-bound jobs, a 64-layer MLP at batch 32 and a per-sample Python
# loss at batch 128, are short for their width and their loop instead).
SMALL_BATCH = 16
SHORT_KERNEL_US = 20.0  # a median kernel this short does little work per launch


def _small_batch_launches(sig: Signals) -> tuple[float, float] | None:
    """(short kernels' share, the GPU's waiting share) of a GPU profile whose first layer
    received fewer than SMALL_BATCH rows a step, its kernels mostly shorter than their launch
    and the GPU waiting ≥ 30 % of its span; None otherwise."""
    t = sig.trace
    if not (t and t.cuda and t.devices and t.launched_kernels and t.batch is not None
            and t.batch < SMALL_BATCH):
        return None
    short = t.short_kernels / t.launched_kernels
    share = max(_launch_wait(sig), _unexplained_idle(sig))
    return (short, share) if short >= 0.5 and share >= 0.3 else None


def _matmul_share(t: TraceStats) -> float:
    return sum(t.matmul_time_us.values()) / t.kernel_time_us if t.kernel_time_us else 0.0


def _unexplained_idle(sig: Signals) -> float:
    """The GPU's idle share of its span that neither syncs nor the data loader explain."""
    t = sig.trace
    if not (t and t.devices):
        return 0.0
    d = t.devices[0]
    return max(d.share(d.idle_us - d.sync_idle_us) - _data_wait_share(sig), 0.0)


def _small_batch_trace(sig: Signals) -> bool:
    """A GPU profile of a few short matmul-led kernels a step, the GPU mostly idle for no
    other reason, memory mostly free: the work per step is small, so launches show."""
    t = sig.trace
    if not (t and t.cuda and t.devices and t.steps and t.median_kernel_us is not None):
        return False
    mem = sig.gpus[0].memory_used_fraction if sig.gpus else None
    return (t.per_step(t.kernels) < MANY_KERNELS and t.median_kernel_us < SHORT_KERNEL_US
            and _matmul_share(t) >= 0.3 and _unexplained_idle(sig) >= 0.5
            and (mem is None or mem < 0.5))


def _batch_result(share: float, confidence: str, ev: list[Observation], gpu: int | None,
                  mem: float | None, batch: int | None = None) -> Result:
    room = f" (memory allows ~{max(int(0.8 / mem), 2)}×)" if mem else ""
    if batch is not None:
        msg = (f"a batch of {batch} a step: the kernels are so small that about {_pct(share)} "
               "of the GPU's time goes to launching them and waiting between them")
    elif mem is not None:
        msg = (f"the SMs work {_pct(1 - share)} of the time with {_pct(1 - mem)} of the memory "
               "free: each step gives the GPU too little work")
    else:
        msg = "operators are so short that per-op overhead, not math, sets the pace"
    return Result(
        _finding("batch-too-small", "Batch too small", share, confidence, msg, ev, gpu),
        (Proposal(action="a larger batch per step" + room + ", learning rate scaled with it; "
                         "`gpuaudit tune` measures the fastest one",
                  gain_low=amdahl(share / 2), gain_high=amdahl(share),
                  gain_basis=f"{_pct(share)} of the time the GPU is not doing math"),))


RULES = (input_bound, launch_bound, tensor_cores_unused, memory_bound, comm_bound, throttled,
         batch_too_small)
