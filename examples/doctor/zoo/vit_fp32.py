"""A ViT-B/16-style image classifier trained in float32 (no autocast, TF32 left off)."""
import argparse
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=float, default=12)
args = p.parse_args()
gpu = args.device.startswith("cuda")
dim, depth, img, batch = (768, 12, 224, 64) if gpu else (64, 2, 32, 4)


class ViT(nn.Module):
    def __init__(self, patch=16, classes=1000):
        super().__init__()
        self.patchify = nn.Conv2d(3, dim, patch, patch)
        n = (img // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, 12 if gpu else 4, 4 * dim, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patchify(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(len(x), -1, -1), x], 1) + self.pos
        return self.head(self.encoder(x)[:, 0])


model = ViT().to(args.device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
images = torch.randn(batch, 3, img, img, device=args.device)
labels = torch.randint(0, 1000, (batch,), device=args.device)
start, step = time.time(), 0
while time.time() - start < args.max_seconds:
    loss = nn.functional.cross_entropy(model(images), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
print(f"done: {step} steps")
