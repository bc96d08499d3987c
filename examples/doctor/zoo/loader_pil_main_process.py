"""Image classification with a Dataset that decodes and resizes JPEGs with PIL in
__getitem__, and a DataLoader left at num_workers=0."""
import argparse
import io
import time

import numpy as np
import torch
import torch.nn as nn
from PIL import Image
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=float, default=12)
args = p.parse_args()


def jpeg(seed):
    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 255, (480, 640, 3), dtype=np.uint8))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


class JpegFolder(Dataset):
    def __init__(self, n=64):
        self.files = [jpeg(i) for i in range(n)]

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        img = Image.open(io.BytesIO(self.files[i % len(self.files)])).convert("RGB")
        img = img.resize((224, 224), Image.BILINEAR)
        x = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1)
        return x, i % 10


model = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                      nn.Flatten(), nn.Linear(64, 10)).to(args.device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loader = DataLoader(JpegFolder(), batch_size=32, shuffle=True)
start = time.time()
for step, (x, y) in enumerate(loader):  # noqa: B007
    x, y = x.to(args.device), y.to(args.device)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if time.time() - start > args.max_seconds:
        break
print(f"done: {step + 1} steps")
