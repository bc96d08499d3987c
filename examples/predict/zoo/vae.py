"""A convolutional VAE on 128-pixel images as latent-diffusion autoencoders write it: ResNet
blocks of GroupNorm, SiLU and 3×3 convolutions, strided-convolution downsampling, nearest
upsampling followed by a convolution, a diagonal Gaussian posterior sampled by the
reparameterization trick, and the loss (reconstruction + β·KL) passed beside the model, of
the `(reconstruction, mean, logvar)` its forward returns."""

import torch
import torch.nn.functional as F
from torch import nn

PIXELS, Z = 128, 4


def norm(ch):
    return nn.GroupNorm(32, ch, eps=1e-6)


class ResnetBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.norm1, self.conv1 = norm(cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2, self.conv2 = norm(cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.nin_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return self.nin_shortcut(x) + h


class Downsample(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.conv = nn.Conv2d(ch, ch, 3, stride=2, padding=0)

    def forward(self, x):
        return self.conv(F.pad(x, (0, 1, 0, 1)))  # asymmetric, as the original pads


class Upsample(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.conv = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class Encoder(nn.Module):
    def __init__(self, ch, mult):
        super().__init__()
        self.conv_in = nn.Conv2d(3, ch, 3, padding=1)
        blocks, cin = [], ch
        for i, m in enumerate(mult):
            blocks.append(ResnetBlock(cin, ch * m))
            cin = ch * m
            if i < len(mult) - 1:
                blocks.append(Downsample(cin))
        self.down = nn.Sequential(*blocks)
        self.mid = ResnetBlock(cin, cin)
        self.norm_out, self.conv_out = norm(cin), nn.Conv2d(cin, 2 * Z, 3, padding=1)

    def forward(self, x):
        h = self.mid(self.down(self.conv_in(x)))
        return self.conv_out(F.silu(self.norm_out(h)))


class Decoder(nn.Module):
    def __init__(self, ch, mult):
        super().__init__()
        cin = ch * mult[-1]
        self.conv_in = nn.Conv2d(Z, cin, 3, padding=1)
        self.mid = ResnetBlock(cin, cin)
        blocks = []
        for i, m in reversed(list(enumerate(mult))):
            blocks.append(ResnetBlock(cin, ch * m))
            cin = ch * m
            if i > 0:
                blocks.append(Upsample(cin))
        self.up = nn.Sequential(*blocks)
        self.norm_out, self.conv_out = norm(cin), nn.Conv2d(cin, 3, 3, padding=1)

    def forward(self, z):
        h = self.up(self.mid(self.conv_in(z)))
        return self.conv_out(F.silu(self.norm_out(h)))


class VAE(nn.Module):
    def __init__(self, ch=64, mult=(1, 2, 4, 4)):
        super().__init__()
        self.encoder, self.decoder = Encoder(ch, mult), Decoder(ch, mult)

    def forward(self, x):
        mean, logvar = self.encoder(x).chunk(2, dim=1)
        logvar = torch.clamp(logvar, -30.0, 20.0)
        z = mean + torch.exp(0.5 * logvar) * torch.randn_like(mean)
        return self.decoder(z), mean, logvar


def vae_loss(output, target, beta=1e-6):
    recon, mean, logvar = output
    rec = F.mse_loss(recon.float(), target, reduction="sum") / target.shape[0]
    kl = 0.5 * torch.sum(mean.float().pow(2) + logvar.float().exp() - 1.0 - logvar.float())
    return rec + beta * kl / target.shape[0]


def _batch(n):
    images = torch.rand(n, 3, PIXELS, PIXELS) * 2 - 1
    return (images,), images


def build():
    return {"model": VAE(), "make_batch": _batch, "loss": vae_loss, "batch_size": 32,
            "name": "vae-128"}


def build_large():
    return {"model": VAE(ch=128), "make_batch": _batch, "loss": vae_loss, "batch_size": 32,
            "name": "vae-128-wide"}
