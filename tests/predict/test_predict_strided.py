"""The op profile's strided traffic (`workloads.tally.strided`, `UnitGroup.strided_bytes`):
which operators it marks, on the cases timed alone on an H100
(validation/predict/strided_kernels.py, kept as strided-kernels-h100.json), and that the
marked ones are those whose bf16 time did not halve."""

import json

import pytest

from tests.conftest import FIXTURES
from validation.predict.strided_kernels import CONTIGUOUS, SHAPES, bf16_over_fp32, cases

TIMED = json.loads((FIXTURES / "predict" / "zoo" / "strided-kernels-h100.json").read_text())
REDUCTIONS = ("sum over repeated heads", "mean over last dim")  # not marked: see below


def _strided_share(fn):
    from gpuaudit.workloads.tally import count_ops

    tally = count_ops(fn)
    moved = sum(tally.group_bytes.values())
    assert moved > 0
    return sum(tally.group_strided.values()) / moved


@pytest.mark.parametrize("case", sorted(cases((2, 4, 2, 16, 8), None, "cpu")))
def test_each_timed_case_is_marked_as_its_operands_are_laid_out(case):
    """Slices, broadcasts, repeats and transposes made contiguous mark all their traffic;
    operands sharing one dense layout (a transposed tensor times itself) none."""
    torch = pytest.importorskip("torch")
    fn = cases((2, 4, 2, 16, 8), torch.float32, "cpu")[case]
    share = _strided_share(fn)
    if case in CONTIGUOUS or case in REDUCTIONS:
        assert share == 0.0
    else:  # repeat_kv's traffic is its copy of the expanded keys: the `_unsafe_view` after
        assert share == 1.0  # it moves nothing, though its schema names no alias


def test_the_marked_cases_are_those_whose_bf16_time_did_not_halve():
    """On the H100, bf16 ÷ fp32: the contiguous cases 0.43–0.57 (their traffic's 0.5), the
    marked ones 0.61–1.05 at every shape. Reductions, not marked, took 0.55–1.0: their
    kernels accumulate in fp32 whatever they read."""
    ratios = bf16_over_fp32(TIMED)
    assert "H100" in TIMED["gpu"] and len(ratios) == 11 * len(SHAPES)
    contiguous = [r for (case, _), r in ratios.items() if case in CONTIGUOUS]
    marked = [r for (case, _), r in ratios.items()
              if case not in CONTIGUOUS and case not in REDUCTIONS]
    assert max(contiguous) < 0.58 < 0.60 < min(marked)
    assert [round(f(marked), 2) for f in (min, max)] == [0.61, 1.05]


def test_the_precision_rule_takes_the_median_of_the_marked_cases():
    """Strided traffic's ratio across precisions is taken to the power that carries the
    marked cases' median (0.78 of their fp32 time in bf16) from their traffic's 0.5; its
    band (±30 % of the strided part) holds 17 of the 18 (all but 1.05)."""
    import math
    import statistics

    from gpuaudit.predict import groups as grp

    marked = [r for (case, _), r in bf16_over_fp32(TIMED).items()
              if case not in CONTIGUOUS and case not in REDUCTIONS]
    mid = statistics.median(marked)
    assert mid == pytest.approx(0.78, abs=0.01)
    assert abs(grp.STRIDED_POWER - math.log(mid) / math.log(0.5)) < 0.002
    inside = [r for r in marked if abs(r / 0.5 ** grp.STRIDED_POWER - 1) <= grp.U_STRIDED]
    assert len(marked) == 18 and len(inside) == 17


def test_an_unsafe_view_moves_nothing():
    """`_unsafe_view` (matmul's reshape of its result) aliases its input, though its schema
    does not say so: no traffic, where a reshape that copies moves its bytes twice."""
    torch = pytest.importorskip("torch")
    from gpuaudit.workloads.tally import traffic

    x = torch.ones(4, 8)
    op = torch.ops.aten._unsafe_view.default
    assert traffic(op, (x, [32]), {}, op(x, [32]), torch) == 0
    copy = torch.ops.aten.clone.default
    assert traffic(copy, (x,), {}, copy(x), torch) == 2 * x.numel() * 4
