"""A decoder with mixture-of-experts feed-forward layers: a linear router, top-2 gating with
softmax weights, each expert an MLP run on the tokens routed to it (gathered by index and
added back), attention through F.scaled_dot_product_attention."""

import torch
import torch.nn.functional as F
from torch import nn


class MoE(nn.Module):
    def __init__(self, dim, experts, hidden, top=2):
        super().__init__()
        self.router = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(dim, hidden), nn.GELU(),
                                                   nn.Linear(hidden, dim))
                                     for _ in range(experts))
        self.top = top

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        weights, chosen = torch.topk(F.softmax(self.router(x), dim=-1), self.top, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token, slot = torch.where(chosen == e)
            if token.numel() == 0:
                continue
            y = expert(x[token]) * weights[token, slot].unsqueeze(-1)
            out.index_add_(0, token, y.to(out.dtype))
        return out.reshape(shape)


class Block(nn.Module):
    def __init__(self, dim, heads, experts, hidden):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.moe = MoE(dim, experts, hidden)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, C // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.moe(self.ln2(x))


class MoEModel(nn.Module):
    def __init__(self, vocab=32000, dim=512, layers=4, heads=8, experts=8, hidden=2048):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.Sequential(*(Block(dim, heads, experts, hidden) for _ in range(layers)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        return self.head(self.norm(self.blocks(self.embed(tokens))))


def _batch(n):
    return (torch.randint(0, 32000, (n, 256)),), torch.randint(0, 32000, (n, 256))


def build():
    return {"model": MoEModel(), "make_batch": _batch, "batch_size": 16, "name": "moe-8x",
            "tokens_per_sample": 256}


def build_large():
    return {"model": MoEModel(experts=16), "make_batch": _batch, "batch_size": 16,
            "name": "moe-16x", "tokens_per_sample": 256}
