"""A small denoising-diffusion U-Net (DDPM-style): residual blocks with group norm and SiLU,
a sinusoidal timestep embedding through an MLP, self-attention at 16×16 with
nn.MultiheadAttention, strided-convolution downsampling and nearest-neighbour upsampling; the
loss is the noise's mean squared error."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class ResBlock(nn.Module):
    def __init__(self, cin, cout, tdim):
        super().__init__()
        self.norm1 = nn.GroupNorm(32, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(tdim, cout)
        self.norm2 = nn.GroupNorm(32, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, t):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(F.silu(t))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return h + self.skip(x)


class Attention(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.norm = nn.GroupNorm(32, ch)
        self.attn = nn.MultiheadAttention(ch, 4, batch_first=True)

    def forward(self, x):
        B, C, H, W = x.shape
        h = self.norm(x).flatten(2).transpose(1, 2)
        h, _ = self.attn(h, h, h)
        return x + h.transpose(1, 2).reshape(B, C, H, W)


class DiffusionUNet(nn.Module):
    def __init__(self, base=64, mults=(1, 2, 4)):
        super().__init__()
        tdim = base * 4
        self.base = base
        self.time = nn.Sequential(nn.Linear(base, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.inp = nn.Conv2d(3, base, 3, padding=1)
        chans = [base * m for m in mults]
        self.down, self.pool, cin = nn.ModuleList(), nn.ModuleList(), base
        skips = [base]
        for i, c in enumerate(chans):
            self.down.append(nn.ModuleList([ResBlock(cin, c, tdim), ResBlock(c, c, tdim)]))
            cin = c
            skips += [c, c]
            if i < len(chans) - 1:
                self.pool.append(nn.Conv2d(c, c, 3, stride=2, padding=1))
                skips.append(c)
        self.mid1, self.mid_attn, self.mid2 = ResBlock(cin, cin, tdim), Attention(cin), \
            ResBlock(cin, cin, tdim)
        self.up = nn.ModuleList()
        for c in reversed(chans):
            blocks = nn.ModuleList()
            for _ in range(3):
                blocks.append(ResBlock(cin + skips.pop(), c, tdim))
                cin = c
            self.up.append(blocks)
        self.attn16 = Attention(chans[-1])
        self.out = nn.Sequential(nn.GroupNorm(32, cin), nn.SiLU(), nn.Conv2d(cin, 3, 3, padding=1))

    def embed(self, t):
        half = self.base // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device) / half)
        args = t[:, None].float() * freqs[None]
        return self.time(torch.cat([args.sin(), args.cos()], dim=1))

    def forward(self, x, t):
        temb = self.embed(t)
        h = self.inp(x)
        hs = [h]
        for i, blocks in enumerate(self.down):
            for block in blocks:
                h = block(h, temb)
                hs.append(h)
            if i == len(self.down) - 1:
                h = self.attn16(h)
            if i < len(self.pool):
                h = self.pool[i](h)
                hs.append(h)
        h = self.mid2(self.mid_attn(self.mid1(h, temb)), temb)
        for i, blocks in enumerate(self.up):
            for block in blocks:
                h = block(torch.cat([h, hs.pop()], dim=1), temb)
            if i < len(self.up) - 1:
                h = F.interpolate(h, scale_factor=2, mode="nearest")
        return self.out(h)


def _batch(n):
    x = torch.randn(n, 3, 64, 64)
    t = torch.randint(0, 1000, (n,))
    return (x, t), torch.randn(n, 3, 64, 64)


def build():
    return {"model": DiffusionUNet(), "make_batch": _batch, "batch_size": 64,
            "name": "diffusion-unet"}


def build_large():
    return {"model": DiffusionUNet(base=96), "make_batch": _batch, "batch_size": 64,
            "name": "diffusion-unet-wide"}
