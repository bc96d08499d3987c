"""A graph isomorphism network for molecules written the way PyTorch Geometric and the OGB
examples write it (ogbg-molpcba's GIN): a batch of graphs collated into one disjoint graph
with a `batch` vector, atoms and bonds embedded by a sum of nn.Embedding tables (AtomEncoder,
BondEncoder), five GINE layers (messages ReLU(x_j + bond), gathered by `index_select` and
summed onto their targets by `scatter_add_`, then Linear, BatchNorm1d, ReLU, Linear),
BatchNorm1d and ReLU between layers, mean pooling per graph (`int(batch.max()) + 1` graphs: a
sync, as PyG's pooling has without a size) and a linear head over 128 binary tasks, trained
with BCE-with-logits. Embedding 300 (`build`) and 600 (`build_wide`)."""
import torch
import torch.nn.functional as F
from torch import nn

ATOM_VOCAB = (119, 5, 12, 12, 10, 6, 6, 2, 2)     # OGB's atom feature dims
BOND_VOCAB = (5, 6, 2)
TASKS = 128


class FeatureEncoder(nn.Module):
    def __init__(self, vocab, emb):
        super().__init__()
        self.tables = nn.ModuleList(nn.Embedding(n, emb) for n in vocab)

    def forward(self, feats):
        out = 0
        for i, table in enumerate(self.tables):
            out = out + table(feats[:, i])
        return out


class GINEConv(nn.Module):
    def __init__(self, emb):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(emb, 2 * emb), nn.BatchNorm1d(2 * emb), nn.ReLU(),
                                 nn.Linear(2 * emb, emb))
        self.eps = nn.Parameter(torch.zeros(1))
        self.bond_encoder = FeatureEncoder(BOND_VOCAB, emb)

    def forward(self, x, edge_index, edge_attr):
        src, dst = edge_index
        msg = F.relu(x.index_select(0, src) + self.bond_encoder(edge_attr))
        index = dst.unsqueeze(-1).expand_as(msg)
        aggr = torch.zeros_like(x, dtype=msg.dtype).scatter_add_(0, index, msg)
        return self.mlp((1 + self.eps) * x + aggr)


class GIN(nn.Module):
    def __init__(self, emb=300, layers=5, dropout=0.5):
        super().__init__()
        self.atom_encoder = FeatureEncoder(ATOM_VOCAB, emb)
        self.convs = nn.ModuleList(GINEConv(emb) for _ in range(layers))
        self.norms = nn.ModuleList(nn.BatchNorm1d(emb) for _ in range(layers))
        self.dropout = dropout
        self.head = nn.Linear(emb, TASKS)

    def forward(self, x, edge_index, edge_attr, batch):
        h = self.atom_encoder(x)
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms, strict=True)):
            h = norm(conv(h, edge_index, edge_attr))
            if i < len(self.convs) - 1:
                h = F.relu(h)
            h = F.dropout(h, self.dropout, self.training)
        graphs = int(batch.max()) + 1
        total = torch.zeros(graphs, h.shape[1], dtype=h.dtype, device=h.device)
        total = total.index_add_(0, batch, h)
        count = torch.bincount(batch, minlength=graphs).clamp(min=1).unsqueeze(-1)
        return self.head(total / count)


def _molecule(g, atoms):
    """A chain with a ring closed every few atoms, both directions of each bond."""
    a = torch.arange(atoms - 1)
    src, dst = [a], [a + 1]
    ring = torch.arange(5, atoms, 6)
    src.append(ring)
    dst.append(ring - 5)
    s, d = torch.cat(src), torch.cat(dst)
    return torch.stack([torch.cat([s, d]), torch.cat([d, s])])


def _batch(n):
    g = torch.Generator().manual_seed(n)
    sizes = torch.randint(12, 40, (n,), generator=g).tolist()
    edges, batch, start = [], [], 0
    for i, atoms in enumerate(sizes):
        edges.append(_molecule(g, atoms) + start)
        batch.append(torch.full((atoms,), i, dtype=torch.long))
        start += atoms
    edge_index = torch.cat(edges, dim=1)
    x = torch.stack([torch.randint(0, v, (start,), generator=g) for v in ATOM_VOCAB], dim=1)
    edge_attr = torch.stack([torch.randint(0, v, (edge_index.shape[1],), generator=g)
                             for v in BOND_VOCAB], dim=1)
    y = torch.randint(0, 2, (n, TASKS), generator=g).float()
    return (x, edge_index, edge_attr, torch.cat(batch)), y


def _loss(logits, y):
    return F.binary_cross_entropy_with_logits(logits.float(), y)


def build():
    return {"model": GIN(), "make_batch": _batch, "loss": _loss, "batch_size": 512,
            "name": "gin-molpcba"}


def build_wide():
    return {"model": GIN(emb=600), "make_batch": _batch, "loss": _loss, "batch_size": 512,
            "name": "gin-molpcba-600"}
