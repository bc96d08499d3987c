"""Models set up the ways users set up training around them, rather than layers written in
another style: blocks compiled in build(), a function compiled at import, batch norm over
features (no batch of one), sparse embeddings, a frozen backbone, a TorchScript model,
quantization-aware training, a vmap ensemble, distances to prototypes, a bilinear layer,
re-entrant checkpointing, grouped-query attention, a dict output and a NumPy batch. Each one
of them broke or surprised `bench train --op-profile` or `predict` when first fed (none was
declared before it was profiled: a development set). `EXPECT`: family → {unit: class; "!":
classes that must appear nowhere}."""

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

D, CLASSES = 64, 10

EXPECT = {
    # compiled in build(): run eager, its operators classed one by one
    "compiled_blocks": {"linear": "gemm", "layer_norm": "norm", "gelu": "elementwise"},
    "compiled_fn": {"linear": "gemm", "!": {"attention", "conv"}},
    "bn_features": {"linear": "gemm", "batch_norm": "norm"},
    "sparse_embedding": {"embedding": "embedding", "linear": "gemm"},
    "frozen_backbone": {"linear": "gemm", "gelu": "elementwise"},
    "scripted": {"linear": "gemm", "!": {"attention"}},
    "qat": {"linear": "gemm", "!": {"attention", "conv"}},
    "vmap_ensemble": {"!": {"attention", "conv"}},
    # torch.cdist is gemm where it runs as a matmul (on the H100) and unknown where its
    # direct kernel runs (this CPU, a batch of two): not declared
    "prototypes": {"linear": "gemm", "!": {"attention"}},
    "bilinear": {"bilinear": "gemm", "linear": "gemm"},
    "reentrant": {"linear": "gemm", "gelu": "elementwise"},
    "gqa": {"scaled_dot_product_attention": "attention", "linear": "gemm",
            "rms_norm": "norm", "embedding": "embedding"},
    "dict_out": {"conv2d": "conv", "relu": "elementwise"},
    "numpy_batch": {"linear": "gemm"},
}


def _classify(model, d=D):
    return model, lambda n: (torch.randn(n, d), torch.randint(0, CLASSES, (n,)))


class Block(nn.Module):
    def __init__(self, d=D):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


class Blocks(nn.Module):
    """Per-block compilation, as torchtitan does it: in place, and a block replaced by its
    compiled wrapper."""

    def __init__(self, n=3):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(n))
        self.blocks[0].compile()
        self.blocks[1] = torch.compile(self.blocks[1])
        self.head = nn.Linear(D, CLASSES)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x.mean(1))


def compiled_blocks():
    return Blocks(), lambda n: (torch.randn(n, 16, D), torch.randint(0, CLASSES, (n,)))


@torch.compile  # compiled at import: imported beside gpuaudit's own early torch import
def swish_gate(x):
    return F.silu(x) * x


class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(D, 4 * D)
        self.b = nn.Linear(4 * D, CLASSES)

    def forward(self, x):
        return self.b(swish_gate(self.a(x)))


def compiled_fn():
    return _classify(Gated())


def bn_features():  # BatchNorm1d over (N, C): training raises on a batch of one
    return _classify(nn.Sequential(nn.Linear(D, 256), nn.BatchNorm1d(256), nn.ReLU(),
                                   nn.Linear(256, CLASSES)))


