"""A small 3-D convolutional video classifier (C3D-style): 16 frames of 112x112, 3x3x3
convolutions."""
import torch
import torch.nn.functional as F
from torch import nn


class C3D(nn.Module):
    def __init__(self, width=32, classes=50):
        super().__init__()
        w = [width, 2 * width, 4 * width, 4 * width]
        self.c1 = nn.Conv3d(3, w[0], 3, padding=1)
        self.c2 = nn.Conv3d(w[0], w[1], 3, padding=1)
        self.c3a = nn.Conv3d(w[1], w[2], 3, padding=1)
        self.c3b = nn.Conv3d(w[2], w[2], 3, padding=1)
        self.c4 = nn.Conv3d(w[2], w[3], 3, padding=1)
        self.fc = nn.Linear(w[3], classes)

    def forward(self, x):
        x = F.max_pool3d(F.relu(self.c1(x)), (1, 2, 2))
        x = F.max_pool3d(F.relu(self.c2(x)), 2)
        x = F.relu(self.c3b(F.relu(self.c3a(x))))
        x = F.max_pool3d(x, 2)
        x = F.relu(self.c4(x))
        return self.fc(x.mean((2, 3, 4)))


def _batch(n):
    return (torch.randn(n, 3, 16, 112, 112),), torch.randint(0, 50, (n,))


def build():
    return {"model": C3D(), "make_batch": _batch, "batch_size": 32, "name": "c3d-small"}


def build_wide():
    return {"model": C3D(width=64), "make_batch": _batch, "batch_size": 32, "name": "c3d-wide"}
