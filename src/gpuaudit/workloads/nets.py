"""The reference networks: a GPT-style decoder, a BERT-style encoder and a bottleneck ResNet.

Written here (nothing downloaded, no transformers/torchvision needed) in the plain form the
fast paths want: one fused QKV projection, attention through
`F.scaled_dot_product_attention` (flash attention on GPUs), tied output embeddings, a
vocabulary padded to a multiple of 64. This module is imported only by the functions that
build models, so torch loads when a model is built, never with `import gpuaudit`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gpuaudit.workloads.entry import call_model


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Mlp(nn.Module):
    def __init__(self, dim: int, approximate: str) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, 4 * dim)
        self.proj = nn.Linear(4 * dim, dim)
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate=self.approximate))


class Block(nn.Module):
    """Pre-norm (GPT-2) or post-norm (BERT) transformer layer."""

    def __init__(self, dim: int, heads: int, *, causal: bool, pre_norm: bool) -> None:
        super().__init__()
        self.pre_norm = pre_norm
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, causal)
        self.mlp = Mlp(dim, "tanh" if pre_norm else "none")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_norm:
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.mlp(x))


def _init(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)


class Gpt(nn.Module):
    """GPT-2's architecture: token + position embeddings, pre-norm causal blocks, a final
    norm and an output layer tied to the token embedding. Returns logits."""

    def __init__(self, vocab: int, seq_len: int, layers: int, heads: int, dim: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, causal=True, pre_norm=True)
                                    for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        _init(self)
        self.head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class Bert(nn.Module):
    """BERT's encoder: word + position + segment embeddings with a norm, post-norm
    bidirectional blocks, and the masked-LM head (dense, GELU, norm, output tied to the word
    embedding) over every position. Returns logits."""

    def __init__(self, vocab: int, seq_len: int, layers: int, heads: int, dim: int) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq_len, dim)
        self.segment = nn.Embedding(2, dim)
        self.ln_emb = nn.LayerNorm(dim)
        self.blocks = nn.ModuleList(Block(dim, heads, causal=False, pre_norm=False)
                                    for _ in range(layers))
        self.dense = nn.Linear(dim, dim)
        self.ln_head = nn.LayerNorm(dim)
        self.decoder = nn.Linear(dim, vocab)
        _init(self)
        self.decoder.weight = self.word.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.ln_emb(self.word(idx) + self.pos(pos) + self.segment.weight[0])
        for block in self.blocks:
            x = block(x)
        return self.decoder(self.ln_head(F.gelu(self.dense(x))))


def lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1))


def class_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, target)


class Bottleneck(nn.Module):
    def __init__(self, inp: int, planes: int, stride: int, project: bool) -> None:
        super().__init__()
        out = planes * 4
        self.conv1 = nn.Conv2d(inp, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = nn.Sequential(nn.Conv2d(inp, out, 1, stride=stride, bias=False),
                                        nn.BatchNorm2d(out)) if project else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        return self.relu(self.bn3(self.conv3(y)) + skip)


class ResNet(nn.Module):
    """He et al.'s bottleneck ResNet in torchvision's v1.5 layout (stride on the 3×3): with
    layers (3, 4, 6, 3) and width 64 it is ResNet-50, 25,557,032 parameters."""

    def __init__(self, layers: tuple[int, ...] = (3, 4, 6, 3), width: int = 64,
                 num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        stages, inp = [], width
        for i, blocks in enumerate(layers):
            planes = width * 2**i
            stage = [Bottleneck(inp, planes, 2 if i > 0 else 1, True)]
            stage += [Bottleneck(planes * 4, planes, 1, False) for _ in range(blocks - 1)]
            stages.append(nn.Sequential(*stage))
            inp = planes * 4
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(inp, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.stages(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class WithLoss(nn.Module):
    """model + loss as one module: compiled together (the loss fuses with the output layer)
    and wrapped together by DDP. Called as net(*inputs, target); with `keywords` the inputs
    are one mapping, the model's keyword arguments (`entry.takes_keywords`)."""

    def __init__(self, model: nn.Module, loss: object, keywords: bool = False) -> None:
        super().__init__()
        self.model = model
        self.loss = loss
        self.keywords = keywords

    def forward(self, *args: object) -> torch.Tensor:
        *inputs, target = args
        return self.loss(call_model(self.model, tuple(inputs), self.keywords), target)  # type: ignore[operator]
