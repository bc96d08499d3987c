"""Another size of the same model family: the recorded step's work scaled to a model of
`params` parameters (gpt-*, bert-*: the reference transformer families).

Both models are built on PyTorch's meta device (shapes, no memory, no arithmetic) and one
training step of each is tallied operator by operator, with attention stood in for by one
marker op (the meta device has no flash attention). The target's matmul shapes come from
its own tally; the recorded elementwise traffic is scaled operator by operator by the
target/source ratio of that operator's traffic (log-softmax scales with the vocabulary,
layer norms with layers × width…), attention by B·L·d·T² (FLOPs) and B·L·T·d (bytes), the
optimizer by the parameter count, the host's launch gaps by the number of operators.
The target's attention shape (batch, heads, context, head size) replaces the source's: its
causal share and exponentials follow it (`attention`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gpuaudit.errors import BadInputError

from .profile import Gemm, OpWork, StepProfile

MATCH = 0.15  # a preset within ±15 % of the asked size is the target


@dataclass(frozen=True)
class Shape:
    kind: str  # gpt or bert
    vocab: int
    layers: int
    heads: int
    dim: int
    seq_len: int
    batch: int
    name: str

    @property
    def matmul_params(self) -> int:
        n = self.layers * 12 * self.dim**2 + self.dim * self.vocab
        return n + (self.dim**2 if self.kind == "bert" else 0)


@dataclass(frozen=True)
class Resized:
    source: Shape
    target: Shape
    classes: dict[str, OpWork]  # the target's work; times still the source's
    ratios: dict[str, float]  # per class: target work ÷ source work
    op_ratio: float  # target ÷ source operators per step
    param_ratio: float
    grad_bytes: int
    buckets: tuple[tuple[int, float], ...]
    basis: tuple[str, ...]


def _preset_shape(name: str, batch: int | None, seq: int | None) -> Shape | None:
    from gpuaudit.model.presets import PRESETS, TransformerPreset

    p = PRESETS.get(name)
    if not isinstance(p, TransformerPreset):
        return None
    return Shape(p.kind, p.vocab, p.layers, p.heads, p.dim, seq or p.seq_len,
                 batch or p.batch_size, name)


def source_shape(profile: StepProfile) -> Shape:
    mp = profile.model_params
    base = _preset_shape(profile.model, profile.batch, None)
    if base is None or not all(k in mp for k in ("layers", "heads", "dim", "vocab")):
        raise BadInputError(f"--params: size changes work for the reference transformer "
                            f"families (gpt-*, bert-*); {profile.model!r} is not one: give "
                            "your model's other size as --model pkg.module:build_other")
    seq = int(mp.get("seq_len") or profile.tokens_per_sample or base.seq_len)
    return Shape(base.kind, int(mp["vocab"]), int(mp["layers"]), int(mp["heads"]),
                 int(mp["dim"]), seq, profile.batch, profile.model)


def target_shape(source: Shape, params: float, *, batch: int | None = None,
                 seq_len: int | None = None) -> Shape:
    """The family's preset within ±15 % of `params` (with its batch and context), else a
    shape derived from N ≈ 12·L·d² + d·V at the source's batch and context."""
    from gpuaudit.model.presets import PRESETS, TransformerPreset, model_shape

    best = None
    for name, p in PRESETS.items():
        if not isinstance(p, TransformerPreset) or p.kind != source.kind:
            continue
        shape = _preset_shape(name, batch, seq_len)
        assert shape is not None
        err = abs(shape.matmul_params - params) / params
        if err <= MATCH and (best is None or err < best[0]):
            best = (err, shape)
    if best is not None:
        return best[1]
    guess = model_shape(params)
    shape = model_shape(max(params - source.vocab * guess.hidden, 12 * 64**2))
    heads = max(1, shape.hidden // 64)
    return Shape(source.kind, source.vocab, shape.layers, heads, shape.hidden,
                 seq_len or source.seq_len, batch or source.batch,
                 f"{source.kind}-{params / 1e9:.3g}b" if params >= 1e9 else
                 f"{source.kind}-{params / 1e6:.3g}m")


@contextlib.contextmanager
def _attention_marker(flag: list[bool]) -> Iterator[None]:
    """F.scaled_dot_product_attention replaced by one op tallied as attention: the meta
    device would otherwise run the math path (bmm, softmax) and count it as other work."""
    import torch
    import torch.nn.functional as F

    class Marker(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, q: Any, k: Any, v: Any) -> Any:
            flag.append(True)
            try:
                return q.clone()
            finally:
                flag.pop()

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            return g, g, g

    original = F.scaled_dot_product_attention

    def sdpa(q: Any, k: Any, v: Any, *args: Any, **kwargs: Any) -> Any:
        return Marker.apply(q, k, v)

    F.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def meta_tally(shape: Shape) -> tuple[Any, int, list[Any]]:
    """One training step of `shape` on the meta device: (OpTally, parameters, params)."""
    import torch

    from gpuaudit.workloads import nets
    from gpuaudit.workloads.tally import count_ops

    with torch.device("meta"):
        cls = nets.Gpt if shape.kind == "gpt" else nets.Bert
        model = cls(shape.vocab, shape.seq_len, shape.layers, shape.heads, shape.dim)
        idx = torch.randint(shape.vocab, (shape.batch, shape.seq_len))
    net = nets.WithLoss(model, nets.lm_loss)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4, foreach=True)
    flag: list[bool] = []

    def step() -> None:
        loss = net(idx, idx)
        loss.backward()
        opt.step()

    with _attention_marker(flag):
        tally = count_ops(step, force_class=lambda: "attention" if flag else None)
    params = list(net.parameters())
    n = sum(p.numel() for p in {id(p): p for p in params}.values())
    return tally, n, params


