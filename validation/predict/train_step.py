"""One eager training step of a user's entry point on the GPU, as `bench train` runs it
(bf16 autocast or fp32/tf32, fused AdamW, cudnn.benchmark on), for the probes here."""

from __future__ import annotations

from collections.abc import Callable, Iterable


def train_step(entry: str, precision: str, batches: Iterable[int] | None = None
               ) -> tuple[Callable[[int], None], list[int]]:
    """(step(batch), the batches it has data for: `batches`, else the model's own)."""
    import torch

    from gpuaudit.workloads.entry import default_loss, load, split_batch
    from gpuaudit.workloads.precision import autocast_dtype

    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    w = load(entry)
    model = w.model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    loss_fn = w.loss or default_loss
    dtype = autocast_dtype(torch, precision)
    sizes = list(batches) if batches is not None else [w.batch_size]
    data = {}
    for b in sizes:
        inputs, target = split_batch(w.make_batch(b), w.model)
        data[b] = (tuple(t.to(dev) if torch.is_tensor(t) else t for t in inputs),
                   target.to(dev) if torch.is_tensor(target) else target)

    def step(b: int) -> None:
        inputs, target = data[b]
        with torch.autocast("cuda", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = loss_fn(model(*inputs), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, sizes
