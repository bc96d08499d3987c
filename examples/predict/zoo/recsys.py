"""A DLRM-style click-through model (Naumov et al., 2019): categorical features through
nn.EmbeddingBag tables (multi-hot, summed), dense features through a bottom MLP, their
pairwise dot products, a top MLP and a logistic loss."""

import torch
import torch.nn.functional as F
from torch import nn

TABLES = 8
ROWS = 500_000
HOT = 8  # ids per bag


class DLRM(nn.Module):
    def __init__(self, dim=64, dense=13):
        super().__init__()
        self.tables = nn.ModuleList(nn.EmbeddingBag(ROWS, dim, mode="sum")
                                    for _ in range(TABLES))
        self.bottom = nn.Sequential(nn.Linear(dense, 512), nn.ReLU(), nn.Linear(512, 256),
                                    nn.ReLU(), nn.Linear(256, dim), nn.ReLU())
        pairs = (TABLES + 1) * TABLES // 2
        self.top = nn.Sequential(nn.Linear(dim + pairs, 512), nn.ReLU(), nn.Linear(512, 256),
                                 nn.ReLU(), nn.Linear(256, 1))

    def forward(self, dense, ids, offsets):
        x = self.bottom(dense)
        feats = [x] + [t(ids[i], offsets) for i, t in enumerate(self.tables)]
        z = torch.stack(feats, dim=1)
        dots = torch.bmm(z, z.transpose(1, 2))
        i, j = torch.triu_indices(z.shape[1], z.shape[1], offset=1, device=z.device)
        return self.top(torch.cat([x, dots[:, i, j]], dim=1)).squeeze(1)


def _batch(n):
    dense = torch.randn(n, 13)
    ids = torch.randint(0, ROWS, (TABLES, n * HOT))
    offsets = torch.arange(0, n * HOT, HOT)
    return (dense, ids, offsets), torch.randint(0, 2, (n,)).float()


def _loss(logits, target):
    return F.binary_cross_entropy_with_logits(logits, target)


def build():
    return {"model": DLRM(), "make_batch": _batch, "loss": _loss, "batch_size": 4096,
            "name": "dlrm"}


def build_large():
    return {"model": DLRM(dim=128), "make_batch": _batch, "loss": _loss, "batch_size": 4096,
            "name": "dlrm-wide"}
