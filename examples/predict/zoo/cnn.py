"""A ResNet-18 for 64×64 images (CIFAR-style stem: a 3×3 convolution, no max-pool), with
batch norm, as in the usual training scripts."""

import torch
import torch.nn.functional as F
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.short(x))


class ResNet18(nn.Module):
    def __init__(self, width=64, classes=200):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        layers, cin = [], width
        for i, blocks in enumerate((2, 2, 2, 2)):
            cout = width * 2 ** i
            for j in range(blocks):
                layers.append(BasicBlock(cin, cout, 2 if j == 0 and i > 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def _batch(n):
    return (torch.randn(n, 3, 64, 64),), torch.randint(0, 200, (n,))


def build():
    return {"model": ResNet18(), "make_batch": _batch, "batch_size": 256, "name": "resnet18-64px"}


def build_small():
    return {"model": ResNet18(width=32), "make_batch": _batch, "batch_size": 256,
            "name": "resnet18-64px-half"}
