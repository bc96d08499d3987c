"""A GRU language model: embedding, a two-layer nn.GRU, a softmax over the vocabulary."""

import torch
from torch import nn


class GruLM(nn.Module):
    def __init__(self, vocab=32000, emb=512, hidden=1024, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.rnn = nn.GRU(emb, hidden, num_layers=layers, batch_first=True, dropout=0.1)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        h, _ = self.rnn(self.embed(tokens))
        return self.out(h)


def _batch(n):
    return (torch.randint(0, 32000, (n, 128)),), torch.randint(0, 32000, (n, 128))


def build():
    return {"model": GruLM(), "make_batch": _batch, "batch_size": 64, "name": "gru-lm",
            "tokens_per_sample": 128}


def build_small():
    return {"model": GruLM(hidden=512), "make_batch": _batch, "batch_size": 64,
            "name": "gru-lm-small", "tokens_per_sample": 128}
