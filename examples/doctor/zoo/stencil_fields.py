"""A finite-difference diffusion solver on large 3-D fp32 fields (a physics code)."""
import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=float, default=12)
args = p.parse_args()
n = 800 if args.device.startswith("cuda") else 64  # 800³ fp32 = 2 GiB a field
u = torch.rand(n, n, n, device=args.device)
nxt = torch.empty_like(u)
alpha, start, step = 0.1, time.time(), 0
while time.time() - start < args.max_seconds:
    lap = (u[2:, 1:-1, 1:-1] + u[:-2, 1:-1, 1:-1] + u[1:-1, 2:, 1:-1] + u[1:-1, :-2, 1:-1]
           + u[1:-1, 1:-1, 2:] + u[1:-1, 1:-1, :-2] - 6 * u[1:-1, 1:-1, 1:-1])
    nxt[1:-1, 1:-1, 1:-1] = u[1:-1, 1:-1, 1:-1] + alpha * lap
    u, nxt = nxt, u
    step += 1
    if step % 20 == 0:
        torch.cuda.synchronize() if args.device.startswith("cuda") else None
print(f"done: {step} steps, mean {u.mean().item():.4f}")
