"""A metric-learning loss written as a Python loop over the samples of the batch (small
tensor operations for each one)."""
import argparse
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=float, default=12)
args = p.parse_args()
encoder = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 128)).to(args.device)
opt = torch.optim.Adam(encoder.parameters(), lr=1e-3)
anchors = torch.randn(128, 512, device=args.device)
positives = anchors + 0.1 * torch.randn_like(anchors)
negatives = torch.randn(128, 512, device=args.device)


def triplet_loss(a, p, n, margin=0.2):
    total = 0.0
    for i in range(a.shape[0]):
        d_pos = (a[i] - p[i]).pow(2).sum().sqrt()
        d_neg = (a[i] - n[i]).pow(2).sum().sqrt()
        total = total + torch.clamp(d_pos - d_neg + margin, min=0)
    return total / a.shape[0]


start, step = time.time(), 0
while time.time() - start < args.max_seconds:
    loss = triplet_loss(encoder(anchors), encoder(positives), encoder(negatives))
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
print(f"done: {step} steps")
