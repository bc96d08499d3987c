"""A GPT-style language model trained in bf16 with a fused optimizer: the control."""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=float, default=12)
args = p.parse_args()
gpu = args.device.startswith("cuda")
d, layers, seq, batch, vocab = (1024, 12, 1024, 16, 50304) if gpu else (64, 2, 64, 4, 512)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, 16 if gpu else 4, -1).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.blocks(x))


model = GPT().to(args.device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=gpu)
data = torch.randint(0, vocab, (batch, seq + 1), device=args.device)
start, step = time.time(), 0
while time.time() - start < args.max_seconds:
    with torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16, enabled=gpu):
        logits = model(data[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), data[:, 1:].flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    step += 1
    if step % 100 == 0:
        print(f"step {step} loss {loss.item():.3f}")
print(f"done: {step} steps")
