"""A third set of models held out of the operator classes and of the entry point's batch
rules, written as training code writes them: a contrastive loss's similarity matmul beside a
softmax (CLIP, SimCLR), linear attention, an encoder-decoder whose batch is `src, tgt, labels`,
a Fourier layer, a sparse adjacency, sub-pixel upsampling, a spatial transformer's sampler,
patches by `F.unfold`, bagged embeddings with a factorization machine, a GRUCell decoder
loop, non-reentrant activation checkpointing, lazy layers, a TorchScript function,
distillation from a frozen teacher, a channels-last depthwise CNN, nearest-neighbour
upsampling in a feature pyramid, a VAE's reparameterization, a selective scan by cumsum, and
a multi-task target held in a dict. `EXPECT` (family → {unit: class}; "!": classes that must
appear nowhere) was written before any of them was first profiled; each family must also run
through `bench train --op-profile` as written."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

EXPECT = {
    # an image-text similarity matrix is a GEMM over the batch, not attention: no values
    # follow its softmax (the loss's)
    "clip": {"conv2d": "conv", "embedding": "embedding", "linear": "gemm", "matmul": "gemm",
             "!": {"attention"}},
    "simclr": {"conv2d": "conv", "batch_norm": "norm", "linear": "gemm", "matmul": "gemm",
               "!": {"attention"}},
    # kernelized attention: no softmax, its einsums are batched GEMMs
    "linear_attention": {"einsum": "gemm", "linear": "gemm", "elu": "elementwise",
                         "layer_norm": "norm", "!": {"attention"}},
    "enc_dec": {"scaled_dot_product_attention": "attention", "linear": "gemm",
                "embedding": "embedding", "layer_norm": "norm"},
    # cuFFT has no class of its own: the model says it does not understand it
    "fno": {"fft_rfft2": "unknown", "fft_irfft2": "unknown", "conv2d": "conv",
            "!": {"attention"}},
    "sparse_gcn": {"linear": "gemm", "!": {"attention", "conv"}},
    "espcn": {"conv2d": "conv", "!": {"attention", "gemm"}},
    "stn": {"grid_sampler": "elementwise", "conv2d": "conv", "linear": "gemm",
            "!": {"attention"}},
    # im2col is the convolution's lowering, but no convolution runs here
    "unfold_patches": {"im2col": "elementwise", "linear": "gemm", "layer_norm": "norm",
                       "!": {"conv", "attention"}},
    "embbag_fm": {"embedding_bag": "embedding", "linear": "gemm", "bmm": "gemm",
                  "!": {"attention"}},
    "grucell_loop": {"gru_cell": "rnn", "embedding": "embedding", "linear": "gemm",
                     "!": {"attention"}},
    "checkpointed": {"linear": "gemm", "layer_norm": "norm", "gelu": "elementwise",
                     "!": {"attention"}},
    "lazy_mlp": {"linear": "gemm", "!": {"attention", "unknown"}},
    "scripted_act": {"linear": "gemm", "!": {"attention", "unknown"}},
    # the teacher's and the student's softmaxes are a loss's, not attention
    "distill": {"linear": "gemm", "softmax": "elementwise", "log_softmax": "elementwise",
                "kl_div": "elementwise", "!": {"attention"}},
    "depthwise_cl": {"conv2d": "conv", "batch_norm": "norm", "linear": "gemm",
                     "!": {"attention"}},
    "fpn": {"conv2d": "conv", "upsample_nearest2d": "elementwise", "!": {"attention"}},
    "vae": {"conv2d": "conv", "conv_transpose2d": "conv", "linear": "gemm",
            "binary_cross_entropy_with_logits": "elementwise", "!": {"attention"}},
    "selective_scan": {"linear": "gemm", "conv1d": "conv", "cumsum": "elementwise",
                       "softplus": "elementwise", "!": {"attention"}},
    "multitask": {"conv2d": "conv", "linear": "gemm", "smooth_l1_loss": "elementwise",
                  "!": {"attention"}},
}


class ConvTower(nn.Module):
    def __init__(self, out=128):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 64, 3, 2, 1), nn.BatchNorm2d(64), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, out),
        )

    def forward(self, x):
        return self.net(x)


class CLIP(nn.Module):
    def __init__(self, vocab=1000, d=128):
        super().__init__()
        self.image = ConvTower(d)
        self.tok = nn.Embedding(vocab, d)
        self.text = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d))
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def forward(self, images, tokens):
        i = F.normalize(self.image(images), dim=-1)
        t = F.normalize(self.text(self.tok(tokens).mean(1)), dim=-1)
        return self.logit_scale.exp() * i @ t.t()


def clip():
    def loss(logits, _):
        labels = torch.arange(logits.shape[0], device=logits.device)
        return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2

    def make_batch(n):
        return torch.randn(n, 3, 32, 32), torch.randint(0, 1000, (n, 16))

    return CLIP(), make_batch, loss


class SimCLR(nn.Module):
    def __init__(self, tau=0.5):
        super().__init__()
        self.encoder = ConvTower(128)
        self.proj = nn.Sequential(nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 64))
        self.tau = tau

    def forward(self, x1, x2):
        z = F.normalize(self.proj(self.encoder(torch.cat([x1, x2]))), dim=1)
        sim = z @ z.t() / self.tau
        n = x1.shape[0]
        sim = sim.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=z.device), -1e4)
        targets = torch.cat([torch.arange(n, 2 * n), torch.arange(n)]).to(z.device)
        return F.cross_entropy(sim, targets)


def simclr():
    return SimCLR(), lambda n: (torch.randn(n, 3, 32, 32), torch.randn(n, 3, 32, 32))


class LinearAttention(nn.Module):  # Katharopoulos et al. 2020: elu(x) + 1 feature maps
    def __init__(self, d=256, h=4):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, d // self.h).unbind(2)
        q, k = F.elu(q) + 1, F.elu(k) + 1
        kv = torch.einsum("bnhd,bnhe->bhde", k, v)
        z = 1 / (torch.einsum("bnhd,bhd->bnh", q, k.sum(1)) + 1e-6)
        y = torch.einsum("bnhd,bhde,bnh->bnhe", q, kv, z)
        return self.out(y.reshape(b, n, d))


class LinearTransformer(nn.Module):
    def __init__(self, d=256, depth=2):
        super().__init__()
        self.layers = nn.ModuleList(
            nn.ModuleList([nn.LayerNorm(d), LinearAttention(d), nn.LayerNorm(d),
                           nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))])
            for _ in range(depth))
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        for n1, att, n2, ff in self.layers:
            x = x + att(n1(x))
            x = x + ff(n2(x))
        return self.head(x.mean(1))


def linear_attention():
    return LinearTransformer(), lambda n: (torch.randn(n, 128, 256), torch.randint(0, 10, (n,)))


class Seq2Seq(nn.Module):
    def __init__(self, vocab=2000, d=128):
        super().__init__()
        self.src_emb = nn.Embedding(vocab, d)
        self.tgt_emb = nn.Embedding(vocab, d)
        self.core = nn.Transformer(d, nhead=4, num_encoder_layers=2, num_decoder_layers=2,
                                   dim_feedforward=256, batch_first=True)
        self.out = nn.Linear(d, vocab)

    def forward(self, src, tgt):
        mask = self.core.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device)
        h = self.core(self.src_emb(src), self.tgt_emb(tgt), tgt_mask=mask, tgt_is_causal=True)
        return self.out(h)


def enc_dec():
    def make_batch(n):  # teacher forcing: the decoder reads the target shifted by one
        src = torch.randint(0, 2000, (n, 32))
        tgt = torch.randint(0, 2000, (n, 25))
        return src, tgt[:, :-1], tgt[:, 1:]

    return Seq2Seq(), make_batch


class SpectralConv(nn.Module):
    def __init__(self, c, modes=8):
        super().__init__()
        self.modes = modes
        scale = 1 / (c * c)
        self.w = nn.Parameter(scale * torch.randn(c, c, modes, modes, dtype=torch.cfloat))

    def forward(self, x):
        xf = torch.fft.rfft2(x.float())
        out = torch.zeros_like(xf)
        m = self.modes
        out[:, :, :m, :m] = torch.einsum("bixy,ioxy->boxy", xf[:, :, :m, :m], self.w)
        return torch.fft.irfft2(out, s=x.shape[-2:])


class FNO(nn.Module):
    def __init__(self, c=32, depth=3):
        super().__init__()
        self.lift = nn.Conv2d(3, c, 1)
        self.spectral = nn.ModuleList(SpectralConv(c) for _ in range(depth))
        self.pointwise = nn.ModuleList(nn.Conv2d(c, c, 1) for _ in range(depth))
        self.proj = nn.Conv2d(c, 1, 1)

    def forward(self, x):
        x = self.lift(x)
        for s, p in zip(self.spectral, self.pointwise, strict=True):
            x = F.gelu(s(x) + p(x))
        return self.proj(x)


def fno():
    return FNO(), lambda n: (torch.randn(n, 3, 64, 64), torch.randn(n, 1, 64, 64))


class SparseGCN(nn.Module):
    def __init__(self, nodes=2048, d_in=64, d=128, classes=7):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_in, d), nn.Linear(d, classes)
        idx = torch.randint(0, nodes, (2, nodes * 8))
        self.register_buffer("adj", torch.sparse_coo_tensor(
            idx, torch.full((nodes * 8,), 1 / 8), (nodes, nodes)).coalesce())

    def forward(self, x):
        h = torch.relu(torch.sparse.mm(self.adj, self.l1(x)))
        return torch.sparse.mm(self.adj, self.l2(h))


def sparse_gcn():
    # the whole graph is one sample; the batch size is ignored, as a full-graph GCN does
    return SparseGCN(), lambda n: (torch.randn(2048, 64), torch.randint(0, 7, (2048,)))


def espcn():
    m = nn.Sequential(
        nn.Conv2d(3, 64, 5, padding=2), nn.Tanh(),
        nn.Conv2d(64, 32, 3, padding=1), nn.Tanh(),
        nn.Conv2d(32, 3 * 9, 3, padding=1), nn.PixelShuffle(3),
    )
    return m, lambda n: (torch.randn(n, 3, 32, 32), torch.rand(n, 3, 96, 96))


class STN(nn.Module):
    def __init__(self):
        super().__init__()
        self.loc = nn.Sequential(nn.Conv2d(1, 8, 7), nn.MaxPool2d(2), nn.ReLU(),
                                 nn.Conv2d(8, 10, 5), nn.MaxPool2d(2), nn.ReLU(),
                                 nn.Flatten(), nn.Linear(10 * 3 * 3, 32), nn.ReLU(),
                                 nn.Linear(32, 6))
        self.cls = nn.Sequential(nn.Conv2d(1, 16, 5), nn.ReLU(), nn.Flatten(),
                                 nn.Linear(16 * 24 * 24, 10))

    def forward(self, x):
        theta = self.loc(x).view(-1, 2, 3)
        grid = F.affine_grid(theta, list(x.size()), align_corners=False)
        return self.cls(F.grid_sample(x, grid, align_corners=False))


def stn():
    return STN(), lambda n: (torch.randn(n, 1, 28, 28), torch.randint(0, 10, (n,)))


class UnfoldMixer(nn.Module):
    def __init__(self, p=8, d=256):
        super().__init__()
        self.p = p
        self.embed = nn.Linear(3 * p * p, d)
        self.norm = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, 100)

    def forward(self, x):
        patches = F.unfold(x, self.p, stride=self.p).transpose(1, 2)
        h = self.embed(patches)
        h = h + self.mlp(self.norm(h))
        return self.head(h.mean(1))


def unfold_patches():
    return UnfoldMixer(), lambda n: (torch.randn(n, 3, 64, 64), torch.randint(0, 100, (n,)))


class EmbBagFM(nn.Module):
    def __init__(self, fields=8, rows=10000, d=32):
        super().__init__()
        self.bags = nn.ModuleList(nn.EmbeddingBag(rows, d, mode="sum") for _ in range(fields))
        self.mlp = nn.Sequential(nn.Linear(fields * d, 128), nn.ReLU(), nn.Linear(128, 1))

    def forward(self, ids, offsets):
        e = torch.stack([bag(ids[i], offsets[i]) for i, bag in enumerate(self.bags)], 1)
        fm = torch.bmm(e, e.transpose(1, 2)).sum((1, 2), keepdim=False).unsqueeze(1)
        return self.mlp(e.flatten(1)) + 0.01 * fm


def embbag_fm():
    def make_batch(n, fields=8, per=3):
        ids = torch.randint(0, 10000, (fields, n * per))
        offsets = torch.arange(0, n * per, per).expand(fields, n).contiguous()
        return (ids, offsets), torch.rand(n, 1)

    return EmbBagFM(), make_batch, lambda out, y: F.binary_cross_entropy_with_logits(out, y)


class GRUDecoder(nn.Module):
    def __init__(self, vocab=500, d=256, steps=20):
        super().__init__()
        self.steps = steps
        self.emb = nn.Embedding(vocab, d)
        self.cell = nn.GRUCell(d, d)
        self.out = nn.Linear(d, vocab)

    def forward(self, tokens):
        h = torch.zeros(tokens.shape[0], self.cell.hidden_size, device=tokens.device)
        logits = []
        for t in range(self.steps):
            h = self.cell(self.emb(tokens[:, t]), h)
            logits.append(self.out(h))
        return torch.stack(logits, 1)


def grucell_loop():
    return GRUDecoder(), lambda n: (torch.randint(0, 500, (n, 20)),
                                    torch.randint(0, 500, (n, 20)))


class CheckpointedMLP(nn.Module):
    def __init__(self, d=512, depth=4):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            for _ in range(depth))
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        for b in self.blocks:
            x = x + checkpoint(b, x, use_reentrant=False)
        return self.head(x)


def checkpointed():
    return CheckpointedMLP(), lambda n: (torch.randn(n, 512), torch.randint(0, 10, (n,)))


def lazy_mlp():
    # shapes inferred at the first call, as LazyLinear layers are written
    m = nn.Sequential(nn.LazyLinear(512), nn.ReLU(), nn.LazyLinear(256), nn.ReLU(),
                      nn.LazyLinear(10))
    return m, lambda n: (torch.randn(n, 300), torch.randint(0, 10, (n,)))


@torch.jit.script
def bias_gelu(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    y = x + b
    return y * 0.5 * (1.0 + torch.erf(y / 1.41421))


class ScriptedMLP(nn.Module):
    def __init__(self, d=512):
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d, bias=False)
        self.b1 = nn.Parameter(torch.zeros(4 * d))
        self.fc2 = nn.Linear(4 * d, 10)

    def forward(self, x):
        return self.fc2(bias_gelu(self.fc1(x), self.b1))


def scripted_act():
    return ScriptedMLP(), lambda n: (torch.randn(n, 512), torch.randint(0, 10, (n,)))


class Distill(nn.Module):
    def __init__(self, T=4.0):
        super().__init__()
        self.teacher = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 100))
        self.teacher.requires_grad_(False)
        self.student = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 100))
        self.T = T

    def forward(self, x, y):
        with torch.no_grad():
            soft = F.softmax(self.teacher(x) / self.T, dim=-1)
        logits = self.student(x)
        kd = F.kl_div(F.log_softmax(logits / self.T, dim=-1), soft, reduction="batchmean")
        return kd * self.T ** 2 + F.cross_entropy(logits, y)


def distill():
    return Distill(), lambda n: (torch.randn(n, 256), torch.randint(0, 100, (n,)))


def _dw_block(c_in, c_out, stride):
    return nn.Sequential(
        nn.Conv2d(c_in, c_in, 3, stride, 1, groups=c_in, bias=False), nn.BatchNorm2d(c_in),
        nn.ReLU6(),
        nn.Conv2d(c_in, c_out, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU6(),
    )


def depthwise_cl():
    m = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.ReLU6(),
                      _dw_block(32, 64, 1), _dw_block(64, 128, 2), _dw_block(128, 128, 1),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))
    m = m.to(memory_format=torch.channels_last)

    def make_batch(n):
        return (torch.randn(n, 3, 64, 64).to(memory_format=torch.channels_last),
                torch.randint(0, 10, (n,)))

    return m, make_batch


class FPN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 3, 2, 1)
        self.c2 = nn.Conv2d(32, 64, 3, 2, 1)
        self.c3 = nn.Conv2d(64, 128, 3, 2, 1)
        self.lat = nn.ModuleList(nn.Conv2d(c, 64, 1) for c in (32, 64, 128))
        self.head = nn.Conv2d(64, 5, 3, padding=1)

    def forward(self, x):
        f1 = F.relu(self.c1(x))
        f2 = F.relu(self.c2(f1))
        f3 = F.relu(self.c3(f2))
        p3 = self.lat[2](f3)
        p2 = self.lat[1](f2) + F.interpolate(p3, scale_factor=2, mode="nearest")
        p1 = self.lat[0](f1) + F.interpolate(p2, scale_factor=2, mode="nearest")
        return self.head(p1)


def fpn():
    # per-pixel classes at half resolution, torch's (N, C, H, W) against (N, H, W)
    return FPN(), lambda n: (torch.randn(n, 3, 64, 64), torch.randint(0, 5, (n, 32, 32)))


class VAE(nn.Module):
    def __init__(self, z=32):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(1, 32, 4, 2, 1), nn.ReLU(),
                                 nn.Conv2d(32, 64, 4, 2, 1), nn.ReLU(), nn.Flatten())
        self.mu, self.logvar = nn.Linear(64 * 7 * 7, z), nn.Linear(64 * 7 * 7, z)
        self.dec_in = nn.Linear(z, 64 * 7 * 7)
        self.dec = nn.Sequential(nn.ConvTranspose2d(64, 32, 4, 2, 1), nn.ReLU(),
                                 nn.ConvTranspose2d(32, 1, 4, 2, 1))

    def forward(self, x):
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h)
        zs = torch.distributions.Normal(mu, torch.exp(0.5 * logvar)).rsample()
        recon = self.dec(self.dec_in(zs).view(-1, 64, 7, 7))
        rec = F.binary_cross_entropy_with_logits(recon, x, reduction="sum") / x.shape[0]
        kl = -0.5 * torch.mean(torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), 1))
        return rec + kl


def vae():
    return VAE(), lambda n: torch.rand(n, 1, 28, 28)


class ScanBlock(nn.Module):
    """A Mamba-like block: in-projection, causal depthwise conv, input-dependent decay, the
    recurrence h_t = a_t h_{t-1} + x_t solved in log space by cumsum."""

    def __init__(self, d=128, k=4):
        super().__init__()
        self.inp = nn.Linear(d, 2 * d)
        self.conv = nn.Conv1d(d, d, k, groups=d, padding=k - 1)
        self.dt = nn.Linear(d, d)
        self.out = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        u, gate = self.inp(self.norm(x)).chunk(2, -1)
        u = F.silu(self.conv(u.transpose(1, 2))[..., : x.shape[1]].transpose(1, 2))
        log_a = -F.softplus(self.dt(u))                   # log decay, ≤ 0
        cum = torch.cumsum(log_a, 1)
        h = torch.exp(cum) * torch.cumsum(u * torch.exp(-cum).clamp(max=1e4), 1)
        return x + self.out(h * F.silu(gate))


def selective_scan():
    m = nn.Sequential(ScanBlock(), ScanBlock(), nn.Linear(128, 64))
    return m, lambda n: (torch.randn(n, 256, 128), torch.randint(0, 64, (n, 256)))


class MultiTask(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = ConvTower(128)
        self.cls = nn.Linear(128, 20)
        self.box = nn.Linear(128, 4)

    def forward(self, x):
        h = F.relu(self.trunk(x))
        return self.cls(h), self.box(h)


def multitask():
    def loss(out, target):
        logits, boxes = out
        return F.cross_entropy(logits, target["label"]) + \
            F.smooth_l1_loss(boxes, target["box"])

    def make_batch(n):
        return torch.randn(n, 3, 32, 32), {"label": torch.randint(0, 20, (n,)),
                                            "box": torch.rand(n, 4)}

    return MultiTask(), make_batch, loss
