"""A Swin Transformer (Swin-T: 224 px, patches of 4, windows of 7, depths 2-2-6-2) written the
way its reference implementation writes it: windows cut by view and permute, shifted by
`torch.roll` behind an attention mask, a learned relative-position bias gathered from its
table, patch merging by strided slices, stochastic depth."""
import torch
import torch.nn.functional as F
from torch import nn


def window_partition(x, ws):
    b, h, w, c = x.shape
    x = x.view(b, h // ws, ws, w // ws, ws, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, ws, ws, c)


def window_reverse(windows, ws, h, w):
    b = int(windows.shape[0] / (h * w / ws / ws))
    x = windows.view(b, h // ws, w // ws, ws, ws, -1)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(b, h, w, -1)


class DropPath(nn.Module):
    def __init__(self, p=0.0):
        super().__init__()
        self.p = p

    def forward(self, x):
        if self.p == 0.0 or not self.training:
            return x
        keep = 1 - self.p
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask / keep


class WindowAttention(nn.Module):
    def __init__(self, dim, ws, heads):
        super().__init__()
        self.ws, self.heads = ws, heads
        self.scale = (dim // heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * ws - 1) ** 2, heads))
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)
        coords = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij"))
        flat = torch.flatten(coords, 1)
        rel = (flat[:, :, None] - flat[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += ws - 1
        rel[:, :, 1] += ws - 1
        rel[:, :, 0] *= 2 * ws - 1
        self.register_buffer("relative_position_index", rel.sum(-1))
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, mask=None):
        b_, n, c = x.shape
        qkv = self.qkv(x).reshape(b_, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * self.scale) @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)]
        bias = bias.view(n, n, -1).permute(2, 0, 1).contiguous()
        attn = attn + bias.unsqueeze(0)
        if mask is not None:
            nw = mask.shape[0]
            attn = attn.view(b_ // nw, nw, self.heads, n, n) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.heads, n, n)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(b_, n, c)
        return self.proj(x)


class SwinBlock(nn.Module):
    def __init__(self, dim, res, heads, ws=7, shift=0, drop_path=0.0):
        super().__init__()
        self.res, self.ws, self.shift = res, ws, shift
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, ws, heads)
        self.drop_path = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        if shift > 0:
            h = w = res
            img = torch.zeros((1, h, w, 1))
            cnt = 0
            for hs in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
                for wsl in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
                    img[:, hs, wsl, :] = cnt
                    cnt += 1
            mw = window_partition(img, ws).view(-1, ws * ws)
            mask = mw.unsqueeze(1) - mw.unsqueeze(2)
            mask = mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)
        else:
            mask = None
        self.register_buffer("attn_mask", mask)

    def forward(self, x):
        h = w = self.res
        b, _, c = x.shape
        shortcut = x
        x = self.norm1(x).view(b, h, w, c)
        if self.shift > 0:
            x = torch.roll(x, shifts=(-self.shift, -self.shift), dims=(1, 2))
        windows = window_partition(x, self.ws).view(-1, self.ws * self.ws, c)
        windows = self.attn(windows, mask=self.attn_mask)
        x = window_reverse(windows.view(-1, self.ws, self.ws, c), self.ws, h, w)
        if self.shift > 0:
            x = torch.roll(x, shifts=(self.shift, self.shift), dims=(1, 2))
        x = shortcut + self.drop_path(x.view(b, h * w, c))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class PatchMerging(nn.Module):
    def __init__(self, res, dim):
        super().__init__()
        self.res = res
        self.norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x):
        b, _, c = x.shape
        x = x.view(b, self.res, self.res, c)
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1)
        return self.reduction(self.norm(x.view(b, -1, 4 * c)))


class Swin(nn.Module):
    def __init__(self, embed=96, depths=(2, 2, 6, 2), heads=(3, 6, 12, 24), img=224, classes=1000,
                 drop_path=0.2):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, embed, 4, 4)
        self.patch_norm = nn.LayerNorm(embed)
        rates = torch.linspace(0, drop_path, sum(depths)).tolist()
        stages, res, dim, i = [], img // 4, embed, 0
        for s, (d, h) in enumerate(zip(depths, heads, strict=True)):
            blocks = [SwinBlock(dim, res, h, 7, 0 if j % 2 == 0 or res <= 7 else 3, rates[i + j])
                      for j in range(d)]
            i += d
            if s < len(depths) - 1:
                blocks.append(PatchMerging(res, dim))
                res, dim = res // 2, dim * 2
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_norm(self.patch_embed(x).flatten(2).transpose(1, 2))
        x = self.norm(self.stages(x))
        return self.head(x.mean(1))


def _batch(n):
    return (torch.randn(n, 3, 224, 224),), torch.randint(0, 1000, (n,))


def _loss(out, target):  # label smoothing, as its training recipe sets it
    return F.cross_entropy(out, target, label_smoothing=0.1)


def build():
    return {"model": Swin(), "make_batch": _batch, "loss": _loss, "batch_size": 64,
            "name": "swin-t"}
