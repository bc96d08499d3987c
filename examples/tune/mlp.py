"""An entry point for `gpuaudit tune --model mlp:build` (run from this directory), and a
dataset for its loader workers sweep (`--dataset mlp:dataset`)."""

import time

import torch


def build():
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10))

    def make_batch(n):
        return (torch.randn(n, 256),), torch.randint(0, 10, (n,))

    return model, make_batch


class _Decoded(torch.utils.data.Dataset):
    """Samples that take 2 ms each to prepare (as decoding an image would)."""

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.randn(256), i % 10


def dataset():
    return _Decoded()
