"""Fine-tune a Transformer encoder classifier in plain fp32 (PyTorch's default: TF32 off)."""
import argparse
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--batch-size", type=int, default=64)
p.add_argument("--max-seconds", type=float, default=12)
args = p.parse_args()
gpu = args.device.startswith("cuda")
d, layers, seq = (768, 6, 256) if gpu else (64, 2, 32)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(30522, d)
        layer = nn.TransformerEncoderLayer(d, 12 if gpu else 4, 4 * d, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d, 2)

    def forward(self, ids):
        return self.head(self.encoder(self.embed(ids)).mean(1))


model = Classifier().to(args.device)
opt = torch.optim.AdamW(model.parameters(), lr=2e-5)
loss_fn = nn.CrossEntropyLoss()
ids = torch.randint(0, 30522, (args.batch_size, seq), device=args.device)
labels = torch.randint(0, 2, (args.batch_size,), device=args.device)
start, step = time.time(), 0
while time.time() - start < args.max_seconds:
    loss = loss_fn(model(ids), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.4f}")
print(f"done: {step} steps")
