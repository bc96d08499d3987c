"""Planted (GPU): hundreds of tiny elementwise kernels per step on a 4096-element tensor.
Expected top finding: launch-bound."""

import torch
from _common import options, train

args = options(__doc__)
w = torch.randn(4096, device=args.device, requires_grad=True)
opt = torch.optim.SGD([w], lr=1e-4)


def step() -> None:
    x = w
    for _ in range(200):
        x = x * 1.0001 + 0.0001
    x.sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


train("tiny_kernels", args, step)
