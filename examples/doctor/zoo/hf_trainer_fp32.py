"""A BERT classifier built from its config and trained with Hugging Face's Trainer at its
defaults (fp32)."""
import argparse
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--max-steps", type=int, default=150)
args = p.parse_args()
gpu = torch.cuda.is_available()


class Reviews(Dataset):
    def __init__(self, n=20_000, seq=256 if gpu else 32):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(1000, 30000, (n, seq), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]),
                "labels": self.labels[i]}


config = BertConfig() if gpu else BertConfig(hidden_size=64, num_hidden_layers=2,
                                             num_attention_heads=2, intermediate_size=128)
model = BertForSequenceClassification(config)
out = tempfile.mkdtemp()
trainer = Trainer(model=model, train_dataset=Reviews(),
                  args=TrainingArguments(output_dir=out, max_steps=args.max_steps,
                                         per_device_train_batch_size=32, report_to="none",
                                         save_strategy="no", logging_steps=50,
                                         disable_tqdm=True, dataloader_num_workers=2))
trainer.train()
print("done")
