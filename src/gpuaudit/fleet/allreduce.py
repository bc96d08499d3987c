"""All-reduce across nodes: every node starts one rank per GPU, as torchrun does, and they meet
at rank 0's host (rendezvous address and port found by a probe task on that node, handed to
the others by the driver through Ray).

The ranks are the collectives suite's own workers (`gpuaudit.bench.collectives_worker`), so
the timing, the result check and busbw follow nccl-tests exactly as on one node: busbw =
algbw × 2(n−1)/n with n the ranks on all nodes. NCCL where every node has CUDA devices, gloo
on nodes without (the CPU rehearsal: one rank per node).
"""

from __future__ import annotations

import os
import socket
from typing import Any

from gpuaudit.bench.collectives import (
    CPU_SIZES,
    GIB,
    MIB,
    Item,
    Workers,
    _measurement,
    plan,
    size_sweep,
)
from gpuaudit.bench.collectives_worker import DTYPES
from gpuaudit.bench.stats import skipped
from gpuaudit.model import Measurement

from .cluster import ClusterNode

SUITE = "fleet"
OP = "all_reduce"
DTYPE = "float32"
SWEEPS = {"quick": (MIB, 256 * MIB, 4), "standard": (8, 4 * GIB, 2)}


def probe() -> dict[str, Any]:
    """On a node: its address for the others, a free port there, how many CUDA devices."""
    import ray

    from gpuaudit.hw.torch_env import apply_safe_env, cuda_devices

    apply_safe_env()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        port = int(s.getsockname()[1])
    return {"ip": ray.util.get_node_ip_address(), "port": port, "cuda": len(cuda_devices())}


def node_ranks(config: dict[str, Any], master: tuple[str, int], world_size: int,
               first_rank: int, local_ranks: int, timeout_s: float) -> dict[str, Any]:
    """On a node: run its ranks to the end. The node holding rank 0 returns rank 0's reports
    ("events"); every node returns why its ranks failed ("failure"), or None."""
    extra = {}
    if config["backend"] == "gloo":
        extra["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")
    workers = Workers(config, local_ranks, timeout_s=timeout_s, extra_env=extra,
                      master=master, first_rank=first_rank, world_size=world_size)
    events: list[dict[str, Any]] = []
    try:
        if first_rank == 0:
            for event in workers.events():
                events.append(event)
                if event.get("event") == "done":
                    break
            failure = workers.failure
            complete = bool(events) and events[-1].get("event") == "done"
        else:
            failure = workers.wait()
            complete = failure is None
    finally:
        workers.close(grace_s=10.0 if complete else 0.0)
    return {"events": events, "failure": failure}


def _affinity(node: ClusterNode) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node.node_id, soft=False)


def _reason(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None) or exc
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[-1] if text else ''}".strip(": ")


def all_reduce_across(ray: Any, nodes: list[ClusterNode], *, profile: str = "quick",
                      timeout_s: float = 300.0, warmup: int | None = None,
                      iters: int | None = None) -> tuple[list[Measurement], str | None]:
    """all_reduce busbw over a size sweep across `nodes`: (figures, None), or ([], why not)."""
    if len(nodes) < 2:
        return [], "needs 2 or more nodes that finished their audit"
    remote_probe = ray.remote(probe)
    try:
        probes = ray.get([remote_probe.options(num_cpus=0, max_retries=0,
                                               scheduling_strategy=_affinity(n)).remote()
                          for n in nodes], timeout=min(timeout_s, 120.0))
    except Exception as exc:  # a node gone since its audit, a broken worker...
        return [], f"could not start on every node: {_reason(exc)}"
    cuda = [p["cuda"] for p in probes]
    if all(c > 0 for c in cuda):
        backend, local = "nccl", cuda
        lo, hi, factor = SWEEPS.get(profile, SWEEPS["quick"])
    elif not any(cuda):
        backend, local = "gloo", [1] * len(nodes)
        lo, hi, factor = CPU_SIZES
    else:
        return [], "some nodes have CUDA devices and some do not: no one backend for all"
    world = sum(local)
    items = plan([OP], size_sweep(lo, hi, factor), DTYPES[DTYPE], world)
    warmup = warmup if warmup is not None else (5 if backend == "nccl" else 2)
    iters = iters if iters is not None else (20 if backend == "nccl" else 10)
    config = {"backend": backend, "dtype": DTYPE, "warmup": warmup, "iters": iters,
              "items": [[it.op, it.count] for it in items],
              "cuda_indices": list(range(max(local))) if backend == "nccl" else None}
    master = (probes[0]["ip"], int(probes[0]["port"]))
    remote_ranks = ray.remote(node_ranks)
    refs, first = [], 0
    for node, n in zip(nodes, local, strict=True):
        refs.append(remote_ranks.options(
            num_cpus=0, num_gpus=node.gpus, max_retries=0,
            scheduling_strategy=_affinity(node)).remote(config, master, world, first, n,
                                                        timeout_s))
        first += n
    try:
        results = ray.get(refs, timeout=timeout_s + 60.0)
    except Exception as exc:
        for ref in refs:
            ray.cancel(ref, force=True)
        return [], f"the ranks failed: {_reason(exc)}"
    failures = [r["failure"] for r in results if r["failure"]]
    figures = _figures(items, results[0]["events"], world, len(nodes), warmup, backend)
    if not figures:
        return [], failures[0] if failures else "rank 0 reported nothing"
    return figures, None


def _figures(items: list[Item], events: list[dict[str, Any]], world: int, nodes: int,
             warmup: int, backend: str) -> list[Measurement]:
    out: list[Measurement] = []
    for event in events:
        if event.get("event") not in ("result", "skip"):
            continue
        it = items[int(event["i"])]
        params = {"op": it.op, "size_bytes": it.size_bytes, "dtype": DTYPE, "ranks": world,
                  "nodes": nodes, "backend": backend}
        if event["event"] == "skip":
            out.append(skipped(SUITE, f"{it.op}_busbw", "GB/s", str(event["reason"]),
                               params=params))
            continue
        m = _measurement(it, event, world, warmup, None, params)
        out.append(m.model_copy(update={"suite": SUITE}))
    done = [m for m in out if m.value is not None]
    if done:
        best = max(done, key=lambda m: m.value or 0.0)
        out.append(best.model_copy(update={
            "name": f"{OP}_busbw_peak", "params": {**best.params, "sizes_measured": len(done)}}))
    return out


__all__ = ["all_reduce_across", "node_ranks", "probe"]
