"""A deep MLP for tabular data: linear layers, layer norm, ReLU, dropout."""

import torch
from torch import nn


def mlp(features=512, hidden=2048, depth=6, classes=10):
    layers, width = [], features
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.LayerNorm(hidden), nn.ReLU(), nn.Dropout(0.1)]
        width = hidden
    layers.append(nn.Linear(width, classes))
    return nn.Sequential(*layers)


def _batch(n):
    return (torch.randn(n, 512),), torch.randint(0, 10, (n,))


def build():
    return {"model": mlp(), "make_batch": _batch, "batch_size": 8192, "name": "tabular-mlp"}


def build_large():
    return {"model": mlp(hidden=4096), "make_batch": _batch, "batch_size": 8192,
            "name": "tabular-mlp-wide"}
