"""Models held out of the operator classes (package docstring): written, with `EXPECT`
(family → {unit: class}), after the classes' last correction and before they were first
profiled."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECT = {
    "deit": {"matmul": "attention", "softmax": "attention", "linear": "gemm"},
    "einsum_bqhd": {"einsum": "attention", "softmax": "attention", "linear": "gemm"},
    # the router's softmax is no attention
    "switch_moe": {"softmax": "elementwise", "linear": "gemm"},
    "capsule": {"softmax": "elementwise"},  # routing by agreement is no attention
    "segformer": {"matmul": "attention", "conv2d": "conv", "layer_norm": "norm"},
    "pointnet": {"bmm": "gemm", "conv1d": "conv", "batch_norm": "norm"},
    "gat": {"linear": "gemm"},
    "nerf": {"linear": "gemm", "sin": "elementwise", "cos": "elementwise"},
    "convnext_v2": {"conv2d": "conv", "linalg_vector_norm": "elementwise", "layer_norm": "norm"},
    "ctc": {"lstm": "rnn", "ctc_loss": "unknown"},
}


class DeiTAttention(nn.Module):  # timm's Attention, as written there
    def __init__(self, dim, heads=6):
        super().__init__()
        self.h, self.scale = heads, (dim // heads) ** -0.5
        self.qkv, self.proj, self.drop = (
            nn.Linear(dim, dim * 3),
            nn.Linear(dim, dim),
            nn.Dropout(0.1),
        )

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = self.drop(attn.softmax(dim=-1))
        return self.proj((attn @ v).transpose(1, 2).reshape(B, N, C))


class Deit(nn.Module):
    def __init__(self, dim=192, depth=3):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 16, 16)
        self.tokens = nn.Parameter(torch.zeros(1, 2, dim))
        self.blocks = nn.ModuleList(
            [
                nn.ModuleList(
                    [
                        nn.LayerNorm(dim),
                        DeiTAttention(dim),
                        nn.LayerNorm(dim),
                        nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)),
                    ]
                )
                for _ in range(depth)
            ]
        )
        self.head, self.dist = nn.Linear(dim, 100), nn.Linear(dim, 100)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.tokens.expand(x.shape[0], -1, -1), x], 1)
        for n1, a, n2, f in self.blocks:
            x = x + a(n1(x))
            x = x + f(n2(x))
        return (self.head(x[:, 0]) + self.dist(x[:, 1])) / 2


class EinsumAttention(nn.Module):  # JAX-ported layout: (batch, len, heads, dim)
    def __init__(self, d=256, h=4):
        super().__init__()
        self.h = h
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = (m(x).view(B, T, self.h, -1) for m in (self.q, self.k, self.v))
        logits = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(D // self.h)
        w = F.softmax(logits, dim=-1)
        return self.o(torch.einsum("bhqk,bkhd->bqhd", w, v).reshape(B, T, D))


class EinsumNet(nn.Module):
    def __init__(self, d=256):
        super().__init__()
        self.emb = nn.Embedding(1000, d)
        self.layers = nn.ModuleList([EinsumAttention(d) for _ in range(3)])
        self.head = nn.Linear(d, 1000)

    def forward(self, x):
        h = self.emb(x)
        for layer in self.layers:
            h = h + layer(h)
        return self.head(h)


class SwitchMoE(nn.Module):  # einsum dispatch and combine, top-1 routing, a rank-3 router softmax
    def __init__(self, d=256, experts=8, cap=64):
        super().__init__()
        self.router = nn.Linear(d, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, d, 4 * d) * 0.02)
        self.w2 = nn.Parameter(torch.randn(experts, 4 * d, d) * 0.02)
        self.E, self.cap = experts, cap

    def forward(self, x):
        probs = F.softmax(self.router(x), dim=-1)  # B T E
        gate, idx = probs.max(-1)
        mask = F.one_hot(idx, self.E).to(x.dtype)  # B T E
        pos = (torch.cumsum(mask, 1) * mask).long().sum(-1) - 1  # B T
        keep = (pos < self.cap).to(x.dtype)
        disp = mask * keep.unsqueeze(-1)
        slot = F.one_hot(pos.clamp(0, self.cap - 1), self.cap).to(x.dtype)  # B T C
        dispatch = torch.einsum("bte,btc->btec", disp, slot)
        xin = torch.einsum("btec,btd->becd", dispatch, x)
        h = torch.einsum("becd,edf->becf", xin, self.w1)
        out = torch.einsum("becf,efd->becd", F.gelu(h), self.w2)
        return torch.einsum("btec,becd->btd", dispatch * gate[..., None, None], out)


class SwitchNet(nn.Module):
    def __init__(self, d=256):
        super().__init__()
        self.emb = nn.Embedding(1000, d)
        self.layers = nn.ModuleList(
            [nn.ModuleList([nn.LayerNorm(d), SwitchMoE(d)]) for _ in range(3)]
        )
        self.head = nn.Linear(d, 1000)

    def forward(self, x):
        h = self.emb(x)
        for n, m in self.layers:
            h = h + m(n(h))
        return self.head(h)


class Capsules(nn.Module):  # dynamic routing between capsules (Sabour et al.)
    def __init__(self, n_in=1152, d_in=8, n_out=10, d_out=16, iters=3):
        super().__init__()
        self.conv = nn.Conv2d(1, 256, 9)
        self.prim = nn.Conv2d(256, 256, 9, stride=2)
        self.W = nn.Parameter(0.01 * torch.randn(1, n_in, n_out, d_out, d_in))
        self.iters = iters

    @staticmethod
    def squash(s, dim=-1):
        n2 = (s**2).sum(dim, keepdim=True)
        return n2 / (1 + n2) * s / torch.sqrt(n2 + 1e-8)

    def forward(self, x):
        u = F.relu(self.conv(x))
        u = (
            self.prim(u)
            .view(x.shape[0], 32, 8, 6, 6)
            .permute(0, 1, 3, 4, 2)
            .reshape(x.shape[0], -1, 8)
        )
        u = self.squash(u)
        u_hat = torch.matmul(self.W, u[:, :, None, :, None]).squeeze(-1)  # B in out d
        b = torch.zeros(u_hat.shape[:3], device=x.device)
        for i in range(self.iters):
            c = F.softmax(b, dim=2)
            v = self.squash((c.unsqueeze(-1) * u_hat).sum(1, keepdim=True))
            if i < self.iters - 1:
                b = b + torch.matmul(u_hat.unsqueeze(-2), v.unsqueeze(-1)).flatten(2)
        return v.squeeze(1).norm(dim=-1)


class EfficientAttention(nn.Module):  # Segformer: keys and values from a strided conv
    def __init__(self, d, h, r):
        super().__init__()
        self.h, self.scale = h, (d // h) ** -0.5
        self.q, self.kv, self.proj = nn.Linear(d, d), nn.Linear(d, 2 * d), nn.Linear(d, d)
        self.sr, self.norm = nn.Conv2d(d, d, r, r), nn.LayerNorm(d)

    def forward(self, x, H, W):
        B, N, C = x.shape
        q = self.q(x).reshape(B, N, self.h, C // self.h).permute(0, 2, 1, 3)
        x_ = self.norm(
            self.sr(x.permute(0, 2, 1).reshape(B, C, H, W)).reshape(B, C, -1).permute(0, 2, 1)
        )
        kv = self.kv(x_).reshape(B, -1, 2, self.h, C // self.h).permute(2, 0, 3, 1, 4)
        k, v = kv[0], kv[1]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        return self.proj((attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, N, C))


class Segformer(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.embed = nn.Conv2d(3, d, 7, 4, 3)
        self.n = nn.LayerNorm(d)
        self.blocks = nn.ModuleList([EfficientAttention(d, 1, 8) for _ in range(2)])
        self.head = nn.Conv2d(d, 19, 1)

    def forward(self, x):
        x = self.embed(x)
        B, C, H, W = x.shape
        t = x.flatten(2).transpose(1, 2)
        for b in self.blocks:
            t = t + b(self.n(t), H, W)
        return F.interpolate(self.head(t.transpose(1, 2).reshape(B, C, H, W)), scale_factor=4.0)


class TNet(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k
        self.f = nn.Sequential(
            nn.Conv1d(k, 64, 1),
            nn.BatchNorm1d(64),
            nn.ReLU(),
            nn.Conv1d(64, 128, 1),
            nn.BatchNorm1d(128),
            nn.ReLU(),
        )
        self.fc = nn.Linear(128, k * k)

    def forward(self, x):
        t = self.fc(self.f(x).max(2)[0]).view(-1, self.k, self.k) + torch.eye(
            self.k, device=x.device
        )
        return torch.bmm(x.transpose(1, 2), t).transpose(1, 2)


class PointNet(nn.Module):
    def __init__(self, classes=40):
        super().__init__()
        self.t3 = TNet(3)
        self.f = nn.Sequential(
            nn.Conv1d(3, 64, 1),
            nn.BatchNorm1d(64),
            nn.ReLU(),
            nn.Conv1d(64, 1024, 1),
            nn.BatchNorm1d(1024),
        )
        self.head = nn.Sequential(nn.Linear(1024, 256), nn.ReLU(), nn.Linear(256, classes))

    def forward(self, x):
        return self.head(self.f(self.t3(x)).max(2)[0])


class GATLayer(nn.Module):  # attention over edges: a softmax by destination via scatter
    def __init__(self, din, dout, heads=4):
        super().__init__()
        self.h, self.d = heads, dout
        self.lin = nn.Linear(din, heads * dout, bias=False)
        self.a_src, self.a_dst = (
            nn.Parameter(torch.randn(heads, dout) * 0.1),
            nn.Parameter(torch.randn(heads, dout) * 0.1),
        )

    def forward(self, x, src, dst):
        h = self.lin(x).view(-1, self.h, self.d)
        e = F.leaky_relu((h * self.a_src).sum(-1)[src] + (h * self.a_dst).sum(-1)[dst], 0.2)
        e = torch.exp(e - e.max())
        den = torch.zeros(x.shape[0], self.h, device=x.device).index_add_(0, dst, e)
        alpha = e / den[dst].clamp(min=1e-9)
        out = torch.zeros_like(h).index_add_(0, dst, h[src] * alpha.unsqueeze(-1))
        return F.elu(out.reshape(x.shape[0], -1))


class GAT(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = GATLayer(128, 64), GATLayer(256, 16)
        self.head = nn.Linear(64, 40)

    def forward(self, x, edges):
        return self.head(self.l2(self.l1(x, *edges), *edges))


class NeRF(nn.Module):
    def __init__(self, freqs=10, w=256):
        super().__init__()
        self.freqs = freqs
        d = 3 + 3 * 2 * freqs
        self.a = nn.Sequential(
            nn.Linear(d, w), nn.ReLU(), *[m for _ in range(4) for m in (nn.Linear(w, w), nn.ReLU())]
        )
        self.b = nn.Sequential(
            nn.Linear(w + d, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(), nn.Linear(w, 4)
        )

    def encode(self, p):
        f = 2.0 ** torch.arange(self.freqs, device=p.device) * math.pi
        x = p[..., None] * f
        return torch.cat([p, torch.sin(x).flatten(-2), torch.cos(x).flatten(-2)], -1)

    def forward(self, p):
        e = self.encode(p)
        return self.b(torch.cat([self.a(e), e], -1))


class GRN(nn.Module):  # ConvNeXt-V2's global response normalization
    def __init__(self, d):
        super().__init__()
        self.g, self.b = (
            nn.Parameter(torch.zeros(1, 1, 1, d)),
            nn.Parameter(torch.zeros(1, 1, 1, d)),
        )

    def forward(self, x):
        gx = torch.norm(x, p=2, dim=(1, 2), keepdim=True)
        nx = gx / (gx.mean(dim=-1, keepdim=True) + 1e-6)
        return self.g * (x * nx) + self.b + x


class CNV2Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.dw, self.n = nn.Conv2d(d, d, 7, padding=3, groups=d), nn.LayerNorm(d)
        self.p1, self.grn, self.p2 = nn.Linear(d, 4 * d), GRN(4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        y = self.n(self.dw(x).permute(0, 2, 3, 1))
        return x + self.p2(self.grn(F.gelu(self.p1(y)))).permute(0, 3, 1, 2)


class ConvNeXtV2(nn.Module):
    def __init__(self, d=96):
        super().__init__()
        self.stem = nn.Conv2d(3, d, 4, 4)
        self.blocks = nn.Sequential(*[CNV2Block(d) for _ in range(3)])
        self.head = nn.Linear(d, 100)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


class CTCNet(nn.Module):
    def __init__(self, mels=80, hid=256, vocab=32):
        super().__init__()
        self.rnn = nn.LSTM(mels, hid, 2, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hid, vocab)

    def forward(self, x):
        return self.out(self.rnn(x)[0]).log_softmax(-1)


def _ctc_loss(out, y):
    n, t = out.shape[:2]
    return F.ctc_loss(
        out.transpose(0, 1),
        y,
        torch.full((n,), t, dtype=torch.long),
        torch.full((n,), y.shape[1], dtype=torch.long),
    )


def _tokens(n):
    return (torch.randint(0, 1000, (n, 128)),), torch.randint(0, 1000, (n, 128))


def deit():
    return Deit(), lambda n: ((torch.randn(n, 3, 224, 224),), torch.randint(0, 100, (n,)))


def einsum_bqhd():
    return EinsumNet(), _tokens


def switch_moe():
    return SwitchNet(), _tokens


def capsule():
    return Capsules(), lambda n: ((torch.randn(n, 1, 28, 28),), torch.randint(0, 10, (n,)))


def segformer():
    return {
        "model": Segformer(),
        "make_batch": lambda n: (
            (torch.randn(n, 3, 128, 128),),
            torch.randint(0, 19, (n, 128, 128)),
        ),
        "batch_size": 8,
    }


def pointnet():
    return PointNet(), lambda n: ((torch.randn(n, 3, 1024),), torch.randint(0, 40, (n,)))


def gat():
    edges = torch.randint(0, 5000, (2, 50000), generator=torch.Generator().manual_seed(1))
    return {
        "model": GAT(),
        "make_batch": lambda n: ((torch.randn(5000, 128), edges), torch.randint(0, 40, (5000,))),
        "batch_size": 1,
    }


def nerf():
    return {
        "model": NeRF(),
        "make_batch": lambda n: ((torch.rand(n, 3),), torch.rand(n, 4)),
        "batch_size": 4096,
    }


def convnext_v2():
    return ConvNeXtV2(), lambda n: ((torch.randn(n, 3, 64, 64),), torch.randint(0, 100, (n,)))


def ctc():
    return {
        "model": CTCNet(),
        "make_batch": lambda n: ((torch.randn(n, 200, 80),), torch.randint(1, 32, (n, 40))),
        "batch_size": 8,
        "loss": _ctc_loss,
    }
