"""Planted: `loss.item()` every step (a host sync: the CPU waits for the GPU each step, and the
GPU then idles while the CPU launches the next step). The step's GPU work (bf16 matmuls, about
0.5 ms on an H200) outlasts its launches, so without the sync the GPU would stay busy.
Expected top finding: host-syncs."""

import torch
from _common import amp, options, train

args = options(__doc__)
width = 2048 if args.device.startswith("cuda") else 256
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width),
                                                  torch.nn.ReLU()) for _ in range(4)])
model = model.to(args.device)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(width, width, device=args.device)
losses = []


def step() -> None:
    with amp(args):
        loss = model(x).float().square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    losses.append(loss.item())  # the planted sync


train("item_every_step", args, step)
