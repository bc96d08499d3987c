"""Gradient accumulation over 8 micro-batches, reading the loss with .item() after each one
to keep running statistics on the host."""
import argparse
import math
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=float, default=12)
p.add_argument("--accum", type=int, default=8)
args = p.parse_args()
gpu = args.device.startswith("cuda")
width, batch = (2048, 2048) if gpu else (256, 64)
model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.GELU())
                        for _ in range(6)], nn.Linear(width, 1)).to(args.device)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(batch, width, device=args.device)
y = torch.randn(batch, 1, device=args.device)
history = []


def update_stats(value):
    """Running mean, variance and an exponential moving average kept in Python."""
    history.append(value)
    window = history[-200:]
    mean = sum(window) / len(window)
    var = sum((v - mean) ** 2 for v in window) / len(window)
    return mean, math.sqrt(var)


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
print(f"done: {step} steps")
