"""Convolutions timed alone, as recordings made before the unit timings kept them (the conv
class's layers, read back by `predict.legacy`): a precision change moving the conv and layout
classes together by their timed ratio; and the held timing every unit timed alone now uses.
(The units timed alone since: test_predict_capture_units.py.)"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from gpuaudit.predict.kernels import LAYOUT  # noqa: E402
from gpuaudit.predict.precision import (  # noqa: E402
    U_CONV_UNTIMED,
    U_NORM_TIMED,
    change,
    timed_conv_ratio,
)
from gpuaudit.predict.profile import ConvTimed, ConvTiming, OpWork  # noqa: E402
from gpuaudit.predict.state import ClassState, StepState  # noqa: E402

# (input, weight, stride, padding, dilation, groups, bias, input grad, memory format)
FIRST = ((4, 3, 8, 8), (8, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1, False, False, "contiguous")
SECOND = ((4, 8, 8, 8), (16, 8, 3, 3), (2, 2), (1, 1), (1, 1), 1, True, True, "contiguous")


def _timing(src_ms: tuple[float, float], dst_ms: tuple[float, float], share: float = 0.9
            ) -> ConvTiming:
    a, b = (FIRST, 2.0), (SECOND, 1.0)  # (layer, count per step)
    rows = [ConvTimed(layer, "fp32", n, ms) for (layer, n), ms in zip((a, b), src_ms, strict=True)]
    rows += [ConvTimed(layer, "bf16", n, ms) for (layer, n), ms in zip((a, b), dst_ms, strict=True)]
    return ConvTiming(timed=tuple(rows), flops_share=share)


def test_the_timed_ratio_is_time_weighted_over_the_layers_timed_in_both():
    w = OpWork(cls="conv", ms=10.0, flops=1e12, bytes=1e9, convs=_timing((3.0, 4.0), (1.0, 0.5)))
    ratio, layers, share = timed_conv_ratio(w, "fp32", "bf16")
    assert ratio == pytest.approx((2 * 1.0 + 1 * 0.5) / (2 * 3.0 + 1 * 4.0))
    assert (layers, share) == (2, 0.9)
    assert timed_conv_ratio(w, "bf16", "fp32")[0] == pytest.approx(1 / ratio)
    assert timed_conv_ratio(w, "fp32", "fp16") is None  # fp16 was not timed
    assert timed_conv_ratio(w.with_(convs=None), "fp32", "bf16") is None


def _state(layout_ms: float | None, timing: ConvTiming | None) -> StepState:
    from gpuaudit.predict.hardware import Roofs
    from gpuaudit.specs.catalog import load_catalog

    roofs = Roofs(gpu=load_catalog().get("h200-sxm"),
                  matmul_tflops={"bf16": 700.0, "fp16": 700.0, "fp32": 50.0},
                  memory_gbps=4000.0, sms=132, measured=True)
    conv = OpWork(cls="conv", ms=100.0, flops=1e12, bytes=2e9, convs=timing)
    classes = {"conv": ClassState(work=conv, measured_ms=100.0, ms=100.0, achieved=0.5)}
    if layout_ms is not None:
        lay = OpWork(cls=LAYOUT, ms=layout_ms, flops=0.0, bytes=1e9)
        classes[LAYOUT] = ClassState(work=lay, measured_ms=layout_ms, ms=layout_ms,
                                     achieved=None)
    return StepState(classes=classes, idle_ms=0.0, idle_unc=0.0, precision="fp32",
                     roofs=roofs, gpus=1, batch=8, tokens=None, model="m",
                     matmul_params=None, buckets=(), grad_bytes=0, allreduce=None)


def test_a_precision_change_moves_conv_and_its_transforms_together():
    timing = _timing((3.0, 4.0), (1.0, 0.5))
    ratio = timed_conv_ratio(OpWork(cls="conv", ms=0, flops=0, bytes=0, convs=timing),
                             "fp32", "bf16")[0]
    state = _state(layout_ms=2.0, timing=timing)
    change(state, "bf16")
    conv, layout = state.classes["conv"], state.classes[LAYOUT]
    assert conv.ms == pytest.approx((100.0 + 2.0) * ratio)
    assert layout.ms == 0.0 and "timed ratio" in layout.basis[-1]
    assert conv.unc == pytest.approx(math.hypot(U_NORM_TIMED, 0.1 * U_CONV_UNTIMED))
    assert "timed alone in both precisions" in conv.basis[-1]
    # re-calibrated at the new time, for the changes that follow
    from gpuaudit.predict.ideal import ideal_seconds
    assert conv.achieved == pytest.approx(
        ideal_seconds("conv", conv.work, state.roofs, "bf16") * 1e3 / conv.ms)
    assert all(g.dtype_bytes == 2 for g in conv.work.shapes)


def test_without_the_timing_the_roofline_and_modeled_transforms_stay():
    state = _state(layout_ms=None, timing=None)
    change(state, "bf16")
    # fp32 NCHW → bf16: cuDNN's transforms are modeled afresh (not in the recording)
    assert LAYOUT in state.classes and state.classes[LAYOUT].ms > 0
    assert "timed alone" not in " ".join(state.classes["conv"].basis)


def test_held_timing_on_a_cpu_is_the_plain_median():
    from gpuaudit.workloads import timing

    n = []
    timing.held_call_ms(torch, torch.device("cpu"), lambda: n.append(1), 0.0)
    assert len(n) == 2 + 3  # median_call_ms: two warm-ups, three calls


@pytest.mark.gpu
def test_held_timing_keeps_pythons_launches_out_of_a_short_call():
    """Eight 20 µs spin kernels launched one by one from Python: timed with the host in the
    window, the launches' gaps count; held, the GPU runs them back to back."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from gpuaudit.workloads import timing

    device = torch.device("cuda", 0)
    cycles = timing.spin_cycles_per_us(torch)

    def eight() -> None:
        for _ in range(8):
            torch.cuda._sleep(int(20 * cycles))

    held = timing.held_call_ms(torch, device, eight, 0.2)
    assert held == pytest.approx(8 * 20 / 1e3, rel=0.25)
    assert timing.median_call_ms(torch, device, eight, 0.2) >= held
