"""Planted: `loss.item()` every step. The loop also prepares the next batch on the CPU (6 ms
a step here); without the sync that CPU work overlaps the GPU's step (about 12 ms of bf16
matmuls on an H200), with it the GPU waits through it every step.
Expected top finding: host-syncs."""

import time

import torch
from _common import amp, options, train

args = options(__doc__)
gpu = args.device.startswith("cuda")
width, batch, prep_s = (4096, 16384, 0.006) if gpu else (256, 256, 0.002)
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width),
                                                  torch.nn.ReLU()) for _ in range(4)])
model = model.to(args.device)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(batch, width, device=args.device)
losses = []


def prepare_next_batch() -> None:
    """CPU work between steps (augmenting, logging): it overlaps the GPU unless the loop
    syncs."""
    end = time.perf_counter() + prep_s
    while time.perf_counter() < end:
        pass


def step() -> None:
    with amp(args):
        loss = model(x).float().square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    losses.append(loss.item())  # the planted sync
    prepare_next_batch()


train("item_every_step", args, step)
