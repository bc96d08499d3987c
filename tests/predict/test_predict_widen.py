"""A convolution call at twice its channels (`workloads.widen`), checked against the calls a
model of twice the width records: the same shapes, memory formats and counted FLOPs."""

from __future__ import annotations

import pytest

from gpuaudit.workloads.widen import Widening, widening

torch = pytest.importorskip("torch")

from gpuaudit.workloads.calls import Call, TensorSpec  # noqa: E402
from gpuaudit.workloads.tally import count_ops  # noqa: E402
from gpuaudit.workloads.units import replay  # noqa: E402
from gpuaudit.workloads.widen import widened  # noqa: E402


def _net(width: int, channels: int = 3, out: int = 3):
    """An image model of `width` channels: a first layer from the image's colours, a 3×3, a
    depthwise one, a strided 1×1, one back to `out` channels."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(channels, width, 3, padding=1),
        torch.nn.Conv2d(width, 2 * width, 3, padding=1, bias=False),
        torch.nn.Conv2d(2 * width, 2 * width, 7, padding=3, groups=2 * width),
        torch.nn.Conv2d(2 * width, width, 1, stride=2),
        torch.nn.Conv2d(width, out, 3, padding=1))


def _calls(net, x):
    def step():
        net(x).float().sum().backward()
    return count_ops(step, record_calls=True).calls


@pytest.mark.parametrize("channels_last", [False, True])
def test_each_convolution_widened_is_the_call_a_model_twice_as_wide_makes(channels_last):
    x = torch.randn(2, 3, 16, 16)
    narrow, wide = _net(8), _net(16)
    if channels_last:
        narrow, wide = (n.to(memory_format=torch.channels_last) for n in (narrow, wide))
        x = x.contiguous(memory_format=torch.channels_last)
    here, there = _calls(narrow, x), _calls(wide, x)
    assert [c.name for c in here] == ["conv2d"] * 5
    for h, t in zip(here, there, strict=True):
        w = widened(h)
        assert w is not None
        assert [(s.shape, s.stride, s.requires_grad) for s in w.tensors()] == \
            [(s.shape, s.stride, s.requires_grad) for s in t.tensors()]
        # stride, padding, dilation, groups: the wider model's
        assert [a for a in w.args if not isinstance(a, TensorSpec)] == \
            [a for a in t.args if not isinstance(a, TensorSpec)]
        # the work torch's FLOP counter gives the wider model's call
        assert w.flops == t.flops
    # the recorded call itself is left as it was
    assert here[0].tensors()[1].shape == (8, 3, 3, 3)


def test_a_widened_call_runs_forward_and_backward():
    x = torch.randn(2, 3, 16, 16)
    calls = _calls(_net(8), x)
    depthwise = widened(calls[2])
    assert depthwise is not None and depthwise.args[6] == 32
    step = replay(torch, torch.device("cpu"), depthwise, depthwise, None, 2, 2, 1.0, None)
    grads = step()
    assert [tuple(g.shape) for g in grads if g is not None][:2] == [(2, 32, 16, 16),
                                                                      (32, 1, 7, 7)]


def test_the_datas_channels_are_kept_and_groups_keep_their_channels():
    # RGB in, 64 out: its input is the image's; a latent of 4 channels out stays 4
    assert widening((8, 3, 32, 32), (64, 3, 3, 3), 2) == Widening(1, 2, 1, 2)
    assert widening((8, 128, 32, 32), (4, 128, 1, 1), 2) == Widening(2, 1, 1, 2)
    assert widening((8, 64, 32, 32), (128, 64, 3, 3), 2) == Widening(2, 2, 1, 4)
    # depthwise and grouped: channels per group kept, groups and work × 2
    assert widening((8, 64, 32, 32), (64, 1, 7, 7), 2) == Widening(2, 2, 2, 2)
    assert widening((8, 64, 32, 32), (128, 16, 3, 3), 2) == Widening(2, 2, 2, 2)
    # a grouped layer from the data's channels to a wider one has no one way to widen; a
    # 1-D one (audio) widens as a 2-D one does
    assert widening((8, 4, 32, 32), (64, 1, 3, 3), 2) is None
    assert widening((8, 1, 16000), (64, 1, 5), 2) == Widening(1, 2, 1, 2)
    assert widening((8, 64, 1000), (64, 32, 5), 2) == Widening(2, 2, 2, 2)
    assert widening((8, 64), (64, 64), 2) is None


def test_transposed_and_all_data_convolutions_are_not_widened():
    x = TensorSpec((2, 64, 8, 8), "float32", (4096, 64, 8, 1), True)
    w = TensorSpec((64, 32, 4, 4), "float32", (512, 16, 4, 1), True)
    assert widened(Call("conv_transpose2d", None, (x, w, None), {})) is None
    rgb = TensorSpec((2, 3, 8, 8), "float32", (192, 64, 8, 1), False)
    w3 = TensorSpec((3, 3, 3, 3), "float32", (27, 9, 3, 1), True)
    assert widened(Call("conv2d", None, (rgb, w3, None), {})) is None


def test_a_functional_call_with_its_groups_and_bias_by_keyword_widens_as_well():
    """A user's own `F.conv1d(x, w, bias=b, padding="same", groups=C)` (a depthwise layer
    written by hand, as Conformer-style blocks write it) widens its keywords."""
    import torch.nn.functional as F

    c = 16
    w = torch.randn(c, 1, 5, requires_grad=True)
    b = torch.randn(c, requires_grad=True)
    x = torch.randn(2, c, 50, requires_grad=True)

    def step():
        F.conv1d(x, w, bias=b, padding="same", groups=c).sum().backward()
    call = next(k for k in count_ops(step, record_calls=True).calls if k.name == "conv1d")
    wide = widened(call)
    assert wide is not None and wide.kwargs["groups"] == 2 * c
    assert wide.kwargs["padding"] == "same" and wide.kwargs["bias"].shape == (2 * c,)
    assert [t.shape for t in wide.tensors()][:2] == [(2, 2 * c, 50), (2 * c, 1, 5)]
    out = replay(torch, torch.device("cpu"), wide, wide, None, 2, 2, 1.0, None)()
    assert out[0].shape == (2, 2 * c, 50)
