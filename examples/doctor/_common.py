"""Shared by the known-answer workloads of `gpuaudit doctor` (see README.md here): the
command line, a small GPT, and the loop that times steps and marks them for the doctor."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

import gpuaudit


def options(description: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seconds", type=float, default=20.0, help="how long to train")
    ap.add_argument("--watch", action="store_true",
                    help="diagnose in-process with `with gpuaudit.watch():`")
    return ap.parse_args()


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, 2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    """GPT-2 small's shape on a GPU (~124M parameters); a few layers on a CPU."""

    def __init__(self, layers: int = 12, d: int = 768, heads: int = 12, seq: int = 1024,
                 vocab: int = 50304) -> None:
        super().__init__()
        self.seq, self.vocab = seq, vocab
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        logits = self.head(self.ln(self.blocks(x)))
        return F.cross_entropy(logits.view(-1, self.vocab).float(), tgt.view(-1))


def amp(args: argparse.Namespace) -> Any:
    """bf16 autocast on a GPU (a no-op on a CPU): every workload but fp32_matmuls keeps its
    matmuls on the tensor cores, so that the planted bottleneck is the only one (on the H200
    the fp32 matmuls of the first versions came first in three of them)."""
    return torch.autocast("cuda", torch.bfloat16, enabled=args.device.startswith("cuda"))


def gpt_for(device: str) -> tuple[Gpt, int]:
    """The model and its batch size: the LM preset on a GPU, a small one on a CPU."""
    if device.startswith("cuda"):
        return Gpt(), 16
    return Gpt(layers=2, d=128, heads=4, seq=64, vocab=1024), 8


def train(name: str, args: argparse.Namespace, step_fn: Callable[[], Any],
          batches: Any = None) -> None:
    """Run `step_fn` (or `step_fn(batch)` over `batches`) for args.seconds, marking each step;
    print the median step time as a JSON line at the end."""
    times: list[float] = []
    ctx = gpuaudit.watch(profile_steps=5) if args.watch else _nothing()
    with ctx:
        end = time.monotonic() + args.seconds
        last = time.perf_counter()
        source = gpuaudit.loader(batches) if batches is not None else None
        while time.monotonic() < end:
            if source is not None:
                batch = next(source, None)
                if batch is None:
                    break
                step_fn(batch)
            else:
                step_fn()
            gpuaudit.step()
            now = time.perf_counter()
            times.append(now - last)
            last = now
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
    kept = times[len(times) // 5:] or times  # the first fifth is warm-up
    print(json.dumps({"workload": name, "device": args.device, "steps": len(times),
                      "median_step_s": statistics.median(kept) if kept else None}))
    sys.stdout.flush()


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
