"""The LM preset of the doctor's workloads (GPT-2 small's shape, seq 1024) as an entry point
for `gpuaudit tune --model gpt:build` on a GPU (run from this directory)."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "doctor"))
from _common import Gpt


def build():
    model = Gpt()

    def make_batch(n):
        idx = torch.randint(0, model.vocab, (n, model.seq))
        return (idx, idx), None

    return {"model": model, "make_batch": make_batch, "loss": lambda out, _t: out}
