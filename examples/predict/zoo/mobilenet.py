"""MobileNetV2 (Sandler et al., 2018): inverted residual blocks (a 1×1 expansion, a 3×3
depthwise convolution, a 1×1 linear projection), batch norm and ReLU6, a width multiplier
for its size variant; 96 px images, 1,000 classes."""

import torch
from torch import nn

# (expansion, channels, blocks, first stride) per stage, as the paper's table 2
STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
          (6, 160, 3, 2), (6, 320, 1, 1))


def _divisible(c, by=8):
    return max(by, int(c + by / 2) // by * by)


def conv_bn(cin, cout, k, stride=1, groups=1, act=True):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, nn.ReLU6(inplace=True)) if act else nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = [conv_bn(cin, hidden, 1)] if expand != 1 else []
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden),
                   conv_bn(hidden, cout, 1, act=False)]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.block(x) if self.residual else self.block(x)


class MobileNetV2(nn.Module):
    def __init__(self, width=1.0, classes=1000):
        super().__init__()
        cin = _divisible(32 * width)
        layers = [conv_bn(3, cin, 3, 2)]
        for expand, c, n, stride in STAGES:
            cout = _divisible(c * width)
            for i in range(n):
                layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
                cin = cout
        last = _divisible(1280 * max(1.0, width))
        layers.append(conv_bn(cin, last, 1))
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(last, classes)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


def _batch(n):
    return (torch.randn(n, 3, 96, 96),), torch.randint(0, 1000, (n,))


def build():
    return {"model": MobileNetV2(), "make_batch": _batch, "batch_size": 256,
            "name": "mobilenet-v2"}


def build_large():
    return {"model": MobileNetV2(width=1.4), "make_batch": _batch, "batch_size": 256,
            "name": "mobilenet-v2-1.4"}
