"""Planted (GPU): a 128 MiB batch copied from pageable host memory every step, little compute.
Expected top finding: copy-bound (pageable)."""

import torch
from _common import amp, options, train

args = options(__doc__)
model = torch.nn.Linear(4096, 4096).to(args.device)
host = torch.randn(8192, 4096)  # pageable: not pin_memory()


def step() -> None:
    x = host.to(args.device)
    with amp(args):
        y = model(x)
    y.float().sum().backward()
    model.zero_grad(set_to_none=True)


train("pageable_copies", args, step)
