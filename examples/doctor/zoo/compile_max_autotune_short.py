"""A short run of a compiled model with mode="max-autotune" (the run is given 20 seconds)."""
import argparse
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=float, default=20)
args = p.parse_args()
d = 1024
model = nn.Sequential(*[nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d),
                                      nn.LayerNorm(d)) for _ in range(8)]).to(args.device)
model = torch.compile(model, mode="max-autotune")
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(64, 256, d, device=args.device)
start, step = time.time(), 0
while time.time() - start < args.max_seconds:
    with torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16,
                        enabled=args.device.startswith("cuda")):
        loss = model(x).float().square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
print(f"done: {step} steps")
