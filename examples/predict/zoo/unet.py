"""A U-Net for semantic segmentation (Ronneberger et al., 2015, with batch norm): double
3×3 convolutions, max-pool down, transposed convolutions up, skip connections by
concatenation, a per-pixel cross-entropy."""

import torch
import torch.nn.functional as F
from torch import nn


def double_conv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, width=32, classes=21):
        super().__init__()
        chans = [width * 2 ** i for i in range(5)]
        self.down = nn.ModuleList([double_conv(3, chans[0])] + [
            double_conv(chans[i], chans[i + 1]) for i in range(4)])
        self.up = nn.ModuleList(nn.ConvTranspose2d(chans[i + 1], chans[i], 2, stride=2)
                                for i in reversed(range(4)))
        self.dec = nn.ModuleList(double_conv(2 * chans[i], chans[i]) for i in reversed(range(4)))
        self.out = nn.Conv2d(chans[0], classes, 1)

    def forward(self, x):
        skips = []
        for i, block in enumerate(self.down):
            x = block(x if i == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        skips.pop()
        for up, dec in zip(self.up, self.dec, strict=False):
            x = dec(torch.cat([up(x), skips.pop()], dim=1))
        return self.out(x)


def _batch(n):
    return (torch.randn(n, 3, 128, 128),), torch.randint(0, 21, (n, 128, 128))


def build():
    return {"model": UNet(), "make_batch": _batch, "loss": F.cross_entropy, "batch_size": 32,
            "name": "unet-seg"}


def build_large():
    return {"model": UNet(width=64), "make_batch": _batch, "loss": F.cross_entropy,
            "batch_size": 32, "name": "unet-seg-wide"}
