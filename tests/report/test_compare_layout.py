"""`gpuaudit compare`'s terminal view at 80 and 200 columns, on the real H200 runs: every
figure, size, value, change and noise, every finding and machine difference shown whole (no
'494…', no folded name or UUID), within the width, in a table while one fits."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from gpuaudit.compare import compare_runs
from gpuaudit.report.compare_view import SHOWN, compare_view
from tests.support.reportkit import NATIVE, ONE_GPU, TWO_GPU, contended, load, with_figure

WIDTHS = (80, 200)


def render(renderable, width: int) -> str:
    console = Console(record=True, width=width, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.export_text()


def planted():
    a = load(ONE_GPU)
    b = contended(with_figure(with_figure(a, "memory", "copy", 0.92), "matmul", "bf16", 1.1))
    return a, b


PAIRS = {"1gpu-vs-2gpu": lambda: (load(ONE_GPU), load(TWO_GPU)),
         "collectives": lambda: (load(TWO_GPU), load(NATIVE)),
         "planted": planted}


def shown_figures(c):
    return c.regressions[:SHOWN] + c.improvements[:SHOWN]


def fmt(value):
    return "n/a" if value is None else f"{value:.4g}"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_every_value_whole_within_the_width(pair, width):
    c = compare_runs(*PAIRS[pair](), 5.0)
    text = render(compare_view(c), width)
    assert all(len(line) <= width for line in text.splitlines()), text
    assert "…" not in text
    words = set(text.split())
    expected = []
    for f in shown_figures(c):
        expected += [f"{f.suite}/{f.name}", fmt(f.a_value), fmt(f.b_value),
                     f"{f.change_pct:+.1f}%", f"{f.noise_pct:.1f}%"]
        if f.label:
            assert f.label in text, (f.label, text)
    for d in c.differences:
        expected += [w for v in (d.a, d.b) if v for w in v.split()]
    for f in c.findings:
        expected += [f.code, *f.message.split()]
    missing = [v for v in expected if v not in words]
    assert not missing, f"cut or lost at {width} columns: {missing}\n{text}"


@pytest.mark.parametrize("width", WIDTHS)
def test_rows_stay_rows_at_80_columns(width):
    """Fifteen collective figures at 80 columns: the narrower layout (unit in its own column)
    keeps one line per figure rather than a stack of 'name: value' blocks."""
    c = compare_runs(load(TWO_GPU), load(NATIVE), 5.0)
    text = render(compare_view(c), width)
    lines = text.splitlines()
    for f in c.regressions[:SHOWN]:
        row = f"{f.suite}/{f.name}"
        assert any(row in ln and f.label in ln and fmt(f.a_value) in ln and fmt(f.b_value)
                   in ln and f"{f.change_pct:+.1f}%" in ln for ln in lines), (row, text)
    assert "figure:" not in text  # not stacked
    if width == 200:  # room enough: each value with its unit, as in the HTML page
        f = c.regressions[0]
        assert f"{fmt(f.a_value)} {f.unit}" in text


def test_the_wide_layout_is_unchanged_where_it_fits():
    a, b = planted()
    text = render(compare_view(compare_runs(a, b, 5.0)), 200)
    assert "4223 GB/s" in text and "-8.0% > 5%" in text  # memory/copy, 8 % slower
    assert "┃ GPU ┃" in text and "unit" not in text.split("Findings")[0]
