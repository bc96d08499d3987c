"""A sequence tagger: embeddings, a two-layer bidirectional nn.LSTM, a linear layer over the
tags at every position."""

import torch
from torch import nn


class Tagger(nn.Module):
    def __init__(self, vocab=20000, emb=256, hidden=512, tags=50):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, num_layers=2, batch_first=True, bidirectional=True,
                            dropout=0.2)
        self.out = nn.Linear(2 * hidden, tags)

    def forward(self, tokens):
        h, _ = self.lstm(self.embed(tokens))
        return self.out(h)


def _batch(n):
    return (torch.randint(0, 20000, (n, 128)),), torch.randint(0, 50, (n, 128))


def build():
    return {"model": Tagger(), "make_batch": _batch, "batch_size": 128, "name": "lstm-tagger",
            "tokens_per_sample": 128}


def build_large():
    return {"model": Tagger(hidden=768), "make_batch": _batch, "batch_size": 128,
            "name": "lstm-tagger-wide", "tokens_per_sample": 128}
