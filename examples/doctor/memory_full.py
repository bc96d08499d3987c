"""Planted (GPU): the healthy GPT, with all but 1.5 GiB of GPU memory taken after warm-up.
Expected top finding: memory-nearly-full."""

import torch
from _common import gpt_for, options, train

args = options(__doc__)
model, batch = gpt_for(args.device)
model = model.to(args.device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
x = torch.randint(0, model.vocab, (batch, model.seq), device=args.device)
hog = []


def step() -> None:
    with torch.autocast("cuda", torch.bfloat16):
        loss = model(x, x)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if len(hog) == 0 and opt.state:  # after the first step: the working set is reserved
        torch.cuda.synchronize()
        free, _total = torch.cuda.mem_get_info()
        hog.append(torch.empty(max(free - (3 << 29), 0), dtype=torch.uint8, device="cuda"))


train("memory_full", args, step)
