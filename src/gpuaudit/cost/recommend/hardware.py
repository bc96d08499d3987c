"""The hardware plan: what an offer's GPUs give a task, whatever its price. Training and
fine-tuning: the least ZeRO sharding (and recomputation) whose memory fits, the nodes the
memory or a deadline needs, the hours at peak × MFU × scaling efficiency; a benchmarked
workload: the measured rate, scaled by the spec ratio on other GPUs; serving: the batch a
decode step allows within the latency SLO and memory, and the replicas for the QPS. Plans are
built once per (GPU model, count, memory) and shared by every offer with that hardware.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuaudit.cost.memory_fit import Checkpointing, finetune_memory, gb, training_memory
from gpuaudit.model.cost import Offer
from gpuaudit.model.recommendation import Assumptions, MemoryEstimate, ServingPlan
from gpuaudit.specs.figures import SpecFigures as GpuSpec

from .context import Context
from .network import Network, cross_node_efficiency, network_of
from .tasks import (
    BenchmarkedTask,
    FinetuneTask,
    PredictedTask,
    ServeTask,
    TrainingTask,
)

# Adding a node that leaves each GPU less than this share of its single-node speed is not
# worth its price even when the order is by time.
MIN_POOL_EFFICIENCY = 0.5


def gpu_memory(offer: Offer, spec: GpuSpec) -> tuple[float, str]:
    # The catalog's figure wins (it describes the instance sold); label it as it was given.
    if offer.gpu_memory_gib:
        return offer.gpu_memory_gib * 2**30, f"{offer.gpu_memory_gib:g} GiB"
    return spec.memory_gb * 1e9, f"{spec.memory_gb:g} GB"


def intra_efficiency(spec: GpuSpec, count: int, ass: Assumptions) -> float:
    if count <= 1:
        return 1.0
    return (ass.intra_node_efficiency_nvlink if spec.nvlink_bandwidth_gbps
            else ass.intra_node_efficiency_pcie)


def efficiency(spec: GpuSpec, count: int, nodes: int, ass: Assumptions) -> float:
    return intra_efficiency(spec, count, ass) * (ass.inter_node_efficiency if nodes > 1 else 1.0)


# --- train and fine-tune ---------------------------------------------------------------------


def checkpoint_modes(ctx: Context) -> tuple[Checkpointing, ...]:
    t = ctx.task
    assert isinstance(t, TrainingTask)
    # "auto": selective recomputation first (almost free), full checkpointing only when the
    # activations would not fit otherwise (it costs one more forward pass).
    return ("selective", "full") if t.checkpointing == "auto" else (t.checkpointing,)


def memory_plan(ctx: Context, gpus: int, usable: float) -> MemoryEstimate | None:
    """The least ZeRO sharding that fits (less sharding, less communication), with the
    least recomputation, or None."""
    key = ("plan", gpus, usable)
    if key in ctx.memo:
        return ctx.memo[key]  # type: ignore[no-any-return]
    plan = None
    for mode in checkpoint_modes(ctx):
        for stage in (0, 1, 2, 3) if gpus > 1 else (0,):
            est = train_memory(ctx, stage, gpus, mode)
            if est.per_gpu_bytes <= usable:
                plan = est
                break
        if plan is not None:
            break
    ctx.memo[key] = plan
    return plan


def recompute_factor(ctx: Context, plan: MemoryEstimate | None) -> float:
    """Full checkpointing runs the forward pass twice: (k + 2)/k of the k·N·T model FLOPs."""
    if plan is None or plan.checkpointing != "full":
        return 1.0
    k = ctx.memo["flops_factor"]
    return float((k + 2) / k)


def train_memory(ctx: Context, stage: int, gpus: int, mode: Checkpointing) -> MemoryEstimate:
    key = ("mem", stage, gpus, mode)
    if key not in ctx.memo:
        t = ctx.task
        assert ctx.shape is not None and isinstance(t, TrainingTask)
        common: dict[str, Any] = dict(precision=t.precision, optimizer=t.optimizer,
                                      zero_stage=stage, gpus=gpus, micro_batch=t.micro_batch,
                                      seq_len=t.seq_len, checkpointing=mode)
        if isinstance(t, FinetuneTask):
            ctx.memo[key] = finetune_memory(ctx.shape, method=t.method, lora_rank=t.lora_rank,
                                            **common)
        else:
            ctx.memo[key] = training_memory(ctx.shape, **common)
    return ctx.memo[key]  # type: ignore[no-any-return]


def min_gpus_zero3(ctx: Context, usable: float) -> int | None:
    """GPUs of this size needed with ZeRO-3; None when the activations alone do not fit."""
    one = train_memory(ctx, 3, 1, checkpoint_modes(ctx)[-1])
    room = usable - one.activations_bytes
    if room <= 0:
        return None
    return max(1, math.ceil(one.states_total_bytes / room))


@dataclass(repr=False, eq=False)
class Hardware:
    """What an offer's hardware gives the task, whatever its price: shared by every offer with
    the same GPU model, count and memory (a 10,000-row catalog has a few dozen of these)."""

    spec: GpuSpec
    mem_label: str
    usable: float  # per GPU
    nodes: int
    hours: float  # on-demand wall-clock hours
    rate: float
    plan: MemoryEstimate | None = None
    measured: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


# Why an offer's hardware cannot do the task: (exclusion kind, the reason, built on demand
# from the offer's instance type: a plan is shared by every instance type with its GPUs).
Reject = tuple[str, Callable[[str], str]]

# The exclusions that depend on the network between instances; the others (no spec, memory,
# latency...) are the same whatever the network.
NETWORK_KINDS = frozenset({"network", "deadline"})


def without_network(offer: Offer, ctx: Context, serving: bool) -> Hardware | Reject | None:
    """The plan of the offer's GPUs when it is the same whatever the network between its
    instances (then the instance type need not be looked up), else None. Serving plans never
    pool instances. A training plan on one node is the same over any network unless the order
    is by time (more nodes might be faster); one that needs more nodes, or misses the
    deadline on one, depends on it."""
    hw = _memo_plan(offer, ctx, None, serving)
    if serving:
        return hw
    if ctx.cons.sort == "time":
        return None
    if isinstance(hw, tuple):
        return None if hw[0] in NETWORK_KINDS else hw
    return hw if hw.nodes == 1 else None


def with_network(offer: Offer, ctx: Context, net: Network | None) -> Hardware | Reject:
    """The training plan of the offer's GPUs over `net` (memoized)."""
    return _memo_plan(offer, ctx, net)


