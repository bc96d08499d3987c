"""A fourth held-out set: models written as their users write them, each declared here before
it was first profiled. What is new in them: a region kept in float32 under autocast, a
max-unpooling decoder (SegNet), a time-major vanilla RNN, an orthogonal parametrization, a
Gaussian-process head solving with a Cholesky factor, embeddings with max_norm, local
response normalization (AlexNet), Gumbel-softmax codes, a padding mask as a second input, a
MoCo queue updated inside forward, a CNN made channels_last in build(), a sequence-first
nn.MultiheadAttention. `EXPECT`: family → {unit: class; "!": classes that must appear
nowhere}."""

import torch
import torch.nn.functional as F
from torch import nn

D, CLASSES = 64, 10

EXPECT = {
    "fp32_region": {"linear": "gemm", "layer_norm": "norm", "softmax": "elementwise"},
    "segnet": {"conv2d": "conv", "max_pool2d_with_indices": "elementwise",
               "max_unpool2d": "elementwise", "batch_norm": "norm"},
    "vanilla_rnn": {"rnn_tanh": "rnn", "linear": "gemm"},
    "orthogonal": {"linear": "gemm", "!": {"attention", "conv"}},
    "gp_head": {"linear": "gemm", "!": {"attention", "conv"}},
    "maxnorm_embedding": {"embedding": "embedding", "linear": "gemm"},
    "alexnet_lrn": {"conv2d": "conv", "linear": "gemm", "!": {"attention"}},
    "gumbel_codes": {"linear": "gemm", "!": {"attention", "conv"}},
    "padding_mask": {"linear": "gemm", "layer_norm": "norm", "!": {"conv"}},
    "moco_queue": {"linear": "gemm", "!": {"attention", "conv"}},
    "channels_last_cnn": {"conv2d": "conv", "batch_norm": "norm", "relu_": "elementwise"},
    "seq_first_mha": {"linear": "gemm", "layer_norm": "norm", "!": {"conv"}},
}


def _tokens(model, length=32, vocab=1000):
    return model, lambda n: (torch.randint(0, vocab, (n, length)),
                             torch.randint(0, CLASSES, (n,)))


# --- a region kept in float32 under autocast (logits and softmax of a router, as many MoE
# and attention implementations write it)

class Fp32Region(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(D, 4 * D)
        self.ln = nn.LayerNorm(4 * D)
        self.score = nn.Linear(4 * D, 8)
        self.out = nn.Linear(4 * D, CLASSES)

    def forward(self, x):
        h = F.gelu(self.inp(x))
        with torch.autocast(device_type=x.device.type, enabled=False):
            h32 = self.ln(h.float())
            w = torch.softmax(self.score(h32), dim=-1)
        h = h * w.mean(-1, keepdim=True).to(h.dtype)
        return self.out(h.mean(1))


def fp32_region():
    return Fp32Region(), lambda n: (torch.randn(n, 24, D), torch.randint(0, CLASSES, (n,)))


# --- SegNet: max pooling's indices carried to the decoder's unpooling

class SegNet(nn.Module):
    def __init__(self, c=32):
        super().__init__()
        self.enc1 = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU())
        self.enc2 = nn.Sequential(nn.Conv2d(c, 2 * c, 3, padding=1), nn.BatchNorm2d(2 * c),
                                  nn.ReLU())
        self.pool = nn.MaxPool2d(2, return_indices=True)
        self.unpool = nn.MaxUnpool2d(2)
        self.dec2 = nn.Sequential(nn.Conv2d(2 * c, c, 3, padding=1), nn.BatchNorm2d(c),
                                  nn.ReLU())
        self.dec1 = nn.Conv2d(c, 5, 3, padding=1)

    def forward(self, x):
        h, i1 = self.pool(self.enc1(x))
        h, i2 = self.pool(self.enc2(h))
        h = self.dec2(self.unpool(h, i2))
        return self.dec1(self.unpool(h, i1))


