"""Multi-scale training of a CNN with torch.backends.cudnn.benchmark on: every batch comes at
a random resolution."""
import argparse
import random
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=float, default=12)
args = p.parse_args()
torch.backends.cudnn.benchmark = True
model = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3), nn.BatchNorm2d(64), nn.ReLU(),
                      nn.Conv2d(64, 128, 3, 2, 1), nn.BatchNorm2d(128), nn.ReLU(),
                      nn.Conv2d(128, 256, 3, 2, 1), nn.BatchNorm2d(256), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 100)
                      ).to(args.device).to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
random.seed(0)
start, step = time.time(), 0
while time.time() - start < args.max_seconds:
    side = random.randrange(128, 640, 4)
    x = torch.randn(32, 3, side, side, device=args.device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 100, (32,), device=args.device)
    with torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16,
                        enabled=args.device.startswith("cuda")):
        loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
print(f"done: {step} steps")
