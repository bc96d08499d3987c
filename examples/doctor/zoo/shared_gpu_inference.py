"""A bf16 inference service loop (an encoder scoring batches of requests)."""
import argparse
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=float, default=12)
args = p.parse_args()
gpu = args.device.startswith("cuda")
d = 1024 if gpu else 64
layer = nn.TransformerEncoderLayer(d, 16 if gpu else 4, 4 * d, batch_first=True)
model = nn.TransformerEncoder(layer, 12 if gpu else 1).to(args.device).eval()
requests = torch.randn(64, 512 if gpu else 16, d, device=args.device)
start, served = time.time(), 0
with torch.inference_mode(), torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16,
                                            enabled=gpu):
    while time.time() - start < args.max_seconds:
        scores = model(requests).mean(-1)
        served += len(scores)
print(f"done: {served} requests")
