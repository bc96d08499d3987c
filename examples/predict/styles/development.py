"""Attention and reductions as users write them, the families the operator classes were
corrected on (package docstring). `EXPECT`: family → {unit: class}."""

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

D, H, T, VOCAB = 128, 4, 64, 500

EXPECT = {
    # unfused attention: the scores' matmul, the softmax and the matmul of the probabilities
    "alibi": {"matmul": "attention", "softmax": "attention", "masked_fill": "attention",
              "linear": "gemm"},
    "einsum": {"einsum": "attention", "softmax": "attention", "linear": "gemm"},
    "softcap": {"matmul": "attention", "tanh": "attention", "dropout": "attention"},
    "chunked": {"matmul": "attention", "softmax": "attention"},
    "heads_in_batch": {"baddbmm": "attention", "bmm": "attention", "softmax": "attention"},
    "cosine": {"matmul": "attention", "linalg_vector_norm": "elementwise"},
    "gpt2": {"baddbmm": "attention", "bmm": "attention", "addmm": "gemm"},
    "perceiver": {"bmm": "attention", "softmax": "attention", "linear": "gemm"},
    "graphsage": {"linalg_vector_norm": "elementwise", "index_add_": "elementwise",
                  "linear": "gemm"},
    "wavenet": {"conv1d": "conv", "tanh": "elementwise"},
    # the shifted window's mask filled region by region between the scores and the softmax
    "swin_shifted": {"matmul": "attention", "softmax": "attention", "linear": "gemm"},
    # experts through one grouped GEMM, as Hugging Face's MoE layers run them
    "grouped_moe": {"_grouped_mm": "gemm", "linear": "gemm", "embedding": "embedding"},
    # a Hugging Face-style batch: a dict of keyword arguments, the loss computed inside
    "keyword_batch": {"linear": "gemm", "embedding": "embedding",
                      "scaled_dot_product_attention": "attention"},
}


class Attention(nn.Module):
    """One self-attention layer in the style named."""

    def __init__(self, style):
        super().__init__()
        self.style = style
        self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)
        slopes = torch.tensor([2 ** (-8 * (i + 1) / H) for i in range(H)])
        self.register_buffer("slopes", slopes.view(1, H, 1, 1))
        self.scale = nn.Parameter(torch.full((H, 1, 1), 10.0))

    def forward(self, x):
        B, d = x.shape[0], D // H
        q, k, v = self.qkv(x).view(B, T, 3, H, d).permute(2, 0, 3, 1, 4)
        style = self.style
        if style == "alibi":  # the bias and the causal mask made between scores and softmax
            a = q @ k.transpose(-1, -2) / math.sqrt(d)
            pos = torch.arange(T, device=x.device)
            a = a + self.slopes * (pos[None, :] - pos[:, None]).abs().neg().float()
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            y = F.softmax(a.masked_fill(causal, float("-inf")).float(), -1).to(q.dtype) @ v
        elif style == "einsum":
            a = torch.einsum("bhid,bhjd->bhij", q, k) * d ** -0.5
            y = torch.einsum("bhij,bhjd->bhid", a.softmax(-1), v)
        elif style == "softcap":  # logits soft-capped (Gemma 2)
            a = torch.tanh(torch.matmul(q, k.transpose(2, 3)) / math.sqrt(d) / 50.0) * 50.0
            a = F.softmax(a, dim=-1, dtype=torch.float32).to(q.dtype)
            y = torch.matmul(F.dropout(a, 0.1, self.training), v)
        elif style == "chunked":  # the queries in chunks, to bound the scores' memory
            y = torch.cat([(q[:, :, c:c + 16] @ k.transpose(-1, -2) * d ** -0.5).softmax(-1) @ v
                           for c in range(0, T, 16)], 2)
        elif style == "heads_in_batch":
            q, k, v = (t.reshape(B * H, T, d) for t in (q, k, v))
            a = torch.baddbmm(torch.zeros(B * H, T, T, device=x.device), q, k.transpose(1, 2),
                              beta=0.0, alpha=d ** -0.5)
            y = torch.bmm(torch.softmax(a, -1), v).view(B, H, T, d)
        elif style == "cosine":  # Swin V2: cosine similarity times a learned scale
            a = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1) * self.scale
            y = a.softmax(-1) @ v
        else:
            raise ValueError(style)
        return self.o(y.transpose(1, 2).reshape(B, T, D))


class Decoder(nn.Module):
    def __init__(self, style, layers=2):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.attn = nn.ModuleList([Attention(style) for _ in range(layers)])
        self.norm = nn.ModuleList([nn.LayerNorm(D) for _ in range(layers)])
        self.head = nn.Linear(D, VOCAB)

    def forward(self, x):
        h = self.emb(x)
        for a, n in zip(self.attn, self.norm, strict=True):
            h = h + a(n(h))
        return self.head(h)


def _tokens(n):
    return (torch.randint(0, VOCAB, (n, T)),), torch.randint(0, VOCAB, (n, T))


