"""A fifth held-out set: models written as their users write them, each declared here before
it was first profiled. What is new in them: instance normalization behind reflection padding
(a style-transfer network), an adaptive softmax computing its loss in forward, a
hypernetwork's per-sample weights applied by `bmm`, a Glow step (an invertible 1×1
convolution built from its LU factors, its log-determinant in the loss), a linear-chain CRF's
forward algorithm in a Python loop over time, grouped convolutions with squeeze-and-excitation
and stochastic depth, T5's relative-position bias added to hand-written attention, LoRA
adapters on a frozen linear, attention over each query's top-k keys only, a convolution with
circular padding, and cross-attention whose keys and values are narrower than its queries.
`EXPECT`: family → {unit: class; "!": classes that must appear nowhere}."""

import math

import torch
import torch.nn.functional as F
from torch import nn

D, CLASSES = 64, 10

EXPECT = {
    "style_transfer": {"conv2d": "conv", "instance_norm": "norm", "pad": "elementwise",
                       "upsample_nearest2d": "elementwise", "!": {"attention", "gemm"}},
    # the loss's log-softmax over a head and its tail clusters: no attention
    "adaptive_softmax": {"embedding": "embedding", "linear": "gemm",
                         "log_softmax": "elementwise", "!": {"attention", "conv"}},
    "hypernet": {"linear": "gemm", "bmm": "gemm", "!": {"attention", "conv"}},
    # P·L·U of a C × C weight is a tiny GEMM; the coupling's network is convolutions
    "glow": {"conv2d": "conv", "matmul": "gemm", "!": {"attention"}},
    "bilstm_crf": {"embedding": "embedding", "lstm": "rnn", "linear": "gemm",
                   "logsumexp": "elementwise", "!": {"attention", "conv"}},
    "resnext_se": {"conv2d": "conv", "batch_norm": "norm", "linear": "gemm",
                   "sigmoid": "elementwise", "!": {"attention"}},
    "t5_relbias": {"embedding": "embedding", "linear": "gemm", "matmul": "attention",
                   "softmax": "attention", "!": {"conv"}},
    "lora": {"linear": "gemm", "matmul": "gemm", "!": {"attention", "conv"}},
    # still attention: a softmax over scores whose values it weighs, top-k keys each
    "topk_attention": {"einsum": "attention", "softmax": "attention", "linear": "gemm",
                       "topk": "elementwise", "!": {"conv"}},
    "circular_conv": {"conv1d": "conv", "linear": "gemm", "!": {"attention"}},
    "cross_kdim": {"linear": "gemm", "layer_norm": "norm", "softmax": "attention",
                   "!": {"conv"}},
}


def _labels(n):
    return torch.randint(0, CLASSES, (n,))


# --- a fast style-transfer network (Johnson et al.): reflection padding, instance norm,
# residual blocks, nearest upsampling; trained on an image target

class ConvIN(nn.Module):
    def __init__(self, cin, cout, k, stride=1):
        super().__init__()
        self.pad = nn.ReflectionPad2d(k // 2)
        self.conv = nn.Conv2d(cin, cout, k, stride)
        self.norm = nn.InstanceNorm2d(cout, affine=True)

    def forward(self, x):
        return F.relu(self.norm(self.conv(self.pad(x))))


class StyleNet(nn.Module):
    def __init__(self, c=32):
        super().__init__()
        self.down = nn.Sequential(ConvIN(3, c, 9), ConvIN(c, 2 * c, 3, 2),
                                  ConvIN(2 * c, 4 * c, 3, 2))
        self.res = nn.ModuleList(nn.Sequential(ConvIN(4 * c, 4 * c, 3), ConvIN(4 * c, 4 * c, 3))
                                 for _ in range(3))
        self.up = nn.Sequential(nn.Upsample(scale_factor=2), ConvIN(4 * c, 2 * c, 3),
                                nn.Upsample(scale_factor=2), ConvIN(2 * c, c, 3))
        self.out = nn.Sequential(nn.ReflectionPad2d(4), nn.Conv2d(c, 3, 9))

    def forward(self, x):
        h = self.down(x)
        for block in self.res:
            h = h + block(h)
        return self.out(self.up(h))


def style_transfer():
    return StyleNet(), lambda n: (torch.randn(n, 3, 64, 64), torch.randn(n, 3, 64, 64))


# --- a word LM with an adaptive softmax: the loss comes out of forward

class AdaptiveLM(nn.Module):
    def __init__(self, vocab=20000):
        super().__init__()
        self.emb = nn.Embedding(vocab, D)
        self.proj = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))
        self.out = nn.AdaptiveLogSoftmaxWithLoss(D, vocab, cutoffs=[200, 2000], div_value=4.0)

    def forward(self, tokens, targets):
        h = self.proj(self.emb(tokens))
        return self.out(h.flatten(0, 1), targets.flatten()).loss


