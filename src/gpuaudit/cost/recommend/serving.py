"""Serving one replica: prefill and decode with continuous batching, against a time-to-first-
token (TTFT) and a time-per-output-token (TPOT) bound, in the terms vLLM and MLPerf Inference
use.

The replica (one instance, tensor parallel over its GPUs) runs iterations. Each iteration
decodes one token for every sequence in the batch — a decode step, memory-bound at small
batches (the weights and the batch's KV cache are read once) and compute-bound at large ones
(2·N FLOPs per token, plus attention over the context) — and prefills the prompts that arrived
during the previous iteration, compute-bound (2·N·P + 2·L·h·P² FLOPs for a P-token prompt:
the matmuls and causal attention). So with requests arriving at q per second:

    t_pf      = max(prefill FLOPs / compute, weights / bandwidth)   one prompt's prefill
    step(B)   = max((W + B·kv_avg) / bandwidth, B·decode FLOPs / compute)
    T_it      = step(B) / (1 − q·t_pf)        an iteration: the step plus its share of prefill
    TPOT      = T_it                          each sequence gets one token per iteration
    TTFT      = T_it / 2 + t_pf + step(B)     half an iteration's wait, then the iteration
                                              that carries the prompt's prefill (a mean)
    B         ≥ q · O · T_it                  Little's law: sequences decoding at once

so q ≤ B / (O·step(B) + B·t_pf); the TPOT bound gives q ≤ (1 − step/TPOT)/t_pf, the TTFT
bound q ≤ (1 − step/(2(TTFT − t_pf − step)))/t_pf; the KV cache of B sequences at their full
context must fit beside the weights. The replica's rate is the best q over B. Everything is a
mean; the bounds of MLPerf and most SLOs are p99, so keep a margin.
"""

from __future__ import annotations

import math
from dataclasses import replace

from gpuaudit.model.lite import Lite, frozen


@frozen
class Replica(Lite):
    """What one replica sustains, and at which batch."""

    qps: float  # requests per second at the bounds
    batch: int  # sequences decoding at once
    prefill_s: float  # one prompt's prefill, alone
    step_s: float  # one decode step at the batch
    tpot_s: float  # at qps
    ttft_s: float  # at qps (mean)
    step_bound: str  # "memory-bandwidth" or "compute"
    limit: str  # what stops a higher rate: "throughput", "TPOT", "TTFT", "memory"


@frozen
class ServeModel(Lite):
    """One replica's hardware and one request's work."""

    weights_bytes: float
    kv_bytes_per_token: float
    prompt_tokens: int
    output_tokens: int
    prefill_flops: float  # per request
    decode_flops: float  # per generated token, at the mean context
    compute_flops: float  # achieved FLOP/s of the replica
    bandwidth: float  # achieved B/s of the replica
    memory_bytes: float  # usable, all GPUs of the replica

    @property
    def prefill_s(self) -> float:
        return max(self.prefill_flops / self.compute_flops,
                   self.weights_bytes / self.bandwidth)

    @property
    def max_batch(self) -> int:
        room = self.memory_bytes - self.weights_bytes
        full = self.kv_bytes_per_token * (self.prompt_tokens + self.output_tokens)
        return max(0, math.floor(room / full))

    def step(self, batch: int) -> tuple[float, str]:
        mean_context = self.prompt_tokens + self.output_tokens / 2
        mem = (self.weights_bytes + batch * self.kv_bytes_per_token * mean_context
               ) / self.bandwidth
        comp = batch * self.decode_flops / self.compute_flops
        return (mem, "memory-bandwidth") if mem >= comp else (comp, "compute")

    def rate(self, batch: int, tpot_s: float, ttft_s: float | None
             ) -> tuple[float, str, float, str] | None:
        """(the highest rate at this batch within the bounds, what limits it, the decode
        step, what bounds the step); None when no rate is within them."""
        step, bound = self.step(batch)
        t_pf = self.prefill_s
        if step >= tpot_s:
            return None
        limits = {"throughput": batch / (self.output_tokens * step + batch * t_pf),
                  "TPOT": (1 - step / tpot_s) / t_pf}
        if ttft_s is not None:
            room = ttft_s - t_pf - step
            if room <= step / 2:
                return None
            limits["TTFT"] = (1 - step / (2 * room)) / t_pf
        limit = min(limits, key=lambda k: limits[k])
        q = limits[limit]
        if q <= 0:
            return None
        return q, limit, step, bound

    def at(self, batch: int, tpot_s: float, ttft_s: float | None) -> Replica | None:
        """The highest rate at this batch within the bounds; None when none is."""
        found = self.rate(batch, tpot_s, ttft_s)
        if found is None:
            return None
        q, limit, step, bound = found
        t_pf = self.prefill_s
        t_it = step / (1 - q * t_pf)
        return Replica(q, batch, t_pf, step, t_it, t_it / 2 + t_pf + step, bound, limit)

    def best(self, tpot_s: float, ttft_s: float | None) -> Replica | None:
        """The batch with the highest rate (a geometric sweep, then its neighbours). The
        batches tried are compared by rate alone; the record is made for the best."""
        top = self.max_batch
        if top < 1:
            return None
        grid = sorted({min(top, max(1, round(1.15 ** i))) for i in range(200)
                       if 1.15 ** i <= top * 1.15} | {top})
        best_q, best_b = 0.0, 0
        for b in grid:
            r = self.rate(b, tpot_s, ttft_s)
            if r is not None and (best_b == 0 or r[0] > best_q):
                best_q, best_b = r[0], b
        if best_b == 0:
            return None
        lo, hi = max(1, int(best_b / 1.15)), min(top, int(best_b * 1.15) + 1)
        for b in range(lo, hi + 1):
            r = self.rate(b, tpot_s, ttft_s)
            if r is not None and r[0] > best_q:
                best_q, best_b = r[0], b
        best = self.at(best_b, tpot_s, ttft_s)
        assert best is not None
        if best.batch == top and best.limit == "throughput":
            best = replace(best, limit="memory")
        return best


def prefill_flops(params: float, layers: int, hidden: int, prompt: int) -> float:
    """2·N per prompt token for the matmuls, plus causal attention: QKᵀ and AV over the
    prompt, P²·h multiply-adds each per layer, halved by the causal mask: 2·L·h·P²."""
    return 2 * params * prompt + 2 * layers * hidden * prompt ** 2


def decode_flops(params: float, layers: int, hidden: int, context: float) -> float:
    """2·N per generated token, plus attention over the context: 4·L·h·c."""
    return 2 * params + 4 * layers * hidden * context
