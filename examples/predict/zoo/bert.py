"""A BERT encoder for masked-language-model pre-training on nn.TransformerEncoder (post-norm,
GELU, dropout), with token, position and segment embeddings and an MLM head over every
position."""

import torch
from torch import nn


class Bert(nn.Module):
    def __init__(self, vocab=30522, dim=768, layers=12, heads=12, seq=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim)
        self.seg = nn.Embedding(2, dim)
        self.norm = nn.LayerNorm(dim)
        self.drop = nn.Dropout(0.1)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.1, activation="gelu",
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.LayerNorm(dim),
                                  nn.Linear(dim, vocab))

    def forward(self, tokens, segments):
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(pos) + self.seg(segments)
        x = self.encoder(self.drop(self.norm(x)))
        return self.head(x)


def _batch(n):
    tokens = torch.randint(0, 30522, (n, 128))
    segments = torch.randint(0, 2, (n, 128))
    return (tokens, segments), torch.randint(0, 30522, (n, 128))


def build():
    return {"model": Bert(), "make_batch": _batch, "batch_size": 64, "name": "bert-encoder",
            "tokens_per_sample": 128}


def build_large():
    return {"model": Bert(dim=1024, layers=24, heads=16), "make_batch": _batch,
            "batch_size": 64, "name": "bert-encoder-large", "tokens_per_sample": 128}