def segnet():
    return SegNet(), lambda n: (torch.randn(n, 3, 64, 64), torch.randint(0, 5, (n, 64, 64)))


# --- a vanilla (tanh) RNN fed time-major, as nn.RNN takes by default

class TimeMajorRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(D, 2 * D, num_layers=2)
        self.head = nn.Linear(2 * D, CLASSES)

    def forward(self, x):               # x: (time, batch, features)
        out, _ = self.rnn(x)
        return self.head(out[-1])


def vanilla_rnn():
    return TimeMajorRNN(), lambda n: (torch.randn(48, n, D), torch.randint(0, CLASSES, (n,)))


# --- an orthogonal parametrization (its weight rebuilt from a matrix exponential or
# Householder product every step)

class Orthogonal(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.utils.parametrizations.orthogonal(nn.Linear(D, D))
        self.b = nn.utils.parametrizations.orthogonal(nn.Linear(D, D))
        self.head = nn.Linear(D, CLASSES)

    def forward(self, x):
        return self.head(torch.tanh(self.b(torch.tanh(self.a(x)))))


def orthogonal():
    return Orthogonal(), lambda n: (torch.randn(n, D), torch.randint(0, CLASSES, (n,)))


# --- deep kernel learning: an RBF kernel over learned features, a Cholesky solve, the
# marginal likelihood's loss computed in forward

class GPHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.feat = nn.Sequential(nn.Linear(D, 128), nn.ReLU(), nn.Linear(128, 16))
        self.log_ls = nn.Parameter(torch.zeros(()))
        self.log_noise = nn.Parameter(torch.tensor(-2.0))

    def forward(self, x, y):
        z = self.feat(x).float()
        k = torch.exp(-torch.cdist(z, z).pow(2) / (2 * self.log_ls.exp() ** 2))
        k = k + (self.log_noise.exp() + 1e-4) * torch.eye(len(z), device=z.device)
        chol = torch.linalg.cholesky(k)
        alpha = torch.cholesky_solve(y.unsqueeze(-1), chol)
        return (0.5 * (y.unsqueeze(-1) * alpha).sum()
                + torch.log(torch.diagonal(chol)).sum()) / len(z)


def _gp_batch(n):
    y = torch.randn(n)
    return (torch.randn(n, D), y), y


def gp_head():
    return {"model": GPHead(), "make_batch": _gp_batch,
            "loss": lambda out, _target: out}


# --- embeddings renormalized to max_norm in forward (embedding_renorm_, in place)

class MaxNormEmbedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(1000, D, max_norm=1.0)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.ReLU(), nn.Linear(4 * D, CLASSES))

    def forward(self, ids):
        return self.mlp(self.emb(ids).mean(1))


def maxnorm_embedding():
    return _tokens(MaxNormEmbedding())


# --- AlexNet's local response normalization

class AlexNetLRN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 48, 5, stride=2, padding=2), nn.ReLU(),
            nn.LocalResponseNorm(5), nn.MaxPool2d(2),
            nn.Conv2d(48, 96, 3, padding=1), nn.ReLU(),
            nn.LocalResponseNorm(5), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Dropout(), nn.Linear(96 * 8 * 8, 256), nn.ReLU(),
                                        nn.Linear(256, CLASSES))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def alexnet_lrn():
    return AlexNetLRN(), lambda n: (torch.randn(n, 3, 64, 64),
                                    torch.randint(0, CLASSES, (n,)))


# --- discrete codes drawn with Gumbel-softmax (straight-through)

class GumbelCodes(nn.Module):
    def __init__(self, codes=32):
        super().__init__()
        self.enc = nn.Linear(D, 8 * codes)
        self.book = nn.Linear(codes, D, bias=False)
        self.dec = nn.Linear(8 * D, CLASSES)
        self.codes = codes

    def forward(self, x):
        logits = self.enc(x).view(len(x), 8, self.codes)
        onehot = F.gumbel_softmax(logits, tau=0.5, hard=True)
        return self.dec(self.book(onehot).flatten(1))


