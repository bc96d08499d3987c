"""A Conformer speech recognizer written the way torchaudio writes its Conformer: a 4× Conv2d
subsampling front end over 80 log-mel features, layers of a half-step feed-forward (LayerNorm,
Linear, SiLU, Linear), self-attention by nn.MultiheadAttention with a key padding mask from
the utterances' lengths, a convolution module (pointwise Conv1d, GLU, a 31-tap depthwise
Conv1d, BatchNorm1d, SiLU, pointwise Conv1d), a second half-step feed-forward and a final
LayerNorm, with CTC loss over the padded batch. Conformer-S (d 144) and -M (d 256), 16 layers
each."""
import torch
import torch.nn.functional as F
from torch import nn

FEATURES, FRAMES, VOCAB, LABELS = 80, 1000, 256, 60


class FeedForward(nn.Module):
    def __init__(self, d, hidden, dropout):
        super().__init__()
        self.sequential = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, hidden), nn.SiLU(),
                                        nn.Dropout(dropout), nn.Linear(hidden, d),
                                        nn.Dropout(dropout))

    def forward(self, x):
        return self.sequential(x)


class ConvModule(nn.Module):
    def __init__(self, d, kernel, dropout):
        super().__init__()
        self.layer_norm = nn.LayerNorm(d)
        self.sequential = nn.Sequential(
            nn.Conv1d(d, 2 * d, 1, bias=False), nn.GLU(dim=1),
            nn.Conv1d(d, d, kernel, padding=(kernel - 1) // 2, groups=d, bias=False),
            nn.BatchNorm1d(d), nn.SiLU(), nn.Conv1d(d, d, 1, bias=False), nn.Dropout(dropout))

    def forward(self, x):  # (B, T, D)
        return self.sequential(self.layer_norm(x).transpose(1, 2)).transpose(1, 2)


class ConformerLayer(nn.Module):
    def __init__(self, d, heads, ffn, kernel, dropout):
        super().__init__()
        self.ffn1 = FeedForward(d, ffn, dropout)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.self_attn = nn.MultiheadAttention(d, heads, dropout=dropout)
        self.self_attn_dropout = nn.Dropout(dropout)
        self.conv_module = ConvModule(d, kernel, dropout)
        self.ffn2 = FeedForward(d, ffn, dropout)
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, x, key_padding_mask):  # x (T, B, D), as torchaudio keeps it
        x = 0.5 * self.ffn1(x) + x
        residual = x
        x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        x = self.self_attn_dropout(x) + residual
        x = x + self.conv_module(x.transpose(0, 1)).transpose(0, 1)
        x = 0.5 * self.ffn2(x) + x
        return self.final_layer_norm(x)


class Subsampling(nn.Module):
    """Two 3×3 convolutions of stride 2 over (time, frequency), then a projection."""

    def __init__(self, d):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, d, 3, 2), nn.ReLU(), nn.Conv2d(d, d, 3, 2),
                                  nn.ReLU())
        self.out = nn.Linear(d * (((FEATURES - 1) // 2 - 1) // 2), d)

    def forward(self, x, lengths):  # x (B, T, F)
        x = self.conv(x.unsqueeze(1))
        b, c, t, f = x.shape
        return self.out(x.transpose(1, 2).reshape(b, t, c * f)), ((lengths - 1) // 2 - 1) // 2


class ConformerCTC(nn.Module):
    def __init__(self, d=144, heads=4, ffn=576, layers=16, kernel=31, dropout=0.1):
        super().__init__()
        self.subsampling = Subsampling(d)
        self.dropout = nn.Dropout(dropout)
        self.conformer_layers = nn.ModuleList(
            ConformerLayer(d, heads, ffn, kernel, dropout) for _ in range(layers))
        self.head = nn.Linear(d, VOCAB)

    def forward(self, features, lengths):
        x, lengths = self.subsampling(features, lengths)
        mask = torch.arange(x.shape[1], device=x.device)[None, :] >= lengths[:, None]
        x = self.dropout(x).transpose(0, 1)
        for layer in self.conformer_layers:
            x = layer(x, mask)
        return self.head(x.transpose(0, 1)), lengths


def _batch(n):
    g = torch.Generator().manual_seed(n)
    lengths = torch.randint(int(0.7 * FRAMES), FRAMES + 1, (n,), generator=g)
    lengths[0] = FRAMES
    features = torch.randn(n, FRAMES, FEATURES, generator=g)
    features *= (torch.arange(FRAMES)[None, :] < lengths[:, None]).unsqueeze(-1)
    labels = torch.randint(1, VOCAB, (n, LABELS), generator=g)
    return (features, lengths), labels


def _loss(output, labels):
    logits, lengths = output
    log_probs = logits.float().log_softmax(-1).transpose(0, 1)
    label_lengths = torch.full((labels.shape[0],), labels.shape[1], dtype=torch.long,
                               device=labels.device)
    return F.ctc_loss(log_probs, labels, lengths, label_lengths, zero_infinity=True)


def build():
    return {"model": ConformerCTC(), "make_batch": _batch, "loss": _loss, "batch_size": 64,
            "name": "conformer-s-ctc"}


def build_medium():
    return {"model": ConformerCTC(d=256, ffn=1024), "make_batch": _batch, "loss": _loss,
            "batch_size": 64, "name": "conformer-m-ctc"}
