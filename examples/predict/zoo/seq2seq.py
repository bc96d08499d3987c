"""A translation model on `nn.Transformer` (the base configuration of "Attention Is All You
Need"): token embeddings scaled by √d with a sinusoidal position table, padding masks for
source and target, the causal mask from `generate_square_subsequent_mask`, a generator to the
target vocabulary and label-smoothed cross-entropy that ignores padding."""

import math

import torch
from torch import nn

PAD, SRC_VOCAB, TGT_VOCAB, LEN = 0, 32000, 32000, 128


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=512):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(1, max_len, d_model)
        pe[0, :, 0::2] = torch.sin(position * div_term)
        pe[0, :, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return self.dropout(x + self.pe[:, :x.size(1)])


class Translator(nn.Module):
    def __init__(self, d_model=512, nhead=8, layers=6, ff=2048):
        super().__init__()
        self.d_model = d_model
        self.src_emb = nn.Embedding(SRC_VOCAB, d_model, padding_idx=PAD)
        self.tgt_emb = nn.Embedding(TGT_VOCAB, d_model, padding_idx=PAD)
        self.pos = PositionalEncoding(d_model)
        self.transformer = nn.Transformer(d_model, nhead, layers, layers, ff, dropout=0.1,
                                          batch_first=True)
        self.generator = nn.Linear(d_model, TGT_VOCAB)

    def forward(self, src, tgt):
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(tgt.size(1), device=tgt.device)
        src_pad, tgt_pad = src == PAD, tgt == PAD
        s = self.pos(self.src_emb(src) * math.sqrt(self.d_model))
        t = self.pos(self.tgt_emb(tgt) * math.sqrt(self.d_model))
        out = self.transformer(s, t, tgt_mask=tgt_mask, src_key_padding_mask=src_pad,
                               tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad,
                               tgt_is_causal=True)
        return self.generator(out)


_criterion = nn.CrossEntropyLoss(ignore_index=PAD, label_smoothing=0.1)


def _loss(logits, tgt_out):
    return _criterion(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1))


def _sentences(n, vocab):
    tokens = torch.randint(1, vocab, (n, LEN))
    lengths = torch.randint(LEN // 2, LEN + 1, (n, 1))
    return tokens.masked_fill(torch.arange(LEN) >= lengths, PAD)


def _batch(n):
    src, tgt = _sentences(n, SRC_VOCAB), _sentences(n, TGT_VOCAB)
    return (src, tgt[:, :-1]), tgt[:, 1:]


def build():
    return {"model": Translator(), "make_batch": _batch, "loss": _loss, "batch_size": 128,
            "name": "transformer-base", "tokens_per_sample": 2 * LEN}


def build_big():
    return {"model": Translator(d_model=1024, nhead=16, ff=4096), "make_batch": _batch,
            "loss": _loss, "batch_size": 128, "name": "transformer-big",
            "tokens_per_sample": 2 * LEN}
