"""The reference workloads by name: presets of the GPT decoder, the BERT encoder and ResNet,
each with synthetic data, its loss and its model FLOPs; or the user's `pkg.module:build`."""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable
from typing import Any

from gpuaudit.errors import BadInputError
from gpuaudit.model.presets import PRESETS, ResnetPreset, TransformerPreset
from gpuaudit.workloads.entry import Workload, is_entry_point, load
from gpuaudit.workloads.flops import resnet_flops


def check_model(name: str) -> None:
    """Bad input unless `name` is a preset or an importable entry point."""
    if is_entry_point(name):
        from gpuaudit.workloads.entry import resolve

        resolve(name)
    elif name not in PRESETS:
        raise BadInputError(f"unknown model {name!r} (choose from {', '.join(PRESETS)}, "
                            "or pkg.module:function)")


def torchvision_version() -> str | None:
    if importlib.util.find_spec("torchvision") is None:
        return None
    import torchvision

    return str(torchvision.__version__)


def build(name: str, device: Any, *, seq_len: int | None = None,
          batch_size: int | None = None) -> Workload:
    """A fresh workload on `device` (parameters created there, not copied)."""
    import torch

    if is_entry_point(name):
        w = load(name)
        w.model = w.model.to(device)
        if batch_size:
            w.batch_size = batch_size
        return w
    preset = PRESETS[name]
    with torch.device(device):
        if isinstance(preset, TransformerPreset):
            w = _transformer(name, preset, device, seq_len or preset.seq_len)
        else:
            w = _resnet(name, preset, device)
    if batch_size:
        w.batch_size = batch_size
    return w


def _transformer(name: str, p: TransformerPreset, device: Any, seq_len: int) -> Workload:
    import torch

    from gpuaudit.workloads import nets

    cls = nets.Gpt if p.kind == "gpt" else nets.Bert
    model = cls(p.vocab, max(seq_len, p.seq_len), p.layers, p.heads, p.dim)

    def make_batch(n: int, device: Any = device) -> tuple[tuple[Any, ...], Any]:
        idx = torch.randint(p.vocab, (n, seq_len), device=device)
        return (idx,), torch.randint(p.vocab, (n, seq_len), device=device)

    return Workload(
        name=name, model=model, make_batch=make_batch, loss=nets.lm_loss,
        batch_size=p.batch_size, tokens_per_sample=seq_len,
        train_flops_per_sample=p.train_flops_per_token(seq_len) * seq_len,
        forward_flops_per_sample=p.forward_flops_per_token(seq_len) * seq_len,
        expected_count_per_sample=p.train_flops_per_token(seq_len) * seq_len,
        flops_source="PaLM 6N + 12·L·H·Q·T per token",
        params={"layers": p.layers, "heads": p.heads, "dim": p.dim, "vocab": p.vocab,
                "seq_len": seq_len, "matmul_params": p.matmul_params,
                "attention": "causal" if p.kind == "gpt" else "bidirectional"})


def _resnet(name: str, p: ResnetPreset, device: Any) -> Workload:
    import torch

    from gpuaudit.workloads import nets

    tv = torchvision_version()
    if name == "resnet50" and tv is not None:
        import torchvision

        model = torchvision.models.resnet50(weights=None)
        impl = f"torchvision {tv} resnet50"
    else:
        model = nets.ResNet(p.layers, p.width, p.num_classes)
        impl = "gpuaudit's ResNet (torchvision layout v1.5)"
    flops = resnet_flops(p.layers, width=p.width, image_size=p.image_size,
                         num_classes=p.num_classes)

    def make_batch(n: int, device: Any = device) -> tuple[tuple[Any, ...], Any]:
        x = torch.randn(n, 3, p.image_size, p.image_size, device=device)
        return (x,), torch.randint(p.num_classes, (n,), device=device)

    return Workload(
        name=name, model=model, make_batch=make_batch, loss=nets.class_loss,
        batch_size=p.batch_size, train_flops_per_sample=flops.train,
        forward_flops_per_sample=flops.forward, expected_count_per_sample=flops.train_executed,
        flops_source="convolutions and classifier, 3 × forward", image_model=True,
        uses_linear=False,
        params={"implementation": impl, "image_size": p.image_size,
                "layers": "-".join(map(str, p.layers)), "width": p.width})


def call_make_batch(make: Callable[..., Any], n: int, device: Any) -> Any:
    """make_batch(n, device=…) where it takes a device, else make_batch(n)."""
    try:
        takes_device = "device" in inspect.signature(make).parameters
    except (TypeError, ValueError):
        takes_device = False
    return make(n, device=device) if takes_device else make(n)
