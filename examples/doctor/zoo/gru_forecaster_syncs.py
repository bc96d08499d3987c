"""A GRU forecaster that, every step, synchronizes to time itself and reads its error metric
with .item() for an early-stopping check."""
import argparse
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=float, default=12)
args = p.parse_args()
gpu = args.device.startswith("cuda")
hidden, batch, seq = (1024, 256, 128) if gpu else (64, 16, 16)


class Forecaster(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(32, hidden, num_layers=2, batch_first=True)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x):
        y, _ = self.gru(x)
        return self.out(y[:, -1])


model = Forecaster().to(args.device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
series = torch.randn(batch, seq, 32, device=args.device)
target = torch.randn(batch, 1, device=args.device)
best, patience, start, step = float("inf"), 0, time.time(), 0
while time.time() - start < args.max_seconds:
    t0 = time.perf_counter()
    pred = model(series)
    loss = nn.functional.mse_loss(pred, target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if gpu:
        torch.cuda.synchronize()
    step_ms = (time.perf_counter() - t0) * 1000
    mae = (pred - target).abs().mean().item()
    if mae < best - 1e-4:
        best, patience = mae, 0
    else:
        patience += 1
    step += 1
print(f"done: {step} steps, last step {step_ms:.1f} ms, best mae {best:.4f}")