def _memo_plan(offer: Offer, ctx: Context, net: Network | None,
               serving: bool = False) -> Hardware | Reject:
    """The plan of the offer's GPUs over `net`, made once per context (a context holds one
    task: serving or training, never both)."""
    key = ("hw", offer.gpu_model, offer.gpu_count, offer.gpu_memory_gib, net)
    hw = ctx.memo.get(key)
    if hw is None:
        hw = ctx.memo[key] = serve_hw(offer, ctx) if serving else plan_hw(offer, ctx, net)
    return hw  # type: ignore[no-any-return]


def cached_hardware(offer: Offer, ctx: Context, serving: bool = False) -> Hardware | Reject:
    """The offer's plan, shared by every offer with its GPUs (and, where the plan depends on
    it, its network between instances)."""
    hw = without_network(offer, ctx, serving)
    if hw is None:
        hw = with_network(offer, ctx, network_of(offer.provider, offer.instance_type))
    return hw


def spec_of(offer: Offer, ctx: Context, precision: str | None) -> GpuSpec | Reject:
    spec = ctx.specs.get(offer.gpu_model)
    if spec is None:
        return "spec", lambda _it: (f"GPU {offer.gpu_model!r} is not in the spec catalog: no "
                                    "peak to estimate from")
    if precision is not None and spec.peak(precision) is None:
        return "spec", lambda _it: (f"{spec.name} publishes no {precision} peak (not supported "
                                    "by its tensor cores)")
    return spec


