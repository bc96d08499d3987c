"""Training that pulls each step's predictions to the CPU (.cpu().tolist()) to compute a
metric in Python before the next step."""
import argparse
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=float, default=12)
args = p.parse_args()
gpu = args.device.startswith("cuda")
width, batch = (4096, 8192) if gpu else (128, 256)
model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(4)],
                      nn.Linear(width, 10)).to(args.device)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(batch, width, device=args.device)
y = torch.randint(0, 10, (batch,), device=args.device)
correct_by_class = [0] * 10
start, step = time.time(), 0
while time.time() - start < args.max_seconds:
    with torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16, enabled=gpu):
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.float(), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    preds = logits.argmax(1).cpu().tolist()
    labels = y.cpu().tolist()
    for pred, label in zip(preds, labels, strict=True):
        if pred == label:
            correct_by_class[label] += 1
    step += 1
print(f"done: {step} steps, correct {sum(correct_by_class)}")
