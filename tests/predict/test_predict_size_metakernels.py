"""`predict --model` counts another size on the meta device also where the model calls an
operator torch ships no meta kernel for (`workloads/metakernels.py`): a speech model's CTC
loss was counted on the CPU with real tensors, minutes for a Conformer-M's step."""

import pytest

torch = pytest.importorskip("torch")

from gpuaudit.workloads import metakernels  # noqa: E402
from tests.conftest import FIXTURES  # noqa: E402

EXAMPLES = FIXTURES.parents[1] / "examples" / "predict"


def _ctc(device, targets_2d=True):
    g = torch.Generator().manual_seed(0)
    log_probs = torch.randn(50, 3, 20, generator=g).log_softmax(-1).requires_grad_()
    lengths = torch.tensor([50, 41, 37])
    if targets_2d:
        targets, target_lengths = torch.randint(1, 20, (3, 12), generator=g), torch.tensor(
            [12, 9, 5])
    else:
        target_lengths = torch.tensor([12, 9, 5])
        targets = torch.randint(1, 20, (26,), generator=g)
    args = (log_probs.detach().to(device).requires_grad_(), targets.to(device),
            lengths.to(device), target_lengths.to(device))
    return args


def test_the_ctc_kernels_give_the_cpu_kernels_shapes():
    metakernels.register()
    metakernels.register()  # once a process: a second call changes nothing
    cpu = torch.ops.aten._ctc_loss.Tensor(*_ctc("cpu"), 0, False)
    meta = torch.ops.aten._ctc_loss.Tensor(*_ctc("meta"), 0, False)
    assert [t.device.type for t in meta] == ["meta", "meta"]
    assert [t.shape for t in meta] == [t.shape for t in cpu]
    log_probs, targets, lengths, target_lengths = _ctc("meta")
    loss = torch.nn.functional.ctc_loss(log_probs, targets, lengths, target_lengths)
    loss.backward()
    assert log_probs.grad.shape == log_probs.shape and log_probs.grad.device.type == "meta"


def test_concatenated_targets_are_left_to_the_cpu():
    """Their longest label, which sets log_alpha's size, is in their data."""
    metakernels.register()
    with pytest.raises(NotImplementedError, match="concatenated"):
        torch.ops.aten._ctc_loss.Tensor(*_ctc("meta", targets_2d=False), 0, False)


def test_a_conformer_with_ctc_loss_is_counted_on_the_meta_device(monkeypatch):
    """The user's Conformer-M (examples/predict/user/conformer.py), the size its S was
    predicted to: counted on meta, its CTC loss an unknown unit beside the model's classes."""
    from gpuaudit.predict import retarget

    monkeypatch.syspath_prepend(str(EXAMPLES))
    c = retarget.count("user.conformer:build_medium", 4)
    assert c.counted_on == "meta"
    assert ("unknown", "ctc_loss") in c.bytes
    assert {cls for cls, _ in c.flops} >= {"gemm", "conv", "attention"}
