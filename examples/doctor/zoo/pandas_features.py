"""A tabular model whose features are computed per batch with pandas (rolling windows,
group statistics) in the training loop."""
import argparse
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=float, default=12)
args = p.parse_args()
rng = np.random.default_rng(0)
frame = pd.DataFrame({"user": rng.integers(0, 500, 200_000), "amount": rng.gamma(2, 30, 200_000),
                      "hour": rng.integers(0, 24, 200_000)})


def features(rows):
    df = frame.iloc[rows].copy()
    df["roll"] = df["amount"].rolling(16, min_periods=1).mean()
    df["user_mean"] = df.groupby("user")["amount"].transform("mean")
    df["user_std"] = df.groupby("user")["amount"].transform("std").fillna(0)
    df = pd.concat([df, pd.get_dummies(df["hour"], prefix="h", dtype=float)], axis=1)
    x = df.drop(columns=["user"]).to_numpy(dtype=np.float32)
    return torch.from_numpy(x), torch.from_numpy((df["amount"] > 60).to_numpy(np.float32))


model = nn.Sequential(nn.Linear(29, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                      nn.Linear(512, 1)).to(args.device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
start, step = time.time(), 0
while time.time() - start < args.max_seconds:
    rows = rng.integers(0, len(frame), 8192)
    x, y = features(rows)
    x, y = x.to(args.device), y.to(args.device)
    loss = nn.functional.binary_cross_entropy_with_logits(model(x).squeeze(1), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
print(f"done: {step} steps")
