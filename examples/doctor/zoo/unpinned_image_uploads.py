"""A segmentation model fed with batches of images kept in ordinary CPU tensors and moved to
the GPU with .to('cuda') each step."""
import argparse
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=float, default=12)
args = p.parse_args()
gpu = args.device.startswith("cuda")
batch, side = (64, 512) if gpu else (2, 64)
images = [torch.rand(batch, 3, side, side) for _ in range(4)]  # 64×3×512×512 fp32: 192 MiB each
masks = [torch.randint(0, 2, (batch, 1, side, side)).float() for _ in range(4)]
model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 1, 3, padding=1)
                      ).to(args.device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
start, step = time.time(), 0
while time.time() - start < args.max_seconds:
    x, y = images[step % 4].to(args.device), masks[step % 4].to(args.device)
    with torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16, enabled=gpu):
        loss = nn.functional.binary_cross_entropy_with_logits(model(x).float(), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
print(f"done: {step} steps")
