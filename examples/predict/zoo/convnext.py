"""A ConvNeXt (Liu et al., 2022) for 128×128 images: a patchify stem, blocks of a 7×7
depthwise convolution, layer norm in channels-last, an inverted MLP of linear layers and
GELU, with layer-scale; downsampling by layer norm and a strided convolution."""

import torch
import torch.nn.functional as F
from torch import nn


class LayerNorm2d(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x):
        h = self.dw(x).permute(0, 2, 3, 1)
        h = self.fc2(F.gelu(self.fc1(self.norm(h)))) * self.gamma
        return x + h.permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    def __init__(self, dims=(64, 128, 256, 512), depths=(2, 2, 6, 2), classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0]))
        stages = []
        for i, (d, n) in enumerate(zip(dims, depths, strict=False)):
            down = nn.Sequential(LayerNorm2d(dims[i - 1]), nn.Conv2d(dims[i - 1], d, 2, 2)) \
                if i else nn.Identity()
            stages.append(nn.Sequential(down, *(Block(d) for _ in range(n))))
        self.stages = nn.Sequential(*stages)
        self.norm = nn.LayerNorm(dims[-1])
        self.head = nn.Linear(dims[-1], classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.head(self.norm(x.mean(dim=(2, 3))))


def _batch(n):
    return (torch.randn(n, 3, 128, 128),), torch.randint(0, 1000, (n,))


def build():
    return {"model": ConvNeXt(), "make_batch": _batch, "batch_size": 128, "name": "convnext-s"}


def build_large():
    return {"model": ConvNeXt(dims=(96, 192, 384, 768)), "make_batch": _batch,
            "batch_size": 128, "name": "convnext-t"}
