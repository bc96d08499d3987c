"""Planted: a batch far too small (8 samples) for the model (1024 wide on a GPU, 128 on a CPU,
where per-op overhead then dominates). Expected top finding: batch-too-small."""

import torch
from _common import amp, options, train

args = options(__doc__)
width = 1024 if args.device.startswith("cuda") else 128
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU())
                              for _ in range(4)]).to(args.device)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(8, width, device=args.device)


def step() -> None:
    with amp(args):
        loss = model(x).float().square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


train("tiny_batch", args, step)
