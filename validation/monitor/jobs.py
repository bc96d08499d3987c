"""GPU jobs for the sampler's soak and crash reproductions: run one until killed.

    python3 validation/monitor/jobs.py lm    # GPT ~124M, bf16 autocast, fused AdamW, forever
    python3 validation/monitor/jobs.py oom   # the same model, then allocate until out of memory
    torchrun --nproc_per_node=2 validation/monitor/jobs.py ddp   # the LM under DDP, every GPU

The GPU is chosen with CUDA_VISIBLE_DEVICES; `ddp` takes its rank from torchrun's environment.
"""

from __future__ import annotations

import os
import sys


def _gpt():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    L, D, H, T, V = 12, 768, 12, 1024, 50304

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

        def forward(self, x):
            B = x.size(0)
            q, k, v = self.qkv(self.ln1(x)).split(D, 2)
            q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, D))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
            self.blocks = nn.Sequential(*[Block() for _ in range(L)])
            self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)
            self.head.weight = self.wte.weight

        def forward(self, idx, tgt):
            x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
            logits = self.head(self.ln(self.blocks(x)))
            return F.cross_entropy(logits.view(-1, V), tgt.view(-1))

    return GPT, V, T


def main() -> None:
    import torch

    kind = sys.argv[1]
    if kind == "ddp":
        import torch.distributed as dist

        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    GPT, V, T = _gpt()
    model = GPT().cuda()
    if kind == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[torch.cuda.current_device()])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    x = torch.randint(0, V, (16, T), device="cuda")
    hog = []
    step = 0
    while True:
        with torch.autocast("cuda", torch.bfloat16):
            loss = model(x, x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if kind == "oom" and step > 20:
            hog.append(torch.empty(8 << 30, dtype=torch.uint8, device="cuda"))  # until OOM


if __name__ == "__main__":
    main()
