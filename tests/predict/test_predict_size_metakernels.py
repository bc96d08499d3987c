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
    from gpuaudit.predict import stepcount

    monkeypatch.syspath_prepend(str(EXAMPLES))
    c = stepcount.count("user.conformer:build_medium", 4)
    assert c.counted_on == "meta"
    assert ("unknown", "ctc_loss") in c.bytes
    assert {cls for cls, _ in c.flops} >= {"gemm", "conv", "attention"}


# layers and losses users' models call, forward and backward: each on the meta device, so a
# model made of them counts its other size there (bincount, whose size is its data's, not)
CALLS = {
    "lstm": lambda nn, F: nn.LSTM(16, 32, batch_first=True)(torch.randn(4, 10, 16))[0],
    "bidirectional gru": lambda nn, F: nn.GRU(16, 32, 2, bidirectional=True)(
        torch.randn(10, 4, 16))[0],
    "grid_sample": lambda nn, F: F.grid_sample(torch.randn(2, 3, 8, 8, requires_grad=True),
                                               torch.rand(2, 4, 4, 2), align_corners=False),
    "weight_norm": lambda nn, F: nn.utils.parametrizations.weight_norm(nn.Linear(8, 8))(
        torch.randn(2, 8)),
    "ctc_loss": lambda nn, F: F.ctc_loss(
        torch.randn(20, 2, 6, requires_grad=True).log_softmax(-1), torch.randint(1, 6, (2, 5)),
        torch.tensor([20, 18]), torch.tensor([5, 4])),
    "stft": lambda nn, F: torch.stft(torch.randn(2, 400, requires_grad=True), 64,
                                     window=torch.hann_window(64), return_complex=True).abs(),
    "embedding_bag": lambda nn, F: nn.EmbeddingBag(100, 8)(torch.randint(0, 100, (4, 6))),
    "cdist": lambda nn, F: torch.cdist(torch.randn(4, 5, 3, requires_grad=True),
                                       torch.randn(4, 6, 3)),
    "rfft2": lambda nn, F: torch.fft.rfft2(torch.randn(2, 8, 8, requires_grad=True)).abs(),
    "cross_entropy 2d": lambda nn, F: F.cross_entropy(
        torch.randn(2, 5, 4, 4, requires_grad=True), torch.randint(0, 5, (2, 4, 4))),
}


@pytest.mark.parametrize("name", CALLS)
def test_what_users_models_call_runs_on_the_meta_device(name):
    from torch import nn
    from torch.nn import functional as F

    metakernels.register()
    with torch.device("meta"):
        out = CALLS[name](nn, F).sum()
        out.backward()
    assert out.device.type == "meta"