def adaptive_softmax():
    return AdaptiveLM(), lambda n: (torch.randint(0, 20000, (n, 32)),
                                    torch.randint(0, 20000, (n, 32)))


# --- a hypernetwork: a task embedding generates each sample's weights

class HyperNet(nn.Module):
    def __init__(self, tasks=16, hidden=32):
        super().__init__()
        self.task = nn.Linear(tasks, 128)
        self.gen_w = nn.Linear(128, hidden * D)
        self.gen_b = nn.Linear(128, hidden)
        self.head = nn.Linear(hidden, CLASSES)
        self.hidden = hidden

    def forward(self, x, task):
        z = torch.relu(self.task(task))
        w = self.gen_w(z).view(-1, self.hidden, D)
        h = torch.bmm(w, x.unsqueeze(-1)).squeeze(-1) + self.gen_b(z)
        return self.head(torch.relu(h))


def hypernet():
    def batch(n):
        task = F.one_hot(torch.randint(0, 16, (n,)), 16).float()
        return (torch.randn(n, D), task), _labels(n)
    return HyperNet(), batch


# --- a Glow step: actnorm, an invertible 1×1 convolution from its LU factors, an affine
# coupling; the negative log-likelihood computed in forward

class InvConv(nn.Module):
    def __init__(self, c):
        super().__init__()
        w = torch.linalg.qr(torch.randn(c, c))[0]
        p, lower, upper = torch.linalg.lu(w)
        s = torch.diagonal(upper)
        self.register_buffer("p", p)
        self.register_buffer("sign_s", torch.sign(s))
        self.register_buffer("mask", torch.triu(torch.ones(c, c), 1))
        self.lower = nn.Parameter(lower)
        self.upper = nn.Parameter(torch.triu(upper, 1))
        self.log_s = nn.Parameter(torch.log(s.abs()))

    def forward(self, x):
        c = x.shape[1]
        lower = self.lower * self.mask.T + torch.eye(c, device=x.device)
        upper = self.upper * self.mask + torch.diag(self.sign_s * self.log_s.exp())
        w = self.p @ lower @ upper
        logdet = x.shape[2] * x.shape[3] * self.log_s.sum()
        return F.conv2d(x, w.view(c, c, 1, 1)), logdet


