"""The reference workloads' shapes (`bench train --model NAME`, `predict --params`): GPT-style
decoders, BERT-style encoders and ResNets as data, with PaLM's model FLOPs per token
(Chowdhery et al. 2022, appendix B: 6N + 12·L·H·Q·T in training; `workloads.flops`); and the
shape of a decoder of N parameters when only N is known (`model_shape`: memory estimates for
`recommend`, a model size for `predict`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuaudit.errors import BadInputError

from .recommendation import ModelShape


def palm_train_flops_per_token(n_matmul_params: int, layers: int, heads: int, head_dim: int,
                               seq_len: int) -> int:
    """6N + 12·L·H·Q·T."""
    return 6 * n_matmul_params + 12 * layers * heads * head_dim * seq_len


def palm_forward_flops_per_token(n_matmul_params: int, layers: int, heads: int, head_dim: int,
                                 seq_len: int) -> int:
    """2N + 4·L·H·Q·T: one forward pass (inference, prefill)."""
    return 2 * n_matmul_params + 4 * layers * heads * head_dim * seq_len


@dataclass(frozen=True)
class TransformerPreset:
    kind: str  # "gpt" or "bert"
    vocab: int
    seq_len: int
    layers: int
    heads: int
    dim: int
    batch_size: int

    @property
    def matmul_params(self) -> int:
        """N of PaLM's 6N: the weights of the matmuls. Per layer QKV, output, MLP in and out
        (12·d²); the output layer tied to the token embedding (d·V); BERT's MLM head dense."""
        n = self.layers * 12 * self.dim**2 + self.dim * self.vocab
        return n + (self.dim**2 if self.kind == "bert" else 0)

    def train_flops_per_token(self, seq_len: int) -> int:
        return palm_train_flops_per_token(self.matmul_params, self.layers, self.heads,
                                          self.dim // self.heads, seq_len)

    def forward_flops_per_token(self, seq_len: int) -> int:
        return palm_forward_flops_per_token(self.matmul_params, self.layers, self.heads,
                                            self.dim // self.heads, seq_len)


@dataclass(frozen=True)
class ResnetPreset:
    layers: tuple[int, ...]
    width: int
    image_size: int
    num_classes: int
    batch_size: int


# Vocabularies padded to a multiple of 64 (GPT-2's 50257 → 50304, BERT's 30522 → 30528): the
# output matmul then tiles evenly on tensor cores.
PRESETS: dict[str, TransformerPreset | ResnetPreset] = {
    "gpt-124m": TransformerPreset("gpt", 50304, 1024, 12, 12, 768, 32),
    "gpt-350m": TransformerPreset("gpt", 50304, 1024, 24, 16, 1024, 16),
    "gpt-1.3b": TransformerPreset("gpt", 50304, 2048, 24, 16, 2048, 8),
    "bert-base": TransformerPreset("bert", 30528, 512, 12, 12, 768, 32),
    "bert-large": TransformerPreset("bert", 30528, 512, 24, 16, 1024, 16),
    "resnet50": ResnetPreset((3, 4, 6, 3), 64, 224, 1000, 256),
    # Tiny shapes for CPUs and CI: the same code, seconds instead of hours.
    "gpt-tiny": TransformerPreset("gpt", 512, 64, 2, 2, 64, 4),
    "bert-tiny": TransformerPreset("bert", 512, 32, 2, 2, 64, 4),
    "resnet-tiny": ResnetPreset((1, 1, 1, 1), 8, 32, 10, 8),
}


# Derived shapes keep hidden ≈ 128 × layers, the ratio of Llama-2 7B/13B and GPT-3 175B.
_ASPECT = 128
_HEAD_DIM = 128


def model_shape(params: float, *, layers: int | None = None, hidden: int | None = None,
                heads: int | None = None, kv_heads: int | None = None,
                head_dim: int | None = None) -> ModelShape:
    """The transformer shape for ``params``; missing dimensions derived from N ≈ 12·L·h²."""
    if not (params > 0 and math.isfinite(params)):
        raise BadInputError(f"parameters must be more than zero, not {params:g}")
    for name, value in (("layers", layers), ("hidden size", hidden), ("heads", heads),
                        ("KV heads", kv_heads), ("head dimension", head_dim)):
        if value is not None and value < 1:
            raise BadInputError(f"{name} must be at least 1, not {value}")
    derived = layers is None or hidden is None
    if layers is None and hidden is None:
        layers = max(1, round((params / (12 * _ASPECT**2)) ** (1 / 3)))
    if hidden is None:
        assert layers is not None
        raw = math.sqrt(params / (12 * layers))
        hidden = max(_HEAD_DIM, round(raw / _HEAD_DIM) * _HEAD_DIM)
    if layers is None:
        layers = max(1, round(params / (12 * hidden * hidden)))
    if heads is None:
        dim = head_dim or _HEAD_DIM
        heads = max(1, hidden // dim)
    head_dim = head_dim or max(1, hidden // heads)
    return ModelShape(params=params, layers=layers, hidden=hidden, heads=heads,
                      kv_heads=kv_heads or heads, head_dim=head_dim, derived=derived)
