"""A WaveNet on 8-bit μ-law audio: causal dilated 1-D convolutions (left padding, dilations
1…512 in three stacks), gated tanh·sigmoid units, residual and skip 1×1 convolutions, and a
256-way softmax per sample."""

import torch
import torch.nn.functional as F
from torch import nn

QUANT, SAMPLES = 256, 8192


class ResidualLayer(nn.Module):
    def __init__(self, res, skip, dilation):
        super().__init__()
        self.dilation = dilation
        self.dilated = nn.Conv1d(res, 2 * res, kernel_size=2, dilation=dilation)
        self.res_out = nn.Conv1d(res, res, 1)
        self.skip_out = nn.Conv1d(res, skip, 1)

    def forward(self, x):
        h = self.dilated(F.pad(x, (self.dilation, 0)))
        filt, gate = h.chunk(2, dim=1)
        z = torch.tanh(filt) * torch.sigmoid(gate)
        return x + self.res_out(z), self.skip_out(z)


class WaveNet(nn.Module):
    def __init__(self, res=64, skip=256, stacks=3, layers=10):
        super().__init__()
        self.embed = nn.Embedding(QUANT, res)
        self.layers = nn.ModuleList(ResidualLayer(res, skip, 2 ** i)
                                    for _ in range(stacks) for i in range(layers))
        self.head = nn.Sequential(nn.ReLU(), nn.Conv1d(skip, skip, 1), nn.ReLU(),
                                  nn.Conv1d(skip, QUANT, 1))

    def forward(self, audio):
        x = self.embed(audio).transpose(1, 2)
        skips = 0
        for layer in self.layers:
            x, s = layer(x)
            skips = skips + s
        return self.head(skips)


def _batch(n):
    wave = torch.randint(0, QUANT, (n, SAMPLES + 1))
    return wave[:, :-1], wave[:, 1:]


def build():
    return {"model": WaveNet(), "make_batch": _batch, "batch_size": 16, "name": "wavenet"}


def build_large():
    return {"model": WaveNet(res=128, skip=512), "make_batch": _batch, "batch_size": 16,
            "name": "wavenet-wide"}
