"""Attention's ideal time, as fused (flash-style) kernels spend it: the T×S scores never
reach memory, so the time is the matmuls the kernels really do, the softmax's exponentials
on the SFUs (not on the tensor cores), and the class's memory traffic, one after another.

- Causal masks: FlopCounterMode (and so the recorded FLOPs) counts the full T×S product;
  the kernels skip the key tiles above the diagonal. With S = T and n query tiles of
  CAUSAL_TILE rows, tile i computes i + 1 key tiles: (n + 1) ÷ 2n of the work.
- Exponentials: one per computed score in the forward, one more in the backward (it
  recomputes P = exp(S − LSE)). At head size 64 a score costs 4·64 matmul FLOPs forward,
  which the H200's tensor cores do about as fast as its SFUs do the exponential
  (FlashAttention-3, Shah et al., 2024): the softmax is not negligible there.

On one H200 (2026-12-01, docs/predict.md) this ideal ÷ the recorded attention time was
74 % for gpt-124m in fp32 (memory-efficient kernels on CUDA cores), 77 % in bf16 (cuDNN)
and 82 % for gpt-1.3b in bf16: a share that carries across precision and size. The counted
FLOPs at the matmul rate alone gave 119 %, 73 % and 106 %: no bound, and no carrying.
"""

from __future__ import annotations

import math

from .hardware import Roofs
from .profile import OpWork

CAUSAL_TILE = 128  # query rows (and key columns) per tile of the fused kernels
BACKWARD_FLOP_FACTOR = 2.5  # FlopCounterMode: an SDPA backward counts 2.5 × its forward
EXPS_PER_SCORE = 2  # forward, and the backward's recomputation


def causal_share(t: int, s: int, causal: bool) -> float:
    """Share of the T×S scores a causal kernel computes (1 when not causal)."""
    if not causal:
        return 1.0
    n = max(1, math.ceil(min(t, s) / CAUSAL_TILE))
    return (n + 1) / (2 * n)


def parts(work: OpWork) -> tuple[float, float]:
    """(matmul FLOPs really done, exponentials) of an attention class per step, from its
    recorded forward shapes; FLOPs of calls without a recorded shape count in full."""
    forward = sum(f for _, _, f in work.attention)
    total = work.flops
    done, exps = 0.0, 0.0
    for (b, h, t, s, _q, causal), count, f in work.attention:
        share = causal_share(int(t), int(s), bool(causal))
        done += total * (f / forward) * share if forward else 0.0
        exps += EXPS_PER_SCORE * count * b * h * t * s * share
    if not work.attention:
        done = total
    return done, exps


def attention_seconds(work: OpWork, roofs: Roofs, matmul_tflops: float) -> float:
    """Matmuls at `matmul_tflops`, exponentials at the SFU rate, traffic at the memory rate."""
    flops, exps = parts(work)
    t = flops / (matmul_tflops * 1e12) + work.bytes / (roofs.memory_gbps * 1e9)
    rate = roofs.exp_per_s
    return t + (exps / rate if rate else 0.0)


def fused_seconds(calls: dict[tuple[int, int, int, int, bool], int], flops: float,
                  moved: float, roofs: Roofs, matmul_tflops: float) -> float:
    """A fused attention group's ideal time (`attention_seconds`) from its calls' shapes
    (`Counted.attention`: (batch × heads, T, S, Q, causal) → calls, each taken as one head
    of that batch), its FLOPs and its traffic."""
    shapes = tuple(((bh, 1, t, s, q, causal), float(n), 4.0 * n * bh * t * s * q)
                   for (bh, t, s, q, causal), n in calls.items())
    work = OpWork(cls="attention", ms=0.0, flops=flops, bytes=moved, attention=shapes)
    return attention_seconds(work, roofs, matmul_tflops)


def fused_traffic(calls: dict[tuple[int, int, int, int, bool], int]) -> float:
    """What a fused kernel's traffic follows: its queries', keys', values' and outputs'
    elements (and their gradients'), (T + S) · Q per head; the T×S scores never leave it."""
    return float(sum(n * bh * (t + s) * q for (bh, t, s, q, _), n in calls.items()))

