"""A ViT-B/16 image classifier built from nn.TransformerEncoderLayer (pre-norm) and a 16×16
patch convolution, as in the torchvision and timm tutorials."""

import torch
from torch import nn


class ViT(nn.Module):
    def __init__(self, image=224, patch=16, dim=768, depth=12, heads=12, mlp=3072, classes=1000):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        tokens = (image // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, tokens + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, mlp, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.encoder(x)
        return self.head(self.norm(x[:, 0]))


def _batch(n):
    return (torch.randn(n, 3, 224, 224),), torch.randint(0, 1000, (n,))


def build():
    return {"model": ViT(), "make_batch": _batch, "batch_size": 128, "name": "vit-b16"}


def build_small():
    return {"model": ViT(dim=384, heads=6, mlp=1536), "make_batch": _batch, "batch_size": 128,
            "name": "vit-s16"}
