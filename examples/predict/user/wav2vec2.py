"""A wav2vec 2.0 speech encoder fine-tuned with CTC, written the way fairseq and Hugging Face
write it: a feature encoder of seven Conv1d layers over the raw waveform (512 channels,
kernels 10, 3, 3, 3, 3, 2, 2, strides 5, 2, 2, 2, 2, 2, 2; GroupNorm after the first, GELU
after each), a LayerNorm and a Linear projection to the model width, a convolutional
positional embedding (a grouped Conv1d of kernel 128 over the frames, weight-normed), a
post-norm Transformer of self-attention with separate q/k/v projections, softmax by hand,
dropout and a GELU feed-forward, and a character head under CTC loss. Base (768 wide, 12
layers) and a smaller one (512 wide, 8 layers), on 4-second clips at 16 kHz."""
import torch
import torch.nn.functional as F
from torch import nn

SAMPLES, VOCAB, LABELS = 64000, 32, 50


class FeatureEncoder(nn.Module):
    def __init__(self, channels=512):
        super().__init__()
        spec = [(10, 5), (3, 2), (3, 2), (3, 2), (3, 2), (2, 2), (2, 2)]
        self.convs = nn.ModuleList(
            nn.Conv1d(1 if i == 0 else channels, channels, k, stride=s, bias=False)
            for i, (k, s) in enumerate(spec))
        self.norm = nn.GroupNorm(channels, channels)

    def forward(self, wav):
        x = wav.unsqueeze(1)
        for i, conv in enumerate(self.convs):
            x = conv(x)
            if i == 0:
                x = self.norm(x)
            x = F.gelu(x)
        return x.transpose(1, 2)


class SelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.scale = heads, (d // heads) ** -0.5
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.out = nn.Linear(d, d)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        b, t, d = x.shape

        def split(y):
            return y.view(b, t, self.heads, d // self.heads).transpose(1, 2)

        q, k, v = split(self.q(x) * self.scale), split(self.k(x)), split(self.v(x))
        weights = self.dropout(torch.softmax(q @ k.transpose(-1, -2), dim=-1))
        return self.out((weights @ v).transpose(1, 2).reshape(b, t, d))


class Layer(nn.Module):
    def __init__(self, d, heads, ffn):
        super().__init__()
        self.attention = SelfAttention(d, heads)
        self.norm1 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, ffn), nn.GELU(), nn.Dropout(0.1),
                                nn.Linear(ffn, d), nn.Dropout(0.1))
        self.norm2 = nn.LayerNorm(d)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        x = self.norm1(x + self.dropout(self.attention(x)))
        return self.norm2(x + self.ff(x))


class Wav2Vec2CTC(nn.Module):
    def __init__(self, d=768, layers=12, heads=12, ffn=3072):
        super().__init__()
        self.features = FeatureEncoder()
        self.project = nn.Sequential(nn.LayerNorm(512), nn.Linear(512, d), nn.Dropout(0.1))
        self.position = nn.utils.parametrizations.weight_norm(
            nn.Conv1d(d, d, 128, padding=64, groups=16), dim=2)
        self.norm = nn.LayerNorm(d)
        self.layers = nn.ModuleList(Layer(d, heads, ffn) for _ in range(layers))
        self.head = nn.Linear(d, VOCAB)

    def forward(self, wav):
        x = self.project(self.features(wav))
        pos = self.position(x.transpose(1, 2))[:, :, :-1]
        x = self.norm(x + F.gelu(pos).transpose(1, 2))
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def _batch(n):
    g = torch.Generator().manual_seed(n)
    targets = torch.randint(1, VOCAB, (n, LABELS), generator=g)
    return (torch.randn(n, SAMPLES, generator=g),), targets


def _loss(logits, targets):
    log_probs = logits.float().log_softmax(-1).transpose(0, 1)
    n = logits.shape[0]
    frames = torch.full((n,), logits.shape[1], dtype=torch.long, device=targets.device)
    lengths = torch.full((n,), targets.shape[1], dtype=torch.long, device=targets.device)
    return F.ctc_loss(log_probs, targets, frames, lengths, zero_infinity=True)


def build():
    return {"model": Wav2Vec2CTC(), "make_batch": _batch, "loss": _loss, "batch_size": 32,
            "name": "wav2vec2-base-ctc"}


def build_small():
    return {"model": Wav2Vec2CTC(d=512, layers=8, heads=8, ffn=2048), "make_batch": _batch,
            "loss": _loss, "batch_size": 32, "name": "wav2vec2-small-ctc"}