class Coupling(nn.Module):
    def __init__(self, c, hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(c // 2, hidden, 3, padding=1), nn.ReLU(),
                                 nn.Conv2d(hidden, hidden, 1), nn.ReLU(),
                                 nn.Conv2d(hidden, c, 3, padding=1))

    def forward(self, x):
        a, b = x.chunk(2, 1)
        log_s, t = self.net(a).chunk(2, 1)
        s = torch.sigmoid(log_s + 2)
        return torch.cat([a, (b + t) * s], 1), torch.log(s).flatten(1).sum(1)


class Glow(nn.Module):
    def __init__(self, c=12, steps=4):
        super().__init__()
        self.inv = nn.ModuleList(InvConv(c) for _ in range(steps))
        self.coup = nn.ModuleList(Coupling(c) for _ in range(steps))
        self.loc = nn.Parameter(torch.zeros(1, c, 1, 1))
        self.log_scale = nn.Parameter(torch.zeros(1, c, 1, 1))

    def forward(self, x):
        # squeeze: 3 × 32 × 32 → 12 × 16 × 16
        n = x.shape[0]
        x = x.view(n, 3, 16, 2, 16, 2).permute(0, 1, 3, 5, 2, 4).reshape(n, 12, 16, 16)
        z = (x + self.loc) * self.log_scale.exp()
        logdet = 256 * self.log_scale.sum() * torch.ones(n, device=x.device)
        for inv, coup in zip(self.inv, self.coup, strict=True):
            z, ld = inv(z)
            logdet = logdet + ld
            z, ld = coup(z)
            logdet = logdet + ld
        prior = -0.5 * (z ** 2 + math.log(2 * math.pi)).flatten(1).sum(1)
        return -(prior + logdet).mean() / (3 * 32 * 32)


def glow():
    return Glow(), lambda n: (torch.rand(n, 3, 32, 32) - 0.5, None)


# --- a BiLSTM-CRF tagger: the CRF's partition function by the forward algorithm, a Python
# loop over the time steps

class BiLSTMCRF(nn.Module):
    def __init__(self, vocab=5000, tags=9):
        super().__init__()
        self.emb = nn.Embedding(vocab, D)
        self.lstm = nn.LSTM(D, D, batch_first=True, bidirectional=True)
        self.emit = nn.Linear(2 * D, tags)
        self.trans = nn.Parameter(torch.randn(tags, tags) * 0.1)

    def forward(self, tokens, tags):
        e = self.emit(self.lstm(self.emb(tokens))[0])          # (B, T, K)
        alpha = e[:, 0]
        for t in range(1, e.shape[1]):
            alpha = torch.logsumexp(alpha.unsqueeze(2) + self.trans + e[:, t].unsqueeze(1), 1)
        log_z = torch.logsumexp(alpha, 1)
        gold = e.gather(2, tags.unsqueeze(2)).squeeze(2).sum(1)
        gold = gold + self.trans[tags[:, :-1], tags[:, 1:]].sum(1)
        return (log_z - gold).mean()


def bilstm_crf():
    return BiLSTMCRF(), lambda n: (torch.randint(0, 5000, (n, 40)), torch.randint(0, 9, (n, 40)))


# --- ResNeXt blocks with squeeze-and-excitation and stochastic depth

class SEBlock(nn.Module):
    def __init__(self, c, groups=8, drop=0.1):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True),
            nn.Conv2d(c, c, 3, padding=1, groups=groups, bias=False), nn.BatchNorm2d(c),
            nn.ReLU(inplace=True), nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c))
        self.fc1, self.fc2 = nn.Linear(c, c // 4), nn.Linear(c // 4, c)
        self.drop = drop

    def forward(self, x):
        h = self.body(x)
        g = torch.sigmoid(self.fc2(F.relu(self.fc1(h.mean((2, 3))))))
        h = h * g[:, :, None, None]
        if self.training and self.drop:
            keep = (torch.rand(x.shape[0], 1, 1, 1, device=x.device) >= self.drop).to(h.dtype)
            h = h * keep / (1 - self.drop)
        return F.relu(x + h)


def resnext_se():
    m = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                      SEBlock(64), SEBlock(64), nn.MaxPool2d(2), SEBlock(64),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, CLASSES))
    return m, lambda n: (torch.randn(n, 3, 32, 32), _labels(n))


# --- T5's attention: a learned bias per relative-position bucket, added to the scores

def _bucket(rel, buckets=32, max_distance=128):
    half = buckets // 2
    ret = (rel > 0).long() * half
    n = rel.abs()
    exact = half // 2
    large = exact + (torch.log(n.float().clamp(min=1) / exact)
                     / math.log(max_distance / exact) * (half - exact)).long()
    return ret + torch.where(n < exact, n, large.clamp(max=half - 1))


class T5Layer(nn.Module):
    def __init__(self, heads=4):
        super().__init__()
        self.h = heads
        self.q, self.k, self.v, self.o = (nn.Linear(D, D, bias=False) for _ in range(4))
        self.rel = nn.Embedding(32, heads)
        self.ln_w = nn.Parameter(torch.ones(D))
        self.ff = nn.Sequential(nn.Linear(D, 4 * D, bias=False), nn.ReLU(),
                                nn.Linear(4 * D, D, bias=False))

    def norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.ln_w

    def forward(self, x):
        b, t, _ = x.shape
        h = self.norm(x)
        q, k, v = (f(h).view(b, t, self.h, -1).transpose(1, 2) for f in (self.q, self.k, self.v))
        pos = torch.arange(t, device=x.device)
        bias = self.rel(_bucket(pos[None, :] - pos[:, None])).permute(2, 0, 1)
        scores = torch.matmul(q, k.transpose(-1, -2)) + bias
        att = F.dropout(torch.softmax(scores.float(), -1).type_as(scores), 0.1, self.training)
        x = x + self.o(torch.matmul(att, v).transpose(1, 2).reshape(b, t, -1))
        return x + self.ff(self.norm(x))


