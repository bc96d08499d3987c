"""A model trained with a cache of activations kept on the GPU that grew to fill it."""
import argparse
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=float, default=12)
args = p.parse_args()
gpu = args.device.startswith("cuda")
model = nn.Sequential(nn.Linear(4096, 4096), nn.GELU(), nn.Linear(4096, 4096)).to(args.device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(4096, 4096, device=args.device)
cache = []
if gpu:
    free, total = torch.cuda.mem_get_info()
    while free > 0.01 * total + (3 << 30):  # keep 1 % and the step's working set free
        cache.append(torch.empty(1 << 28, dtype=torch.uint8, device=args.device))
        free, total = torch.cuda.mem_get_info()
start, step = time.time(), 0
while time.time() - start < args.max_seconds:
    with torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16, enabled=gpu):
        loss = model(x).float().square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
print(f"done: {step} steps, {len(cache)} cached blocks")
