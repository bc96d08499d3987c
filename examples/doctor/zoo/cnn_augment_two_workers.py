"""A CNN trained on images augmented on the CPU (random resized crops, flips and colour
jitter with PIL) by two DataLoader workers."""
import argparse
import io
import time

import numpy as np
import torch
import torch.nn as nn
from PIL import Image, ImageEnhance
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=float, default=12)
args = p.parse_args()


class Photos(Dataset):
    def __init__(self):
        rng = np.random.default_rng(1)
        self.raw = []
        for _ in range(32):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (600, 800, 3), dtype=np.uint8)).save(buf, "PNG")
            self.raw.append(buf.getvalue())

    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        img = Image.open(io.BytesIO(self.raw[i % len(self.raw)])).convert("RGB")
        w, h = img.size
        s = int(rng.uniform(0.3, 1.0) * min(w, h))
        x0, y0 = rng.integers(0, w - s + 1), rng.integers(0, h - s + 1)
        img = img.crop((x0, y0, x0 + s, y0 + s)).resize((224, 224), Image.BICUBIC)
        if rng.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        img = ImageEnhance.Color(img).enhance(rng.uniform(0.6, 1.4))
        img = ImageEnhance.Contrast(img).enhance(rng.uniform(0.6, 1.4))
        arr = np.asarray(img, dtype=np.float32) / 255.0
        return torch.from_numpy(arr).permute(2, 0, 1), int(rng.integers(0, 100))


model = nn.Sequential(nn.Conv2d(3, 64, 3, 2, 1), nn.ReLU(), nn.Conv2d(64, 128, 3, 2, 1),
                      nn.ReLU(), nn.Conv2d(128, 256, 3, 2, 1), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 100)).to(args.device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
loader = DataLoader(Photos(), batch_size=64, num_workers=2, pin_memory=True, shuffle=True)
start = time.time()
for step, (x, y) in enumerate(loader):  # noqa: B007
    x, y = x.to(args.device, non_blocking=True), y.to(args.device, non_blocking=True)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if time.time() - start > args.max_seconds:
        break
print(f"done: {step + 1} steps")
