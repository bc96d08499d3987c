"""The control: a GPT trained in bf16 (on a GPU; float32 on a CPU) with data already on the
device and no syncs in the loop. The doctor should find nothing to change."""

import torch
from _common import gpt_for, options, train

args = options(__doc__)
model, batch = gpt_for(args.device)
model = model.to(args.device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
x = torch.randint(0, model.vocab, (batch, model.seq), device=args.device)
amp = args.device.startswith("cuda")


def step() -> None:
    with torch.autocast("cuda", torch.bfloat16, enabled=amp):
        loss = model(x, x)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


train("healthy", args, step)
