"""A regression model whose batches are built with numpy on the main thread (feature
engineering per batch), then copied to the GPU."""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=float, default=12)
args = p.parse_args()
rng = np.random.default_rng(0)


def make_batch(n=1024, features=4096):
    raw = rng.standard_normal((n, features)).astype(np.float32)
    smooth = np.cumsum(raw, axis=1) / np.arange(1, features + 1, dtype=np.float32)
    feats = np.concatenate([np.sort(smooth, axis=1)[:, ::4], np.tanh(raw[:, ::4])], axis=1)
    target = feats.mean(axis=1, keepdims=True)
    return torch.from_numpy(feats), torch.from_numpy(target)


model = nn.Sequential(nn.Linear(2048, 4096), nn.GELU(), nn.Linear(4096, 4096), nn.GELU(),
                      nn.Linear(4096, 1)).to(args.device)
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
start, step = time.time(), 0
while time.time() - start < args.max_seconds:
    x, y = make_batch()
    x, y = x.to(args.device), y.to(args.device)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
print(f"done: {step} steps, loss {loss.item():.4f}")
