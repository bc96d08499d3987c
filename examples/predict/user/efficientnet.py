"""EfficientNet-B0, -B1 and -B2 written the way torchvision writes them: MBConv blocks (a 1×1
expansion, a depthwise convolution, squeeze-and-excitation by pooled 1×1 convolutions and a
sigmoid gate, a 1×1 projection), SiLU, batch norm, stochastic depth per sample, channels
rounded to multiples of 8 and depths scaled by ceil."""
import math

import torch
import torch.nn.functional as F
from torch import nn

# expand ratio, kernel, stride, in channels, out channels, layers (B0)
STAGES = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
          (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]


def make_divisible(v, divisor=8):
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


class ConvNormAct(nn.Sequential):
    def __init__(self, cin, cout, k=3, stride=1, groups=1, act=True):
        layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                  nn.BatchNorm2d(cout)]
        if act:
            layers.append(nn.SiLU(inplace=True))
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    def __init__(self, cin, squeeze):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(cin, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, cin, 1)
        self.activation = nn.SiLU()

    def forward(self, x):
        scale = self.fc2(self.activation(self.fc1(self.avgpool(x))))
        return x * torch.sigmoid(scale)


def stochastic_depth(x, p, training):
    if not training or p == 0.0:
        return x
    survival = 1.0 - p
    noise = torch.empty([x.shape[0]] + [1] * (x.ndim - 1), dtype=x.dtype, device=x.device)
    return x * noise.bernoulli_(survival).div_(survival)


class MBConv(nn.Module):
    def __init__(self, expand, k, stride, cin, cout, p):
        super().__init__()
        self.residual = stride == 1 and cin == cout
        hidden = make_divisible(cin * expand)
        layers = []
        if hidden != cin:
            layers.append(ConvNormAct(cin, hidden, 1))
        layers += [ConvNormAct(hidden, hidden, k, stride, groups=hidden),
                   SqueezeExcitation(hidden, max(1, cin // 4)),
                   ConvNormAct(hidden, cout, 1, act=False)]
        self.block = nn.Sequential(*layers)
        self.p = p

    def forward(self, x):
        out = self.block(x)
        if self.residual:
            out = stochastic_depth(out, self.p, self.training) + x
        return out


class EfficientNet(nn.Module):
    def __init__(self, width=1.0, depth=1.0, dropout=0.2, drop_path=0.2, classes=1000):
        super().__init__()
        stages = [(e, k, s, make_divisible(i * width), make_divisible(o * width),
                   math.ceil(n * depth)) for e, k, s, i, o, n in STAGES]
        total, done = sum(s[-1] for s in stages), 0
        layers = [ConvNormAct(3, stages[0][3], 3, 2)]
        for e, k, s, cin, cout, n in stages:
            blocks = []
            for j in range(n):
                blocks.append(MBConv(e, k, s if j == 0 else 1, cin if j == 0 else cout, cout,
                                     drop_path * done / total))
                done += 1
            layers.append(nn.Sequential(*blocks))
        last = 4 * stages[-1][4]
        layers.append(ConvNormAct(stages[-1][4], last, 1))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(dropout, inplace=True), nn.Linear(last, classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                r = 1.0 / math.sqrt(m.out_features)
                nn.init.uniform_(m.weight, -r, r)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def _batch(res):
    def make(n):
        return (torch.randn(n, 3, res, res),), torch.randint(0, 1000, (n,))
    return make


def _loss(out, target):
    return F.cross_entropy(out, target, label_smoothing=0.1)


def build():
    return {"model": EfficientNet(), "make_batch": _batch(224), "loss": _loss,
            "batch_size": 128, "name": "efficientnet-b0"}


def build_b1():
    return {"model": EfficientNet(depth=1.1, dropout=0.2), "make_batch": _batch(240),
            "loss": _loss, "batch_size": 128, "name": "efficientnet-b1"}


def build_b2():
    return {"model": EfficientNet(width=1.1, depth=1.2, dropout=0.3), "make_batch": _batch(260),
            "loss": _loss, "batch_size": 128, "name": "efficientnet-b2"}
