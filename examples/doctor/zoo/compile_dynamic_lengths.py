"""A compiled Transformer fed batches of a different sequence length every step (no padding
to fixed buckets)."""
import argparse
import random
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=float, default=25)
args = p.parse_args()
d = 256
layer = nn.TransformerEncoderLayer(d, 4, 4 * d, batch_first=True)
model = nn.Sequential(nn.TransformerEncoder(layer, 2), nn.Linear(d, 1)).to(args.device)
model = torch.compile(model, dynamic=False)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
random.seed(0)
start, step = time.time(), 0
while time.time() - start < args.max_seconds:
    seq = random.randrange(16, 512)
    x = torch.randn(16, seq, d, device=args.device)
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
print(f"done: {step} steps")
