"""Gradient accumulation over 8 micro-batches, reading each micro-batch's loss with .item()
to keep running statistics (mean, spread, percentiles of the last 2000) on the host."""
import argparse
import statistics
import time
from collections import deque

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=float, default=12)
p.add_argument("--accum", type=int, default=8)
args = p.parse_args()
gpu = args.device.startswith("cuda")
width, batch = (4096, 4096) if gpu else (256, 64)
model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.GELU())
                        for _ in range(6)], nn.Linear(width, 1)).to(args.device)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(batch, width, device=args.device)
y = torch.randn(batch, 1, device=args.device)
recent = deque(maxlen=2000)
stats = {}


def update_stats(value):
    recent.append(value)
    stats["mean"] = statistics.fmean(recent)
    stats["std"] = statistics.pstdev(recent)
    if len(recent) >= 20:
        stats["p5"], *_, stats["p95"] = statistics.quantiles(recent, n=20)


start, step = time.time(), 0
while time.time() - start < args.max_seconds:
    for _ in range(args.accum):
        with torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16, enabled=gpu):
            loss = nn.functional.mse_loss(model(x).float(), y) / args.accum
        loss.backward()
        update_stats(loss.item())
    opt.step()
    opt.zero_grad(set_to_none=True)
    step += 1
print(f"done: {step} steps, loss mean {stats['mean']:.4f}")
