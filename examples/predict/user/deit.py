"""DeiT-S written the way timm writes its VisionTransformer: a patch-embedding convolution,
a class token and learned positions, pre-norm blocks whose attention makes q, k and v with
one linear layer, splits them by reshape, permute and unbind and calls
F.scaled_dot_product_attention (timm's fused path), a GELU MLP, stochastic depth; trained
with label smoothing. 224 px (`build`: 197 tokens) and fine-tuned at 384 px (`build_384`:
577 tokens), as DeiT's recipe does."""
import torch
import torch.nn.functional as F
from torch import nn


class PatchEmbed(nn.Module):
    def __init__(self, img_size=224, patch_size=16, embed_dim=384):
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(3, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, dim, num_heads=6, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


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


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, num_heads, drop_path):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), Attention(dim, num_heads)
        self.norm2, self.mlp = nn.LayerNorm(dim, eps=1e-6), Mlp(dim, 4 * dim)
        self.drop_path = DropPath(drop_path)

    def forward(self, x):
        x = x + self.drop_path(self.attn(self.norm1(x)))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class VisionTransformer(nn.Module):
    def __init__(self, img_size=224, embed_dim=384, depth=12, num_heads=6, classes=1000,
                 drop_path_rate=0.1):
        super().__init__()
        self.patch_embed = PatchEmbed(img_size, 16, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, self.patch_embed.num_patches + 1,
                                                  embed_dim) * 0.02)
        rates = [x.item() for x in torch.linspace(0, drop_path_rate, depth, device="cpu")]
        self.blocks = nn.Sequential(*[Block(embed_dim, num_heads, r) for r in rates])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Linear(embed_dim, classes)

    def forward(self, x):
        x = self.patch_embed(x)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


def _batch(size):
    def make(n):
        return (torch.randn(n, 3, size, size),), torch.randint(0, 1000, (n,))
    return make


def _loss(out, target):
    return F.cross_entropy(out, target, label_smoothing=0.1)


def build():
    return {"model": VisionTransformer(), "make_batch": _batch(224), "loss": _loss,
            "batch_size": 128, "name": "deit-s"}


def build_384():
    return {"model": VisionTransformer(img_size=384), "make_batch": _batch(384), "loss": _loss,
            "batch_size": 128, "name": "deit-s-384"}
