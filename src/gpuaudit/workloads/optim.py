"""The optimizer a training step runs: AdamW (transformers) or SGD with momentum (CNNs),
fused where this torch has it, over the dense parameters; and SparseAdam over the weights of
sparse embeddings (`nn.Embedding(..., sparse=True)`, `nn.EmbeddingBag(..., sparse=True)`, as
DLRM's reference code makes them), whose gradients AdamW and SGD's fused path refuse; complex
weights (a Fourier neural operator's) by the foreach version, which the fused one refuses."""

from __future__ import annotations

from typing import Any


class Optimizers:
    """One or two torch optimizers stepped as one."""

    def __init__(self, parts: list[Any]) -> None:
        self.parts = tuple(parts)

    def step(self, scaler: Any = None) -> None:
        """Each part's step (through `scaler`, a GradScaler, where the step is fp16's)."""
        for opt in self.parts:
            if scaler is not None:
                scaler.step(opt)
            else:
                opt.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.parts:
            opt.zero_grad(set_to_none=set_to_none)

    @property
    def state(self) -> dict[Any, Any]:
        """The parts' state per parameter (the moments, once a step made them)."""
        return {p: s for opt in self.parts for p, s in opt.state.items()}


def sparse_weights(torch: Any, model: Any) -> list[Any]:
    """The weights of `model`'s embeddings that make sparse gradients."""
    kinds = (torch.nn.Embedding, torch.nn.EmbeddingBag)
    return [m.weight for m in model.modules()
            if isinstance(m, kinds) and m.sparse and m.weight.requires_grad]


def make_optimizer(torch: Any, model: Any, *, sgd: bool, fused: bool,
                   foreach: bool | None = True) -> tuple[Optimizers, str | None]:
    """The optimizer of `model`'s trainable parameters (module docstring), and a note where
    the fused one was unavailable (foreach instead), complex weights took foreach or sparse
    embeddings took SparseAdam."""
    sparse = sparse_weights(torch, model)
    ids = {id(p) for p in sparse}
    dense = [p for p in model.parameters() if p.requires_grad and id(p) not in ids]
    cls = torch.optim.SGD if sgd else torch.optim.AdamW
    kwargs: dict[str, Any] = {"lr": 0.01, "momentum": 0.9} if sgd else {"lr": 1e-4}
    kwargs["weight_decay"] = 1e-4 if sgd else 0.01
    notes = []
    parts = []
    # The fused kernels take real floating-point tensors only, and say so at the first step,
    # not when built: a complex weight (a Fourier layer's) is stepped by foreach beside them.
    real = [p for p in dense if p.is_floating_point()]
    other = [p for p in dense if not p.is_floating_point()]
    if real and fused:
        try:
            parts.append(cls(real, fused=True, **kwargs))
        except (RuntimeError, TypeError, ValueError) as exc:
            notes.append(f"fused {cls.__name__} unavailable "
                         f"({str(exc).splitlines()[0][:80]}): foreach")
    if real and not parts:
        parts.append(cls(real, foreach=foreach, **kwargs))
    if other:
        parts.append(cls(other, foreach=foreach, **kwargs))
        if fused:
            notes.append(f"{len(other)} complex parameter(s) stepped by foreach "
                         f"{cls.__name__} (the fused kernel takes real tensors only)")
    if sparse:
        parts.append(torch.optim.SparseAdam(sparse, lr=1e-4))
        notes.append(f"{len(sparse)} sparse embedding(s) stepped by SparseAdam")
    return Optimizers(parts), "; ".join(notes) or None
