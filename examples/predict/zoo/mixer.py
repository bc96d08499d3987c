"""MLP-Mixer (Tolstikhin et al., 2021): patches by a strided convolution, then token-mixing
and channel-mixing MLPs with layer norms and skip connections."""

import torch
from torch import nn


class MixerBlock(nn.Module):
    def __init__(self, tokens, dim, token_mlp, channel_mlp):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.tokens = nn.Sequential(nn.Linear(tokens, token_mlp), nn.GELU(),
                                    nn.Linear(token_mlp, tokens))
        self.norm2 = nn.LayerNorm(dim)
        self.channels = nn.Sequential(nn.Linear(dim, channel_mlp), nn.GELU(),
                                      nn.Linear(channel_mlp, dim))

    def forward(self, x):
        x = x + self.tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channels(self.norm2(x))


class Mixer(nn.Module):
    def __init__(self, dim=512, depth=8, token_mlp=256, channel_mlp=2048, patch=16, image=224,
                 classes=1000):
        super().__init__()
        tokens = (image // patch) ** 2
        self.stem = nn.Conv2d(3, dim, patch, patch)
        self.blocks = nn.Sequential(*(MixerBlock(tokens, dim, token_mlp, channel_mlp)
                                      for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        x = self.norm(self.blocks(x))
        return self.head(x.mean(dim=1))


def _batch(n):
    return (torch.randn(n, 3, 224, 224),), torch.randint(0, 1000, (n,))


def build():
    return {"model": Mixer(), "make_batch": _batch, "batch_size": 128, "name": "mixer-s16"}


def build_large():
    return {"model": Mixer(dim=768, depth=12, token_mlp=384, channel_mlp=3072),
            "make_batch": _batch, "batch_size": 128, "name": "mixer-b16"}
