"""A deep, narrow MLP (64 layers of width 256) trained eagerly with a small batch."""
import argparse
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=float, default=12)
args = p.parse_args()
layers = []
for _ in range(64):
    layers += [nn.Linear(256, 256), nn.LayerNorm(256), nn.ReLU()]
model = nn.Sequential(*layers, nn.Linear(256, 10)).to(args.device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(32, 256, device=args.device)
y = torch.randint(0, 10, (32,), device=args.device)
start, step = time.time(), 0
while time.time() - start < args.max_seconds:
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
print(f"done: {step} steps")