def gumbel_codes():
    return GumbelCodes(), lambda n: (torch.randn(n, D), torch.randint(0, CLASSES, (n,)))


# --- a padding mask handed in beside the tokens, as a tokenizer's attention mask is

class MaskedEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(1000, D)
        layer = nn.TransformerEncoderLayer(D, 4, 4 * D, batch_first=True, dropout=0.1)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(D, CLASSES)

    def forward(self, ids, pad):
        h = self.enc(self.emb(ids), src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(h.dtype)
        return self.head((h * keep).sum(1) / keep.sum(1).clamp(min=1))


def _padded(n, length=40):
    lengths = torch.randint(length // 2, length + 1, (n,))
    pad = torch.arange(length)[None, :] >= lengths[:, None]
    return (torch.randint(0, 1000, (n, length)), pad), torch.randint(0, CLASSES, (n,))


def padding_mask():
    return MaskedEncoder(), _padded


# --- MoCo: a momentum key encoder and a queue of keys, both updated inside forward

class MoCo(nn.Module):
    def __init__(self, queue=1024, m=0.99, t=0.07):
        super().__init__()
        self.q = nn.Sequential(nn.Linear(D, 256), nn.ReLU(), nn.Linear(256, 128))
        self.k = nn.Sequential(nn.Linear(D, 256), nn.ReLU(), nn.Linear(256, 128))
        for p in self.k.parameters():
            p.requires_grad_(False)
        self.register_buffer("queue", F.normalize(torch.randn(128, queue), dim=0))
        self.register_buffer("ptr", torch.zeros((), dtype=torch.long))
        self.m, self.t = m, t

    def forward(self, x1, x2):
        q = F.normalize(self.q(x1), dim=1)
        with torch.no_grad():
            for pk, pq in zip(self.k.parameters(), self.q.parameters(), strict=True):
                pk.mul_(self.m).add_(pq.detach(), alpha=1 - self.m)
            k = F.normalize(self.k(x2), dim=1)
        pos = (q * k).sum(1, keepdim=True)
        neg = q @ self.queue.clone().detach().to(q.dtype)
        logits = torch.cat([pos, neg], 1) / self.t
        with torch.no_grad():  # enqueue, wrapping around the ring
            n, size = len(k), self.queue.shape[1]
            idx = (self.ptr + torch.arange(n, device=k.device)) % size
            self.queue[:, idx] = k.T.to(self.queue.dtype)
            self.ptr.copy_((self.ptr + n) % size)
        return F.cross_entropy(logits, torch.zeros(len(q), dtype=torch.long,
                                                   device=q.device))


def moco_queue():
    return {"model": MoCo(),
            "make_batch": lambda n: ((torch.randn(n, D), torch.randn(n, D)), torch.zeros(n)),
            "loss": lambda out, _target: out}


# --- a CNN made channels_last by its own build(), as the performance guides advise

def channels_last_cnn():
    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o),
                             nn.ReLU(inplace=True))
    model = nn.Sequential(block(3, 32), block(32, 64), nn.MaxPool2d(2), block(64, 128),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, CLASSES))
    model = model.to(memory_format=torch.channels_last)

    def batch(n):
        x = torch.randn(n, 3, 48, 48).contiguous(memory_format=torch.channels_last)
        return x, torch.randint(0, CLASSES, (n,))
    return model, batch


# --- sequence-first multi-head attention (nn.MultiheadAttention's default layout)

class SeqFirst(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(D, 4)
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
        self.head = nn.Linear(D, CLASSES)

    def forward(self, x):               # x: (sequence, batch, features)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        x = x + self.ff(self.ln2(x))
        return self.head(x.mean(0))


def seq_first_mha():
    return SeqFirst(), lambda n: (torch.randn(36, n, D), torch.randint(0, CLASSES, (n,)))
