"""A second set of models held out of the operator classes, written the way training code
writes them (a batch returned as `x, y`, packed sequences, tied weights, scatter-adds, a
codebook's pairwise distances, a hand-written autograd.Function, spectral and weight norm,
a loss computed inside forward, experts looped over in Python, RoPE and a hand-written
RMSNorm): `EXPECT` (family → {unit: class}; "!": classes that must appear nowhere) was
written before they were first profiled. One missed: the VQ-VAE's `cdist` came out
`unknown`; its Euclidean path runs as a GEMM and is classed so since."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import spectral_norm, weight_norm
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

EXPECT = {
    "video3d": {"conv3d": "conv", "batch_norm": "norm", "linear": "gemm", "!": {"attention"}},
    "dcgan_g": {"conv_transpose2d": "conv", "batch_norm": "norm", "!": {"attention", "gemm"}},
    "wavenet": {
        "conv1d": "conv",
        "tanh": "elementwise",
        "sigmoid": "elementwise",
        "!": {"attention", "gemm"},
    },
    "packed_lstm": {"lstm": "rnn", "linear": "gemm", "embedding": "embedding", "!": {"attention"}},
    "tied_lm": {
        "scaled_dot_product_attention": "attention",
        "linear": "gemm",
        "embedding": "embedding",
        "layer_norm": "norm",
    },
    "pointnet": {"conv1d": "conv", "batch_norm": "norm", "linear": "gemm", "!": {"attention"}},
    "gnn_scatter": {"linear": "gemm", "index_add_": "elementwise", "!": {"attention"}},
    "vq_vae": {"conv2d": "conv", "conv_transpose2d": "conv", "cdist": "gemm", "!": {"attention"}},
    "siamese": {"linear": "gemm", "conv2d": "conv", "!": {"attention"}},
    "perceiver_io": {
        "scaled_dot_product_attention": "attention",
        "linear": "gemm",
        "layer_norm": "norm",
    },
    "conformer": {
        "softmax": "attention",
        "conv1d": "conv",
        "linear": "gemm",
        "layer_norm": "norm",
        "batch_norm": "norm",
    },
    "tabtransformer": {
        "embedding": "embedding",
        "linear": "gemm",
        "scaled_dot_product_attention": "attention",
        "layer_norm": "norm",
    },
    "custom_fn": {"linear": "gemm", "!": {"attention"}},
    "spectral_d": {"conv2d": "conv", "!": {"attention"}},
    "loss_inside": {"linear": "gemm", "cross_entropy_loss": "elementwise"},
    "weightnorm_tcn": {"conv1d": "conv", "!": {"attention"}},
    "moe_loop": {
        "linear": "gemm",
        "softmax": "elementwise",
        "topk": "elementwise",
        "!": {"attention"},
    },
    "llama_rope": {
        "scaled_dot_product_attention": "attention",
        "linear": "gemm",
        "rsqrt": "elementwise",
    },
}


def video3d():
    m = nn.Sequential(
        nn.Conv3d(3, 32, 3, padding=1),
        nn.BatchNorm3d(32),
        nn.ReLU(),
        nn.MaxPool3d(2),
        nn.Conv3d(32, 64, 3, padding=1),
        nn.BatchNorm3d(64),
        nn.ReLU(),
        nn.AdaptiveAvgPool3d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )
    return m, lambda n: (torch.randn(n, 3, 8, 32, 32), torch.randint(0, 10, (n,)))


class Generator(nn.Module):
    def __init__(self, nz=64, ngf=32):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf, 3, 4, 2, 1, bias=False),
            nn.Tanh(),
        )

    def forward(self, z):
        return self.main(z)


def dcgan_g():
    return Generator(), lambda n: (torch.randn(n, 64, 1, 1), torch.randn(n, 3, 32, 32))


class WaveBlock(nn.Module):
    def __init__(self, c, d):
        super().__init__()
        self.filt = nn.Conv1d(c, c, 2, dilation=d)
        self.gate = nn.Conv1d(c, c, 2, dilation=d)
        self.res = nn.Conv1d(c, c, 1)
        self.d = d

    def forward(self, x):
        y = F.pad(x, (self.d, 0))
        y = torch.tanh(self.filt(y)) * torch.sigmoid(self.gate(y))
        return x + self.res(y)


class WaveNet(nn.Module):
    def __init__(self, c=64, q=256):
        super().__init__()
        self.inp = nn.Conv1d(1, c, 1)
        self.blocks = nn.Sequential(*[WaveBlock(c, 2**i) for i in range(8)])
        self.out = nn.Conv1d(c, q, 1)

    def forward(self, x):
        return self.out(F.relu(self.blocks(self.inp(x))))


def wavenet():
    return WaveNet(), lambda n: (torch.randn(n, 1, 1024), torch.randint(0, 256, (n, 1024)))


class PackedTagger(nn.Module):
    def __init__(self, v=5000, e=128, h=256, tags=17):
        super().__init__()
        self.emb = nn.Embedding(v, e, padding_idx=0)
        self.rnn = nn.LSTM(e, h, num_layers=2, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * h, tags)

    def forward(self, ids, lengths):
        x = self.emb(ids)
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        y, _ = self.rnn(packed)
        y, _ = pad_packed_sequence(y, batch_first=True, total_length=ids.shape[1])
        return self.out(y).flatten(0, 1)


def packed_lstm():
    def mb(n):
        lengths = torch.randint(8, 64, (n,))
        ids = torch.randint(1, 5000, (n, 64))
        ids[torch.arange(64)[None, :] >= lengths[:, None]] = 0
        return (ids, lengths), torch.randint(0, 17, (n * 64,))

    return PackedTagger(), mb


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TiedLM(nn.Module):
    def __init__(self, v=8000, d=256, L=4, h=4, T=128):
        super().__init__()
        self.tok, self.pos = nn.Embedding(v, d), nn.Embedding(T, d)
        self.blocks = nn.ModuleList(Block(d, h) for _ in range(L))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, v, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x)).flatten(0, 1)


def tied_lm():
    def mb(n):
        ids = torch.randint(0, 8000, (n, 129))
        return ids[:, :-1], ids[:, 1:].flatten()

    return TiedLM(), mb


class PointNet(nn.Module):
    def __init__(self, k=40):
        super().__init__()
        self.feat = nn.Sequential(
            nn.Conv1d(3, 64, 1),
            nn.BatchNorm1d(64),
            nn.ReLU(),
            nn.Conv1d(64, 128, 1),
            nn.BatchNorm1d(128),
            nn.ReLU(),
            nn.Conv1d(128, 1024, 1),
            nn.BatchNorm1d(1024),
            nn.ReLU(),
        )
        self.head = nn.Sequential(
            nn.Linear(1024, 512), nn.BatchNorm1d(512), nn.ReLU(), nn.Dropout(0.3), nn.Linear(512, k)
        )

    def forward(self, pts):
        return self.head(self.feat(pts.transpose(1, 2)).max(dim=2).values)


def pointnet():
    return PointNet(), lambda n: (torch.randn(n, 1024, 3), torch.randint(0, 40, (n,)))


class MPLayer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.msg = nn.Linear(2 * d, d)
        self.upd = nn.Linear(2 * d, d)

    def forward(self, x, edges):
        src, dst = edges
        m = F.relu(self.msg(torch.cat([x[src], x[dst]], dim=-1)))
        agg = torch.zeros_like(x).index_add_(0, dst, m)
        return F.relu(self.upd(torch.cat([x, agg], dim=-1)))


class GNN(nn.Module):
    def __init__(self, d_in=32, d=128, out=8):
        super().__init__()
        self.inp = nn.Linear(d_in, d)
        self.layers = nn.ModuleList(MPLayer(d) for _ in range(3))
        self.out = nn.Linear(d, out)

    def forward(self, x, edges):
        h = self.inp(x)
        for layer in self.layers:
            h = layer(h, edges)
        return self.out(h)


def gnn_scatter():
    def mb(n):  # n graphs of 64 nodes, 256 edges each, batched as one
        nodes = 64 * n
        edges = torch.randint(0, 64, (2, 256 * n)) + (torch.arange(n).repeat_interleave(256) * 64)
        return (torch.randn(nodes, 32), edges), torch.randint(0, 8, (nodes,))

    return GNN(), mb


class VQVAE(nn.Module):
    def __init__(self, k=512, d=64):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 64, 4, 2, 1), nn.ReLU(), nn.Conv2d(64, d, 4, 2, 1))
        self.codebook = nn.Parameter(torch.randn(k, d))
        self.dec = nn.Sequential(
            nn.ConvTranspose2d(d, 64, 4, 2, 1), nn.ReLU(), nn.ConvTranspose2d(64, 3, 4, 2, 1)
        )

    def forward(self, x):
        z = self.enc(x)
        B, D, H, W = z.shape
        flat = z.permute(0, 2, 3, 1).reshape(-1, D)
        idx = torch.cdist(flat, self.codebook).argmin(dim=1)
        q = self.codebook[idx].view(B, H, W, D).permute(0, 3, 1, 2)
        commit = F.mse_loss(z, q.detach()) + F.mse_loss(q, z.detach())
        q = z + (q - z).detach()
        return self.dec(q), commit


def vq_vae():
    m = VQVAE()

    def loss(out, target):
        recon, commit = out
        return F.mse_loss(recon, target) + 0.25 * commit

    def make_batch(n):  # an autoencoder: the image is its own target
        x = torch.randn(n, 3, 32, 32)
        return x, x

    return {"model": m, "make_batch": make_batch, "loss": loss}


class Siamese(nn.Module):
    def __init__(self, d=128):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 32, 3, 2, 1),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3, 2, 1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(64, d),
        )

    def forward(self, a, b):
        za, zb = F.normalize(self.net(a), dim=-1), F.normalize(self.net(b), dim=-1)
        return za @ zb.t() / 0.07


def siamese():
    return Siamese(), lambda n: (
        (torch.randn(n, 3, 64, 64), torch.randn(n, 3, 64, 64)),
        torch.arange(n),
    )


class PerceiverIO(nn.Module):
    def __init__(self, d=256, latents=64, h=4, classes=10):
        super().__init__()
        self.latents = nn.Parameter(torch.randn(latents, d))
        self.inp = nn.Linear(16, d)
        self.q, self.kv = nn.Linear(d, d), nn.Linear(d, 2 * d)
        self.ln_in, self.ln_lat = nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_attn = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(d, h, 4 * d, batch_first=True, norm_first=True), 2
        )
        self.out = nn.Linear(d, classes)
        self.h = h

    def forward(self, x):
        B = x.shape[0]
        kv = self.kv(self.ln_in(self.inp(x)))
        k, v = kv.chunk(2, dim=-1)
        q = self.q(self.ln_lat(self.latents)).expand(B, -1, -1)

        def split(t):
            return t.view(B, t.shape[1], self.h, -1).transpose(1, 2)

        lat = F.scaled_dot_product_attention(split(q), split(k), split(v))
        lat = lat.transpose(1, 2).reshape(B, -1, q.shape[-1])
        return self.out(self.self_attn(lat).mean(dim=1))


def perceiver_io():
    return PerceiverIO(), lambda n: (torch.randn(n, 512, 16), torch.randint(0, 10, (n,)))


class ConformerBlock(nn.Module):
    def __init__(self, d=144, h=4, k=15):
        super().__init__()
        self.ff1 = nn.Sequential(
            nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d)
        )
        self.ln_att = nn.LayerNorm(d)
        self.qkv, self.o, self.h = nn.Linear(d, 3 * d), nn.Linear(d, d), h
        self.ln_conv = nn.LayerNorm(d)
        self.pw1 = nn.Conv1d(d, 2 * d, 1)
        self.dw = nn.Conv1d(d, d, k, padding=k // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pw2 = nn.Conv1d(d, d, 1)
        self.ff2 = nn.Sequential(
            nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d)
        )
        self.ln_out = nn.LayerNorm(d)

    def forward(self, x):
        x = x + 0.5 * self.ff1(x)
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln_att(x)).view(B, T, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(C // self.h), dim=-1)
        x = x + self.o((a @ v).transpose(1, 2).reshape(B, T, C))
        c = self.ln_conv(x).transpose(1, 2)
        c = F.glu(self.pw1(c), dim=1)
        c = self.pw2(F.silu(self.bn(self.dw(c))))
        x = x + c.transpose(1, 2)
        return self.ln_out(x + 0.5 * self.ff2(x))


class Conformer(nn.Module):
    def __init__(self, feats=80, d=144, L=4, vocab=128):
        super().__init__()
        self.sub = nn.Sequential(nn.Conv2d(1, d, 3, 2), nn.ReLU(), nn.Conv2d(d, d, 3, 2), nn.ReLU())
        self.proj = nn.Linear(d * (((feats - 1) // 2 - 1) // 2), d)
        self.blocks = nn.Sequential(*[ConformerBlock(d) for _ in range(L)])
        self.out = nn.Linear(d, vocab)

    def forward(self, mel):
        x = self.sub(mel.unsqueeze(1))
        B, C, T, F_ = x.shape
        x = self.proj(x.permute(0, 2, 1, 3).reshape(B, T, C * F_))
        return self.out(self.blocks(x)).log_softmax(-1)


def conformer():
    def mb(n):
        return torch.randn(n, 400, 80), torch.randint(0, 128, (n, 99))

    def loss(logp, target):
        return F.nll_loss(logp.flatten(0, 1), target.flatten())

    return {"model": Conformer(), "make_batch": mb, "loss": loss}


class TabTransformer(nn.Module):
    def __init__(self, cards=(10, 20, 50, 100, 7, 12, 31, 5), d=32, h=4, L=4, conts=6):
        super().__init__()
        self.embs = nn.ModuleList(nn.Embedding(c, d) for c in cards)
        layer = nn.TransformerEncoderLayer(d, h, 4 * d, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
        self.ln = nn.LayerNorm(conts)
        self.mlp = nn.Sequential(
            nn.Linear(d * len(cards) + conts, 256), nn.ReLU(), nn.Linear(256, 2)
        )

    def forward(self, cat, cont):
        x = torch.stack([e(cat[:, i]) for i, e in enumerate(self.embs)], dim=1)
        x = self.enc(x).flatten(1)
        return self.mlp(torch.cat([x, self.ln(cont)], dim=1))


def tabtransformer():
    cards = (10, 20, 50, 100, 7, 12, 31, 5)

    def mb(n):
        cat = torch.stack([torch.randint(0, c, (n,)) for c in cards], dim=1)
        return (cat, torch.randn(n, 6)), torch.randint(0, 2, (n,))

    return TabTransformer(), mb


class MyLinearFn(torch.autograd.Function):
    # under autocast a Function needs these (PyTorch's AMP docs): without them its backward
    # gets bf16 gradients against the fp32 weights and fails
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w.t()

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w, g.t() @ x


class CustomNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(512, 256) * 0.02)
        self.head = nn.Linear(512, 10)

    def forward(self, x):
        return self.head(torch.relu(MyLinearFn.apply(x, self.w)))


def custom_fn():
    return CustomNet(), lambda n: (torch.randn(n, 256), torch.randint(0, 10, (n,)))


def spectral_d():
    m = nn.Sequential(
        spectral_norm(nn.Conv2d(3, 64, 4, 2, 1)),
        nn.LeakyReLU(0.2),
        spectral_norm(nn.Conv2d(64, 128, 4, 2, 1)),
        nn.LeakyReLU(0.2),
        nn.Flatten(),
        spectral_norm(nn.Linear(128 * 8 * 8, 1)),
    )
    return m, lambda n: (torch.randn(n, 3, 32, 32), torch.rand(n, 1))


class LossInside(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 5))

    def forward(self, x, labels):
        return F.cross_entropy(self.net(x), labels)


def loss_inside():
    return LossInside(), lambda n: (torch.randn(n, 64), torch.randint(0, 5, (n,)))


def weightnorm_tcn():
    layers = []
    c = 1
    for i in range(6):
        layers += [weight_norm(nn.Conv1d(c, 64, 3, padding=2**i, dilation=2**i)), nn.ReLU()]
        c = 64
    m = nn.Sequential(*layers, nn.Conv1d(64, 1, 1))
    return m, lambda n: (torch.randn(n, 1, 2048), torch.randn(n, 1, 2048))


class LoopMoE(nn.Module):
    def __init__(self, d=256, e=8, k=2):
        super().__init__()
        self.gate = nn.Linear(d, e)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)) for _ in range(e)
        )
        self.k = k
        self.out = nn.Linear(d, 10)

    def forward(self, x):
        B, T, D = x.shape
        flat = x.reshape(-1, D)
        probs = torch.softmax(self.gate(flat), dim=-1)
        w, idx = probs.topk(self.k, dim=-1)
        y = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows, slot = (idx == e).nonzero(as_tuple=True)
            if rows.numel():
                y.index_add_(0, rows, expert(flat[rows]) * w[rows, slot, None])
        return self.out(y.view(B, T, D).mean(1))


def moe_loop():
    return LoopMoE(), lambda n: (torch.randn(n, 64, 256), torch.randint(0, 10, (n,)))


def rms(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, cos, sin):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class LlamaBlock(nn.Module):
    def __init__(self, d=256, h=8):
        super().__init__()
        self.h = h
        self.n1, self.n2 = nn.Parameter(torch.ones(d)), nn.Parameter(torch.ones(d))
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(d, 688, bias=False), nn.Linear(d, 688, bias=False)
        self.w2 = nn.Linear(688, d, bias=False)

    def forward(self, x, cos, sin):
        B, T, D = x.shape
        hx = rms(x, self.n1)
        q, k, v = (
            proj(hx).view(B, T, self.h, -1).transpose(1, 2) for proj in (self.wq, self.wk, self.wv)
        )
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(B, T, D))
        hx = rms(x, self.n2)
        return x + self.w2(F.silu(self.w1(hx)) * self.w3(hx))


class TinyLlama(nn.Module):
    def __init__(self, v=4096, d=256, L=4, T=256):
        super().__init__()
        self.emb = nn.Embedding(v, d)
        self.blocks = nn.ModuleList(LlamaBlock(d) for _ in range(L))
        self.norm = nn.Parameter(torch.ones(d))
        self.lm = nn.Linear(d, v, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, 32, 2).float() / 32))
        ang = torch.outer(torch.arange(T).float(), inv)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, ids):
        x = self.emb(ids)
        T = ids.shape[1]
        for b in self.blocks:
            x = b(x, self.cos[:T], self.sin[:T])
        return self.lm(rms(x, self.norm)).flatten(0, 1)


def llama_rope():
    def mb(n):
        ids = torch.randint(0, 4096, (n, 257))
        return ids[:, :-1], ids[:, 1:].reshape(-1)

    return TinyLlama(), mb
