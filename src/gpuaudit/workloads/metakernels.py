"""Meta kernels for operators that users' models call and torch ships none for.

Another size of a model (`predict --model`) is counted on the meta device, in seconds; a
model that calls an operator with no meta kernel falls back to real tensors on the CPU,
which for a speech model's CTC loss is minutes (a Conformer-M's step at batch 64). Each
kernel here gives only its outputs' shapes, as a meta kernel does; where those follow the
data (CTC targets concatenated in one dimension, whose longest label sets `log_alpha`'s
size), it raises NotImplementedError and the count goes to the CPU as before.
"""

from __future__ import annotations

from typing import Any

_registered: Any = None  # the torch.library.Library holding them, once registered


def _ctc_loss(log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any,
              blank: int = 0, zero_infinity: bool = False) -> tuple[Any, Any]:
    # (neg_log_likelihood per sample, log_alpha: sample × time × (2 × longest label + 1)),
    # the shapes of ATen's CPU and CUDA kernels for padded (batch, label) targets
    if log_probs.dim() != 3 or targets.dim() != 2:
        raise NotImplementedError("ctc_loss on the meta device: targets concatenated in one "
                                  "dimension have their longest label in their data")
    t, n = log_probs.shape[:2]
    return (log_probs.new_empty((n,)),
            log_probs.new_empty((n, t, 2 * targets.shape[1] + 1)))


def _ctc_loss_backward(grad: Any, log_probs: Any, *args: Any, **kwargs: Any) -> Any:
    return log_probs.new_empty(log_probs.shape)


KERNELS = {
    "_ctc_loss": _ctc_loss,
    "_ctc_loss.Tensor": _ctc_loss,
    "_ctc_loss_backward": _ctc_loss_backward,
    "_ctc_loss_backward.Tensor": _ctc_loss_backward,
}


def register() -> None:
    """Register the kernels torch lacks (once a process; one torch has since shipped is left
    as torch's)."""
    global _registered
    if _registered is not None:
        return
    import torch

    lib = torch.library.Library("aten", "IMPL")  # kernels for aten operators, not new ones
    for name, kernel in KERNELS.items():
        if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "Meta"):
            lib.impl(name, kernel, "Meta")
    _registered = lib