class T5Encoder(nn.Module):
    def __init__(self, vocab=8000):
        super().__init__()
        self.emb = nn.Embedding(vocab, D)
        self.layers = nn.Sequential(T5Layer(), T5Layer())
        self.head = nn.Linear(D, CLASSES)

    def forward(self, tokens):
        return self.head(self.layers(self.emb(tokens)).mean(1))


def t5_relbias():
    return T5Encoder(), lambda n: (torch.randint(0, 8000, (n, 64)), _labels(n))


# --- LoRA: a frozen pretrained linear, a trained low-rank update beside it

class LoRALinear(nn.Module):
    def __init__(self, cin, cout, r=8, alpha=16):
        super().__init__()
        self.base = nn.Linear(cin, cout)
        self.base.requires_grad_(False)
        self.lora_a = nn.Parameter(torch.randn(r, cin) / math.sqrt(cin))
        self.lora_b = nn.Parameter(torch.zeros(cout, r))
        self.scale = alpha / r

    def forward(self, x):
        return self.base(x) + (F.dropout(x, 0.05, self.training) @ self.lora_a.T
                               @ self.lora_b.T) * self.scale


def lora():
    m = nn.Sequential(LoRALinear(D, 256), nn.GELU(), LoRALinear(256, 256), nn.GELU(),
                      LoRALinear(256, CLASSES))
    return m, lambda n: (torch.randn(n, 16, D), torch.randint(0, CLASSES, (n, 16)))


# --- attention over each query's top-k keys: scores, top-k, the values gathered

class TopKAttention(nn.Module):
    def __init__(self, heads=4, k=8):
        super().__init__()
        self.h, self.k = heads, k
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, D)
        self.head = nn.Linear(D, CLASSES)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, -1).permute(2, 0, 3, 1, 4)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
        top, idx = scores.topk(self.k, dim=-1)                      # (b, h, t, k)
        w = torch.softmax(top, -1)
        vals = v.unsqueeze(2).expand(b, self.h, t, t, v.shape[-1])
        picked = vals.gather(3, idx.unsqueeze(-1).expand(*idx.shape, v.shape[-1]))
        o = torch.einsum("bhqk,bhqkd->bhqd", w, picked)
        y = x + self.out(o.transpose(1, 2).reshape(b, t, -1))
        return self.head(y.mean(1))


def topk_attention():
    return TopKAttention(), lambda n: (torch.randn(n, 48, D), _labels(n))


# --- a convolution over a periodic signal: circular padding

def circular_conv():
    m = nn.Sequential(nn.Conv1d(2, 32, 5, padding=2, padding_mode="circular"), nn.GELU(),
                      nn.Conv1d(32, 32, 5, padding=2, padding_mode="circular"), nn.GELU(),
                      nn.Flatten(), nn.Linear(32 * 128, CLASSES))
    return m, lambda n: (torch.randn(n, 2, 128), _labels(n))


# --- cross-attention from queries to a narrower memory (kdim, vdim unlike embed_dim)

class CrossKdim(nn.Module):
    def __init__(self):
        super().__init__()
        self.mem = nn.Linear(24, 32)
        self.att = nn.MultiheadAttention(D, 4, kdim=32, vdim=32, batch_first=True)
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, CLASSES)

    def forward(self, queries, memory):
        m = self.mem(memory)
        h, _ = self.att(queries, m, m)
        return self.head(self.ln(queries + h).mean(1))


def cross_kdim():
    return CrossKdim(), lambda n: ((torch.randn(n, 16, D), torch.randn(n, 40, 24)), _labels(n))
