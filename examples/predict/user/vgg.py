"""A VGG-11 with batch norm on 64-pixel images, 100 classes, written plainly."""
import torch
from torch import nn

CFG = [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]


class VGG(nn.Module):
    def __init__(self, scale=1.0, classes=100):
        super().__init__()
        layers, cin = [], 3
        for v in CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                c = int(v * scale)
                layers += [nn.Conv2d(cin, c, 3, padding=1), nn.BatchNorm2d(c),
                           nn.ReLU(inplace=True)]
                cin = c
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(cin * 2 * 2, 1024), nn.ReLU(True),
                                        nn.Dropout(0.5), nn.Linear(1024, classes))

    def forward(self, x):
        return self.classifier(self.features(x))


def _batch(n):
    return (torch.randn(n, 3, 64, 64),), torch.randint(0, 100, (n,))


def build():
    return {"model": VGG(), "make_batch": _batch, "batch_size": 512, "name": "vgg11-bn"}


def build_wide():
    return {"model": VGG(scale=1.5), "make_batch": _batch, "batch_size": 512,
            "name": "vgg11-bn-wide"}
