"""Planted: a data loader that cannot keep up (each sample takes 20 ms to "read", one worker).
Expected top finding: input-bound."""

import time

import torch
from _common import amp, options, train

args = options(__doc__)


class Slow(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 10**7

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(0.02)  # slow storage or decoding
        return torch.randn(512), i % 10


loader = torch.utils.data.DataLoader(Slow(), batch_size=16, num_workers=1,
                                     pin_memory=args.device.startswith("cuda"))
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                            torch.nn.Linear(1024, 10)).to(args.device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def step(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = (t.to(args.device, non_blocking=True) for t in batch)
    with amp(args):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


train("slow_loader", args, step, loader)