def _decoder(style):
    def build():
        return Decoder(style), _tokens
    build.__name__ = style
    return build


alibi, einsum, softcap, chunked, heads_in_batch, cosine = (
    _decoder(s) for s in ("alibi", "einsum", "softcap", "chunked", "heads_in_batch", "cosine"))


class GPT2Block(nn.Module):
    """GPT-2's eager attention: Conv1D projections (addmm), heads folded into the batch,
    baddbmm scores, a causal buffer; checkpointed."""

    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.w_attn, self.b_attn = nn.Parameter(torch.randn(D, 3 * D) * 0.02), nn.Parameter(
            torch.zeros(3 * D))
        self.w_proj, self.b_proj = nn.Parameter(torch.randn(D, D) * 0.02), nn.Parameter(
            torch.zeros(D))
        self.register_buffer("causal", torch.tril(torch.ones(T, T, dtype=torch.bool)),
                             persistent=False)

    def forward(self, x):
        B = x.shape[0]
        h = self.ln1(x)
        qkv = torch.addmm(self.b_attn, h.view(-1, D), self.w_attn).view(B, T, 3 * D)
        q, k, v = (t.view(B, T, H, -1).transpose(1, 2).reshape(B * H, T, -1)
                   for t in qkv.split(D, 2))
        w = torch.baddbmm(torch.empty(B * H, T, T, dtype=q.dtype, device=q.device), q,
                          k.transpose(1, 2), beta=0, alpha=1 / math.sqrt(q.shape[-1]))
        w = w.view(B, H, T, T).masked_fill(~self.causal, torch.finfo(w.dtype).min)
        w = F.dropout(F.softmax(w, -1), 0.1, self.training).view(B * H, T, T)
        y = torch.bmm(w, v).view(B, H, T, -1).transpose(1, 2).reshape(-1, D)
        return x + torch.addmm(self.b_proj, y, self.w_proj).view(B, T, D) + self.ln2(x)


class GPT2(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList([GPT2Block() for _ in range(2)])

    def forward(self, ids):
        x = self.wte(ids)
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False)
        return {"logits": x @ self.wte.weight.t()}  # a Hugging Face style output


def gpt2():
    return GPT2(), _tokens


class Perceiver(nn.Module):
    """Latents cross-attending to the inputs, then to themselves (nn.MultiheadAttention's
    default path: it returns the weights)."""

    def __init__(self, latents=32):
        super().__init__()
        self.latents = nn.Parameter(torch.randn(latents, D) * 0.02)
        self.inp = nn.Linear(16, D)
        self.cross = nn.MultiheadAttention(D, 1, batch_first=True)
        self.self_attn = nn.MultiheadAttention(D, H, batch_first=True)
        self.head = nn.Linear(D, 10)

    def forward(self, x):
        kv = self.inp(x)
        z = self.latents.expand(x.shape[0], -1, -1)
        z = z + self.cross(z, kv, kv)[0]
        z = z + self.self_attn(z, z, z)[0]
        return self.head(z.mean(1))


def perceiver():
    return Perceiver(), lambda n: ((torch.randn(n, 256, 16),), torch.randint(0, 10, (n,)))


class GraphSAGE(nn.Module):
    """Mean aggregation over edges by index_add_, each layer's output normalized."""

    def __init__(self, nodes=2000, edges=20000):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.register_buffer("edges", torch.randint(0, nodes, (2, edges), generator=g))
        self.own = nn.ModuleList([nn.Linear(D, D) for _ in range(2)])
        self.nbr = nn.ModuleList([nn.Linear(D, D, bias=False) for _ in range(2)])
        self.head = nn.Linear(D, 10)

    def forward(self, x):
        src, dst = self.edges
        deg = torch.zeros(x.shape[0], device=x.device).index_add_(
            0, dst, torch.ones(dst.shape, device=x.device)).clamp(min=1)
        for own, nbr in zip(self.own, self.nbr, strict=True):
            agg = torch.zeros_like(x).index_add_(0, dst, x.index_select(0, src)) / deg[:, None]
            x = F.normalize(F.relu(own(x) + nbr(agg)), dim=-1)
        return self.head(x)


def graphsage():  # one graph of 2,000 nodes a step, whatever the batch
    return {"model": GraphSAGE(), "batch_size": 1,
            "make_batch": lambda n: ((torch.randn(2000, D),), torch.randint(0, 10, (2000,)))}


class WaveNet(nn.Module):
    """Dilated causal convolutions with gated units; per-step logits in torch's (N, C, L)."""

    def __init__(self, c=32, q=64, layers=6):
        super().__init__()
        self.emb = nn.Embedding(q, c)
        self.conv = nn.ModuleList([nn.Conv1d(c, 2 * c, 2, dilation=2 ** i) for i in range(layers)])
        self.out = nn.Conv1d(c, q, 1)

    def forward(self, x):
        h = self.emb(x).transpose(1, 2)
        for i, conv in enumerate(self.conv):
            a, b = conv(F.pad(h, (2 ** i, 0))).chunk(2, 1)
            h = h + torch.tanh(a) * torch.sigmoid(b)
        return self.out(h)