def plan_hw(offer: Offer, ctx: Context, net: Network | None) -> Hardware | Reject:
    """Train, fine-tune, benchmarked: work ÷ rate on the fewest nodes that fit (and meet the
    deadline at on-demand speed), over `net`, the network between the offer's instances
    (None: none known)."""
    t = ctx.task
    ass = ctx.ass
    precision = t.precision if isinstance(t, TrainingTask) else None
    spec = spec_of(offer, ctx, precision)
    if isinstance(spec, tuple):
        return spec
    mem_bytes, mem_label = gpu_memory(offer, spec)
    usable = mem_bytes * (1 - ass.memory_margin)
    count = offer.gpu_count

    measured_rate = False
    predicted = isinstance(t, PredictedTask)
    if isinstance(t, PredictedTask):
        guess, why = t.rate_on(offer.gpu_model, count)
        if guess is None:
            return "prediction", lambda _it: why
        per_gpu = guess
        measured_rate = offer.gpu_model == t.gpu_model and count == t.gpus
        unit_scale = 1.0
    elif isinstance(t, BenchmarkedTask):
        base = ctx.specs.get(t.gpu_model)
        if offer.gpu_model == t.gpu_model:
            per_gpu, measured_rate = t.rate_per_gpu, True
        else:
            assert base is not None
            mine, theirs = scale_figures(t.scale_by, spec, base)
            if mine is None or theirs is None:
                return "spec", lambda _it: (f"{spec.name} publishes no {t.scale_by} figure to "
                                            "scale the measurement by")
            per_gpu = t.rate_per_gpu * mine / theirs
        unit_scale = 1.0  # rates stay in the measurement's unit
    else:
        assert precision is not None
        peak = spec.peak(precision)
        assert peak is not None
        per_gpu = peak * ass.mfu  # TFLOP/s
        unit_scale = 1e12

    # Nodes: the fewest that hold the memory plan; more only when the deadline needs them
    # (the fewest that meet it) or the order is by time (the fastest); only instance types
    # with a known network between them are pooled.
    nodes = 1
    plan: MemoryEstimate | None = None
    if ctx.shape is not None:
        plan = memory_plan(ctx, count, usable)
        if plan is None:
            need = min_gpus_zero3(ctx, usable)
            if need is None:
                act = train_memory(ctx, 3, 1, checkpoint_modes(ctx)[-1]).activations_bytes
                return "memory", lambda _it: (f"activations alone need {gb(act)} per GPU; has "
                                              f"{count} × {mem_label}")
            nodes = math.ceil(need / count)
            if nodes > ass.max_nodes:
                return "memory", lambda _it: (f"needs {need} × {mem_label} with ZeRO-3, more than "
                                              f"{ass.max_nodes} nodes; has {count} × {mem_label}")
    gbps = net.gbps if net else (ass.pooled_network_gbps if ass.allow_pooling else None)
    if nodes > 1 and gbps is None:
        n_mem = nodes
        return "network", lambda it: (f"needs {n_mem} nodes for memory, but {it} "
                                      "has no known network between instances (not pooled for "
                                      "one job; --allow-pooling allows it)")
    intra = 1.0 if predicted else intra_efficiency(spec, count, ass)

    def plan_for(n: int) -> MemoryEstimate | None:
        if ctx.shape is None:
            return None
        return memory_plan(ctx, n * count, usable) or plan

    measured = ctx.allreduce if ctx.allreduce is not None and ctx.allreduce.applies_to(
        offer.gpu_model, count) else None

    def eff(n: int, p: MemoryEstimate | None) -> float:
        if n <= 1:
            return 1.0
        if isinstance(t, PredictedTask) and t.grad_buckets and gbps is not None:
            # The recorded step's gradient buckets against its backward pass (predict's DDP
            # model), over the offer's network.
            from .measured import predicted_exposed_s

            step = t.samples_per_step / per_gpu
            exposed = predicted_exposed_s(t.grad_buckets, step * t.backward_share,
                                          n * count, gbps, measured)
            return step / (step + exposed)
        if p is None or gbps is None:  # a benchmarked workload: no model to size the step
            return ass.inter_node_efficiency
        factor = ctx.memo["flops_factor"] * recompute_factor(ctx, p)
        full_grads = p.gradients_bytes * (p.gpus if p.sharding in ("zero-2", "zero-3") else 1)
        volume = 1.5 if p.sharding == "zero-3" else 1.0
        return cross_node_efficiency(
            nodes=n, gpus_per_node=count, flops_per_token=factor * ctx.shape.params,
            gpu_flops=per_gpu * unit_scale * intra, grad_bytes=full_grads,
            volume_factor=volume, network_gbps=gbps,
            batch_tokens=ass.global_batch_tokens, overlap=ass.comm_overlap,
            comm_s=None if measured is None else
            measured.seconds(full_grads, n * count) * volume)

    def at(n: int) -> tuple[float, float, MemoryEstimate | None, float]:
        """(hours, rate, plan, cross-node efficiency) on n nodes."""
        key = ("at", offer.gpu_model, count, usable, gbps, n)
        if key not in ctx.memo:
            p = plan_for(n)
            e = eff(n, p)
            r = per_gpu * n * count * intra * e
            work = ctx.flops * recompute_factor(ctx, p)
            ctx.memo[key] = (work / (r * unit_scale) / 3600, r, p, e)
        return ctx.memo[key]  # type: ignore[no-any-return]

    hours, _, _, _ = at(nodes)
    deadline = ctx.cons.deadline_hours
    top = ass.max_nodes if gbps is not None else 1
    if ctx.cons.sort == "time" and top > nodes:
        # The fastest, among node counts that keep at least MIN_POOL_EFFICIENCY of each GPU.
        usable_n = [n for n in range(nodes, top + 1) if n == nodes
                    or at(n)[3] >= MIN_POOL_EFFICIENCY]
        nodes = min(usable_n, key=lambda n: (round(at(n)[0], 9), n))
    if deadline is not None and at(nodes)[0] > deadline:
        meets = next((n for n in range(nodes, top + 1) if at(n)[0] <= deadline), None)
        if meets is None:
            h1, n1 = hours, nodes
            where = "one node" if n1 == 1 else f"the {n1} nodes memory needs"
            best = min(range(nodes, top + 1), key=lambda n: at(n)[0])
            hb = at(best)[0]
            pooled = gbps is not None

            def why(it: str) -> str:
                return (f"{hb:,.0f} h at best on {best} nodes (up to {ass.max_nodes})" if pooled
                        else f"{it} is not pooled (no known network between instances; "
                        "--allow-pooling allows it)")

            return "deadline", lambda it: (f"{h1:,.0f} h on {where}; {why(it)}; deadline "
                                           f"{deadline:g} h")
        nodes = meets
    hours, rate, plan, cross = at(nodes)
    basis = None
    if nodes > 1:
        if isinstance(t, PredictedTask) and t.grad_buckets:
            over = (f"at {measured.label(sum(b for b, _ in t.grad_buckets))}"
                    if measured is not None else "at the node's network")
            basis = (f"the recorded step's {len(t.grad_buckets)} gradient bucket(s) "
                     f"all-reduced against its backward pass (predict's DDP model) {over}")
        elif measured is not None and plan is not None:
            full = plan.gradients_bytes * (plan.gpus if plan.sharding in ("zero-2", "zero-3")
                                           else 1)
            basis = measured.label(full)
    return Hardware(spec, mem_label, usable, nodes, hours, rate, plan, measured_rate,
                    {"mem_bytes": mem_bytes, "cross_node": cross, "network": net,
                     "pooled_gbps": gbps, "cross_basis": basis})


