"""A PyTorch Lightning image classifier whose Dataset augments each sample in Python, with
two DataLoader workers."""
import argparse
import os

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--max-seconds", type=int, default=12)
args = p.parse_args()


class Augmented(Dataset):
    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        img = rng.random((3, 160, 160), dtype=np.float32)
        for _ in range(6):  # random crops, flips, jitter: per-pixel work in numpy
            img = np.roll(img, rng.integers(-8, 8), axis=2)
            img = img[:, :, ::-1] if rng.random() < 0.5 else img
            img = np.clip(img * rng.uniform(0.8, 1.2) + rng.normal(0, 0.05, img.shape), 0, 1)
        return torch.from_numpy(np.ascontiguousarray(img, dtype=np.float32)), i % 10


class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 64, 3, 2, 1), nn.ReLU(), nn.Conv2d(64, 128, 3, 2, 1),
                                 nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                 nn.Linear(128, 10))

    def training_step(self, batch, _):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


if __name__ == "__main__":
    loader = DataLoader(Augmented(), batch_size=64, num_workers=2, shuffle=True)
    trainer = pl.Trainer(accelerator="gpu" if args.device.startswith("cuda") else "cpu",
                         devices=1, max_time={"seconds": args.max_seconds}, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False,
                         default_root_dir=os.environ.get("TMPDIR", "/tmp"))
    trainer.fit(Net(), loader)
    print(f"done: {trainer.global_step} steps")