def wavenet():
    return WaveNet(), lambda n: ((torch.randint(0, 64, (n, 256)),), torch.randint(0, 64, (n, 256)))


class ShiftedWindows(nn.Module):
    """Swin's shifted-window attention as torchvision writes it: windows of 7×7 on a 14×14
    map rolled by 3, the mask built after the scores, one region at a time."""

    def __init__(self, c=96, heads=3, window=7, shift=3):
        super().__init__()
        self.heads, self.window, self.shift = heads, window, shift
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.head = nn.Linear(c, 10)

    def forward(self, x):  # (B, 14, 14, C)
        B, Hh, Ww, C = x.shape
        w, s, nh = self.window, self.shift, self.heads
        x = torch.roll(x, (-s, -s), (1, 2))
        win = x.view(B, Hh // w, w, Ww // w, w, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, w * w, C)
        q, k, v = self.qkv(win).reshape(win.size(0), w * w, 3, nh, C // nh).permute(2, 0, 3, 1, 4)
        attn = q.matmul(k.transpose(-2, -1)) * (C // nh) ** -0.5
        mask = x.new_zeros((Hh, Ww))
        count = 0
        for hs in ((0, -w), (-w, -s), (-s, None)):
            for ws in ((0, -w), (-w, -s), (-s, None)):
                mask[hs[0]:hs[1], ws[0]:ws[1]] = count
                count += 1
        mask = mask.view(Hh // w, w, Ww // w, w).permute(0, 2, 1, 3).reshape(-1, w * w)
        mask = mask.unsqueeze(1) - mask.unsqueeze(2)
        mask = mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)
        n = mask.size(0)
        attn = attn.view(B, n, nh, w * w, w * w) + mask.unsqueeze(1).unsqueeze(0)
        attn = F.softmax(attn.view(-1, nh, w * w, w * w), dim=-1)
        y = self.proj(attn.matmul(v).transpose(1, 2).reshape(win.size(0), w * w, C))
        return self.head(y.mean(1).view(B, n, C).mean(1))


def swin_shifted():
    return ShiftedWindows(), lambda n: ((torch.randn(n, 14, 14, 96),), torch.randint(0, 10, (n,)))


class GroupedMoE(nn.Module):
    """Top-2 of 4 experts: tokens sorted by expert, the experts' SwiGLU through
    torch._grouped_mm over the sorted rows (Hugging Face's grouped-GEMM path)."""

    def __init__(self, e=4, f=256):
        super().__init__()
        self.emb, self.router = nn.Embedding(VOCAB, D), nn.Linear(D, e)
        self.out = nn.Linear(D, VOCAB)
        self.up = nn.Parameter(torch.randn(e, D, 2 * f) * D ** -0.5)
        self.down = nn.Parameter(torch.randn(e, f, D) * f ** -0.5)
        self.e = e

    def forward(self, ids):
        h = self.emb(ids).flatten(0, 1)
        weight, expert = self.router(h).softmax(-1).topk(2, -1)
        flat = expert.flatten()
        order = flat.argsort()
        rows = h.repeat_interleave(2, 0)[order]
        offs = torch.cumsum(torch.bincount(flat, minlength=self.e), 0).to(torch.int32)
        g, u = torch._grouped_mm(rows, self.up, offs=offs).chunk(2, -1)
        y = torch._grouped_mm(F.silu(g) * u, self.down, offs=offs)
        y = torch.zeros_like(y).index_copy(0, order, y) * weight.flatten()[:, None]
        return self.out(h + y.view(-1, 2, D).sum(1)).view(*ids.shape, VOCAB)


def grouped_moe():
    return GroupedMoE(), _tokens


class KeywordLM(nn.Module):
    """A Hugging Face-style model: keyword arguments, its own loss given labels, a dict out."""

    def __init__(self):
        super().__init__()
        self.emb, self.qkv = nn.Embedding(VOCAB, D), nn.Linear(D, 3 * D)
        self.lm_head = nn.Linear(D, VOCAB)

    def forward(self, input_ids, attention_mask=None, labels=None):
        h = self.emb(input_ids)
        q, k, v = self.qkv(h).view(*h.shape[:2], 3, H, D // H).permute(2, 0, 3, 1, 4)
        h = h + F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).flatten(2)
        logits = self.lm_head(h * attention_mask[..., None])
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten()) if labels is not None \
            else None
        return {"loss": loss, "logits": logits}


def keyword_batch():
    def make_batch(n):
        ids = torch.randint(0, VOCAB, (n, T))
        return {"input_ids": ids, "attention_mask": torch.ones(n, T), "labels": ids}
    return KeywordLM(), make_batch