def _ratio(a: float, b: float) -> float:
    return a / b if b else 1.0


def resize(profile: StepProfile, params: float, *, batch: int | None = None,
           seq_len: int | None = None) -> Resized:
    """The profile's work for a model of `params` parameters (module docstring)."""
    from gpuaudit.workloads.buckets import ddp_buckets

    src = source_shape(profile)
    tgt = target_shape(src, params, batch=batch, seq_len=seq_len)
    s_tally, s_n, _ = meta_tally(src)
    t_tally, t_n, t_params = meta_tally(tgt)

    # FLOPs ∝ B·L·d·T² and bytes ∝ B·L·T·d for attention (flash attention never writes T×T).
    att_flops = _ratio(tgt.batch * tgt.layers * tgt.dim * tgt.seq_len**2,
                       src.batch * src.layers * src.dim * src.seq_len**2)
    att_bytes = _ratio(tgt.batch * tgt.layers * tgt.dim * tgt.seq_len,
                       src.batch * src.layers * src.dim * src.seq_len)
    def total(tally: Any, cls: str) -> float:
        if not profile.legacy:
            return float(tally.bytes.get(cls, 0))
        # a recording made before the unit classes classed each operator by its own name,
        # and its elementwise class held the norms and embeddings
        names = ("elementwise", "norm", "embedding") if cls == "elementwise" else (cls,)
        return float(sum(tally.by_name_bytes.get(c, 0) for c in names))

    param_ratio = _ratio(t_n, s_n)
    classes: dict[str, OpWork] = {}
    ratios: dict[str, float] = {}
    for cls, w in profile.classes.items():
        if cls == "gemm":
            dtype = w.shapes[0].dtype_bytes if w.shapes else 2
            shapes = tuple(Gemm(m, n, k, b, dtype, c, f) for (c_, m, n, k, b, _),
                           (c, f) in t_tally.shapes.items() if c_ == "gemm")
            flops = float(t_tally.flops["gemm"])
            ratios[cls] = _ratio(flops, w.flops)
            classes[cls] = w.with_(flops=flops, bytes=sum(g.bytes for g in shapes),
                                   shapes=shapes, kernels=())
        elif cls == "attention":
            ratios[cls] = att_flops
            causal = any(bool(shape[5]) for shape, _, _ in w.attention)
            q = tgt.dim // tgt.heads
            forward = 4.0 * tgt.batch * tgt.heads * tgt.seq_len**2 * q * tgt.layers
            classes[cls] = w.with_(flops=w.flops * att_flops, bytes=w.bytes * att_bytes,
                                   alt_bytes=(w.alt_bytes or 0) * att_bytes or None,
                                   kernels=(), attention=(
                                       ((tgt.batch, tgt.heads, tgt.seq_len, tgt.seq_len, q,
                                         causal), float(tgt.layers), forward),))
        elif cls == "optimizer":
            ratios[cls] = param_ratio
            classes[cls] = w.with_(bytes=w.bytes * param_ratio,
                                   alt_bytes=(w.alt_bytes or 0) * param_ratio or None)
        else:
            scaled, known = 0.0, 0.0
            for op, b in w.op_bytes.items():
                if s_tally.op_bytes.get(op) and op in t_tally.op_bytes:
                    scaled += b * t_tally.op_bytes[op] / s_tally.op_bytes[op]
                    known += b
            rest = max(0.0, w.bytes - known)
            new = scaled + rest * _ratio(total(t_tally, cls), total(s_tally, cls))
            ratios[cls] = _ratio(new, w.bytes)
            classes[cls] = w.with_(bytes=new,
                                   alt_bytes=(w.alt_bytes or 0) * ratios[cls] or None,
                                   op_bytes={})
    grad_bytes = int(profile.grad_bytes * param_ratio)
    buckets = tuple(ddp_buckets(t_params))  # fp32 gradients, as autocast training keeps
    basis = (f"{src.name} → {tgt.name}: {tgt.layers} layers, d {tgt.dim}, {tgt.heads} heads, "
             f"batch {tgt.batch} × {tgt.seq_len} tokens ({tgt.matmul_params / 1e6:,.0f} M "
             "matmul weights); both models tallied on the meta device",
             "scaled work: " + ", ".join(f"{c} ×{r:.3g}" for c, r in sorted(ratios.items())))
    return Resized(source=src, target=tgt, classes=classes, ratios=ratios,
                   op_ratio=_ratio(t_tally.total_ops, s_tally.total_ops),
                   param_ratio=param_ratio, grad_bytes=grad_bytes, buckets=buckets,
                   basis=basis)
