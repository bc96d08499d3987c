"""CLIP (ViT-B/32 image tower, 12-layer text tower) written the way open_clip writes it: a
patch convolution, a class token and learned positions, residual blocks of
nn.MultiheadAttention and a GELU MLP (batch first); the text tower's causal mask kept as a
buffer, its features taken at each caption's end-of-text token (the argmax of the token ids);
both projected by plain parameters, L2-normalized, and trained with the symmetric contrastive
loss at a learned temperature. Patches of 32 (`build`) and 16 (`build_b16`)."""
import math

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, CONTEXT, EOT = 49408, 77, 49407
EMBED = 512


class ResidualAttentionBlock(nn.Module):
    def __init__(self, width, heads, mlp_ratio=4.0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(width)
        hidden = int(width * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width))

    def forward(self, x, attn_mask=None):
        y = self.ln_1(x)
        x = x + self.attn(y, y, y, need_weights=False, attn_mask=attn_mask)[0]
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, width, layers, heads):
        super().__init__()
        self.resblocks = nn.ModuleList(ResidualAttentionBlock(width, heads) for _ in range(layers))

    def forward(self, x, attn_mask=None):
        for block in self.resblocks:
            x = block(x, attn_mask=attn_mask)
        return x


class VisionTransformer(nn.Module):
    def __init__(self, image_size=224, patch_size=32, width=768, layers=12, heads=12,
                 output_dim=EMBED):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, kernel_size=patch_size, stride=patch_size, bias=False)
        scale = width ** -0.5
        self.class_embedding = nn.Parameter(scale * torch.randn(width))
        grid = image_size // patch_size
        self.positional_embedding = nn.Parameter(scale * torch.randn(grid * grid + 1, width))
        self.ln_pre = nn.LayerNorm(width)
        self.transformer = Transformer(width, layers, heads)
        self.ln_post = nn.LayerNorm(width)
        self.proj = nn.Parameter(scale * torch.randn(width, output_dim))

    def forward(self, x):
        x = self.conv1(x)                                   # b, width, grid, grid
        x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)
        cls = self.class_embedding.to(x.dtype) + torch.zeros(x.shape[0], 1, x.shape[-1],
                                                             dtype=x.dtype, device=x.device)
        x = torch.cat([cls, x], dim=1) + self.positional_embedding.to(x.dtype)
        x = self.transformer(self.ln_pre(x))
        return self.ln_post(x[:, 0]) @ self.proj


class TextTransformer(nn.Module):
    def __init__(self, width=512, layers=12, heads=8, output_dim=EMBED):
        super().__init__()
        self.token_embedding = nn.Embedding(VOCAB, width)
        self.positional_embedding = nn.Parameter(torch.empty(CONTEXT, width).normal_(std=0.01))
        self.transformer = Transformer(width, layers, heads)
        self.ln_final = nn.LayerNorm(width)
        self.text_projection = nn.Parameter(torch.empty(width, output_dim).normal_(
            std=width ** -0.5))
        mask = torch.empty(CONTEXT, CONTEXT).fill_(float("-inf")).triu_(1)
        self.register_buffer("attn_mask", mask, persistent=False)

    def forward(self, text):
        x = self.token_embedding(text) + self.positional_embedding
        x = self.transformer(x, attn_mask=self.attn_mask)
        x = self.ln_final(x)
        x = x[torch.arange(x.shape[0], device=x.device), text.argmax(dim=-1)]
        return x @ self.text_projection


class CLIP(nn.Module):
    def __init__(self, patch_size=32):
        super().__init__()
        self.visual = VisionTransformer(patch_size=patch_size)
        self.text = TextTransformer()
        self.logit_scale = nn.Parameter(torch.ones([]) * math.log(1 / 0.07))

    def forward(self, image, text):
        image_features = F.normalize(self.visual(image), dim=-1)
        text_features = F.normalize(self.text(text), dim=-1)
        return image_features, text_features, self.logit_scale.exp()


def _batch(n):
    g = torch.Generator().manual_seed(n)
    images = torch.randn(n, 3, 224, 224, generator=g)
    lengths = torch.randint(8, CONTEXT, (n,), generator=g)
    text = torch.randint(1, EOT, (n, CONTEXT), generator=g)
    positions = torch.arange(CONTEXT)[None, :]
    text = torch.where(positions < lengths[:, None], text, torch.zeros_like(text))
    text[torch.arange(n), lengths] = EOT
    return (images, text), torch.arange(n)


def _loss(output, labels):
    image_features, text_features, logit_scale = output
    logits_per_image = logit_scale * image_features @ text_features.T
    logits_per_text = logits_per_image.T
    return (F.cross_entropy(logits_per_image, labels)
            + F.cross_entropy(logits_per_text, labels)) / 2


def build():
    return {"model": CLIP(), "make_batch": _batch, "loss": _loss, "batch_size": 256,
            "name": "clip-vit-b32"}


def build_b16():
    return {"model": CLIP(patch_size=16), "make_batch": _batch, "loss": _loss,
            "batch_size": 256, "name": "clip-vit-b16"}