class SparseRec(nn.Module):
    def __init__(self, rows=10000, fields=8, dim=32):
        super().__init__()
        self.emb = nn.Embedding(rows, dim, sparse=True)  # AdamW refuses its gradients
        self.mlp = nn.Sequential(nn.Linear(fields * dim, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, ids):
        return self.mlp(self.emb(ids).flatten(1)).squeeze(-1)


def sparse_embedding():
    return SparseRec(), lambda n: (torch.randint(0, 10000, (n, 8)), torch.rand(n))


def frozen_backbone():  # a pretrained trunk frozen, its head fine-tuned
    trunk = nn.Sequential(nn.Linear(D, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU())
    trunk.requires_grad_(False)
    return _classify(nn.Sequential(trunk, nn.Linear(256, CLASSES)))


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(D, 128)
        self.b = nn.Linear(128, CLASSES)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def scripted():
    return _classify(torch.jit.script(Small()))


def qat():  # fake-quantized weights and activations, as prepare_qat makes them
    m = nn.Sequential(torch.ao.quantization.QuantStub(), nn.Linear(D, 128), nn.ReLU(),
                      nn.Linear(128, CLASSES), torch.ao.quantization.DeQuantStub())
    m.train()
    m.qconfig = torch.ao.quantization.get_default_qat_qconfig("x86")
    torch.ao.quantization.prepare_qat(m, inplace=True)
    return _classify(m)


class Ensemble(nn.Module):
    """Members stacked and run with torch.func's vmap, as the model-ensembling tutorial does."""

    def __init__(self, k=4):
        super().__init__()
        from torch.func import stack_module_state

        params, _ = stack_module_state([Small() for _ in range(k)])
        self.names = list(params)
        self.stacked = nn.ParameterDict({n.replace(".", "_"): nn.Parameter(p)
                                         for n, p in params.items()})
        self._base = [Small().to("meta")]  # not a submodule: moving the model leaves it

    def forward(self, x):
        from torch.func import functional_call, vmap

        params = {n: self.stacked[n.replace(".", "_")] for n in self.names}
        return vmap(lambda p, x: functional_call(self._base[0], p, (x,)),
                    in_dims=(0, None))(params, x).mean(0)


def vmap_ensemble():
    return _classify(Ensemble())


class Prototypes(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(D, 128), nn.ReLU(), nn.Linear(128, D))
        self.protos = nn.Parameter(torch.randn(CLASSES, D))

    def forward(self, x):
        return -torch.cdist(self.enc(x), self.protos)


def prototypes():
    return _classify(Prototypes())


class Bilinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.bil = nn.Bilinear(D, D, 128)
        self.out = nn.Linear(128, CLASSES)

    def forward(self, x):
        return self.out(torch.relu(self.bil(x, x.flip(1))))


def bilinear():
    return _classify(Bilinear())


class Reentrant(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(D, D)  # so the checkpointed blocks' input needs a gradient
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(D, 256), nn.GELU(),
                                                  nn.Linear(256, D)) for _ in range(3))
        self.head = nn.Linear(D, CLASSES)

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        x = self.inp(x)
        for b in self.blocks:
            x = x + checkpoint(b, x, use_reentrant=True)
        return self.head(x)


def reentrant():
    return _classify(Reentrant())


class GQA(nn.Module):
    """Grouped-query attention through SDPA's enable_gqa, RMSNorm, a language model's head."""

    def __init__(self, d=128, hq=8, hkv=2, layers=2, vocab=500):
        super().__init__()
        self.hq, self.hkv, self.dh = hq, hkv, d // hq
        self.emb = nn.Embedding(vocab, d)
        self.q = nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(layers))
        self.kv = nn.ModuleList(nn.Linear(d, 2 * hkv * self.dh, bias=False)
                                for _ in range(layers))
        self.o = nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(layers))
        self.norm = nn.ModuleList(nn.RMSNorm(d) for _ in range(layers))
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        x = self.emb(ids)
        n, t, d = x.shape
        for q, kv, o, norm in zip(self.q, self.kv, self.o, self.norm, strict=True):
            h = norm(x)
            qq = q(h).view(n, t, self.hq, self.dh).transpose(1, 2)
            k, v = kv(h).view(n, t, 2, self.hkv, self.dh).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(qq, k, v, is_causal=True, enable_gqa=True)
            x = x + o(y.transpose(1, 2).reshape(n, t, d))
        return self.head(x)


def gqa():
    return GQA(), lambda n: (torch.randint(0, 500, (n, 32)), torch.randint(0, 500, (n, 32)))


class Segmenter(nn.Module):
    """A dict out, as torchvision's segmentation models return {"out", "aux"}."""

    def __init__(self):
        super().__init__()
        self.body = nn.Conv2d(3, 16, 3, padding=1)
        self.cls = nn.Conv2d(16, 5, 1)
        self.aux = nn.Conv2d(16, 5, 1)

    def forward(self, x):
        f = torch.relu(self.body(x))
        return {"out": self.cls(f), "aux": self.aux(f)}


def dict_out():
    return Segmenter(), lambda n: (torch.randn(n, 3, 32, 32), torch.randint(0, 5, (n, 32, 32)))


def numpy_batch():  # a batch as NumPy makes it
    return Small(), lambda n: (np.random.randn(n, D).astype("float32"),
                               np.random.randint(0, CLASSES, n))
