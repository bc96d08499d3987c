"""Inference that copies every batch's full output (512 MiB of logits) back into a
preallocated host tensor for later analysis."""
import argparse
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=float, default=12)
args = p.parse_args()
gpu = args.device.startswith("cuda")
rows, vocab = (4096, 32768) if gpu else (64, 1024)  # 4096 × 32768 fp32 = 512 MiB
model = nn.Linear(1024, vocab).to(args.device).eval()
host_logits = torch.empty(rows, vocab)  # plain (pageable) host memory
x = torch.randn(rows, 1024, device=args.device)
start, step = time.time(), 0
with torch.no_grad():
    while time.time() - start < args.max_seconds:
        out = model(x)
        host_logits.copy_(out)
        step += 1
print(f"done: {step} batches, checksum {float(host_logits[0, 0]):.3f}")
