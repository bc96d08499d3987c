"""Planted: `loss.item()` every step (a host sync: the CPU waits for the GPU each step).
Expected top finding: host-syncs."""

import torch
from _common import options, train

args = options(__doc__)
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU())
                              for _ in range(4)]).to(args.device)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(256 if args.device == "cpu" else 4096, 1024, device=args.device)
losses = []


def step() -> None:
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    losses.append(loss.item())  # the planted sync


train("item_every_step", args, step)
