"""Planted (GPU): the GPT in float32 with TF32 off: matmuls on the CUDA cores. Expected top
finding: tensor-cores-unused."""

import torch
from _common import gpt_for, options, train

args = options(__doc__)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
model, batch = gpt_for(args.device)
model = model.to(args.device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
x = torch.randint(0, model.vocab, (max(batch // 2, 1), model.seq), device=args.device)


def step() -> None:
    loss = model(x, x)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


train("fp32_matmuls", args, step)
