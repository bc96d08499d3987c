"""A small CNN trained with a batch of 8 small images (the default someone never changed)."""
import argparse
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--batch-size", type=int, default=8)
p.add_argument("--max-seconds", type=float, default=12)
args = p.parse_args()


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())


model = nn.Sequential(block(3, 32), block(32, 64), nn.MaxPool2d(2), block(64, 128),
                      nn.MaxPool2d(2), block(128, 128), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Linear(128, 10)).to(args.device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(args.batch_size, 3, 64, 64, device=args.device)
y = torch.randint(0, 10, (args.batch_size,), device=args.device)
start, step = time.time(), 0
while time.time() - start < args.max_seconds:
    with torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16,
                        enabled=args.device.startswith("cuda")):
        loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
print(f"done: {step} steps")