def scale_figures(scale_by: str, spec: GpuSpec, base: GpuSpec
                   ) -> tuple[float | None, float | None]:
    if scale_by == "bandwidth":
        return spec.memory_bandwidth_gbps, base.memory_bandwidth_gbps
    return spec.peak(scale_by), base.peak(scale_by)


# --- serve -----------------------------------------------------------------------------------


def serve_hw(offer: Offer, ctx: Context) -> Hardware | Reject:
    """One replica = one instance, tensor parallel over its GPUs, serving with continuous
    batching (`serving`): the batch that gives the highest request rate within the TPOT and
    TTFT bounds and memory; replicas for the QPS."""
    from .serving import ServeModel

    t = ctx.task
    assert isinstance(t, ServeTask) and ctx.shape is not None
    ass = ctx.ass
    spec = spec_of(offer, ctx, t.dtype)
    if isinstance(spec, tuple):
        return spec
    mem_bytes, mem_label = gpu_memory(offer, spec)
    count = offer.gpu_count
    usable = count * mem_bytes * (1 - ass.memory_margin)
    weights, kv_token, pf_flops, dec_flops = ctx.memo["serve"]
    eff = intra_efficiency(spec, count, ass)
    peak = spec.peak(t.dtype)
    assert peak is not None
    model = ServeModel(
        weights_bytes=weights, kv_bytes_per_token=kv_token, prompt_tokens=t.prompt,
        output_tokens=t.output_tokens, prefill_flops=pf_flops, decode_flops=dec_flops,
        compute_flops=count * peak * 1e12 * ass.mfu * eff,
        bandwidth=count * spec.memory_bandwidth_gbps * 1e9 * ass.bandwidth_efficiency * eff,
        memory_bytes=usable)
    context = t.prompt + t.output_tokens
    if model.max_batch < 1:
        kv_seq = kv_token * context
        return "memory", lambda _it: (f"weights {gb(weights)} + one sequence's KV cache "
                                      f"{gb(kv_seq)} need {gb(weights + kv_seq)}; has {count} × "
                                      f"{mem_label} ({gb(usable)} usable)")
    tpot, ttft = t.latency_ms / 1000, None if t.ttft_ms is None else t.ttft_ms / 1000
    r = model.best(tpot, ttft)
    if r is None:
        floor = weights / model.bandwidth
        step1 = model.step(1)[0]
        if floor >= tpot:
            return "latency", lambda _it: (f"reading the weights takes {floor * 1e3:.3g} ms per "
                                           f"token on {count} × {spec.name}; TPOT bound "
                                           f"{t.latency_ms:g} ms")
        if step1 >= tpot:  # the weights and one sequence's KV cache, read once per token
            return "latency", lambda _it: (f"a decode step takes {step1 * 1e3:.3g} ms even at "
                                           f"batch 1 on {count} × {spec.name}; TPOT bound "
                                           f"{t.latency_ms:g} ms")
        t_pf = model.prefill_s  # TPOT is met at batch 1: the TTFT bound is what fails
        return "latency", lambda _it: (f"one {t.prompt:,}-token prompt's prefill takes "
                                       f"{t_pf * 1e3:,.3g} ms and a decode step "
                                       f"{step1 * 1e3:.3g} ms on {count} × {spec.name}: the "
                                       f"first token comes after {(t_pf + 1.5 * step1) * 1e3:,.3g}"
                                       f" ms at least; TTFT bound {t.ttft_ms:g} ms")
    replicas = math.ceil(t.qps / r.qps - 1e-9)
    if replicas > ass.max_nodes:
        return "capacity", lambda _it: (f"needs {replicas} replicas for {t.qps:g} QPS "
                                        f"({r.qps:.3g} requests/s each), more than "
                                        f"{ass.max_nodes}")
    plan = ServingPlan(
        replicas=replicas, requests_per_s_per_replica=r.qps, batch=r.batch,
        prompt_tokens=t.prompt, output_tokens=t.output_tokens,
        prefill_flops_per_request=pf_flops, prefill_ms=r.prefill_s * 1e3,
        decode_step_ms=r.step_s * 1e3, decode_bound=r.step_bound, tpot_ms=r.tpot_s * 1e3,
        ttft_ms=r.ttft_s * 1e3, tpot_bound_ms=t.latency_ms, ttft_bound_ms=t.ttft_ms,
        limit=r.limit)
    share = r.qps * r.prefill_s
    notes = [
        f"prefill {r.prefill_s * 1e3:,.3g} ms per {t.prompt:,}-token prompt "
        f"({pf_flops:.3g} FLOPs, compute-bound): {share:.0%} of each replica's time at its "
        "rate",
        f"decode batch {r.batch}: {r.step_s * 1e3:.3g} ms per step ({r.step_bound}-bound); "
        f"TPOT {r.tpot_s * 1e3:.3g} ms (bound {t.latency_ms:g}), TTFT {r.ttft_s * 1e3:,.3g} "
        "ms" + (f" (bound {t.ttft_ms:g})" if t.ttft_ms is not None else "") + " (means)",
        f"{r.qps:.3g} requests/s per replica (limited by {r.limit}); {replicas} replica(s) "
        f"for {t.qps:g} QPS",
    ]
    memory = (weights + r.batch * kv_token * context) / count
    return Hardware(spec, mem_label, usable / count, replicas, t.hours,
                    replicas * r.qps * t.output_tokens,
                    extra={"memory": memory, "notes": notes, "serving": plan})
