"""Terminal views: text from tools and users is shown as written, never read as markup."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from gpuaudit.bench.stats import measure, skipped
from gpuaudit.errors import BadInputError
from gpuaudit.model import Finding, Severity
from gpuaudit.parse import human_bytes, size_bytes
from gpuaudit.report.format import ranges
from gpuaudit.report.terminal import findings_table, measurements_table


def render(renderable) -> str:
    console = Console(width=200, file=io.StringIO())
    console.print(renderable)
    return console.file.getvalue()


def test_reasons_and_messages_with_brackets_survive():
    text = render(measurements_table([skipped(
        "matmul", "bf16", "TFLOP/s", "torch is not installed (pip install 'gpuaudit[torch]')")]))
    assert "gpuaudit[torch]" in text
    text = render(findings_table([Finding(code="x", severity=Severity.WARN,
                                          message="dmesg said [bold]oops[/]", advice="[red]")]))
    assert "[bold]oops[/]" in text and "[red]" in text


def test_wrong_results_are_marked_and_per_size_rows_wait_for_all():
    wrong = measure("matmul", "bf16", "TFLOP/s", [1.0] * 5, warmup=0, verified=False)
    per_size = measure("collectives", "all_reduce_busbw", "GB/s", [9.0] * 5, warmup=0,
                       params={"size_bytes": 1 << 20})
    text = render(measurements_table([wrong, per_size]))
    assert "WRONG RESULT" in text and "all_reduce_busbw" not in text
    assert "all_reduce_busbw" in render(measurements_table([per_size], show_all=True))


def test_formats():
    assert ranges([0, 1, 2, 3, 8, 9, 11]) == "0-3,8-9,11"
    assert human_bytes(8) == "8 B" and human_bytes(3 << 30) == "3 GiB"
    assert human_bytes(1000 << 20) == "1000 MiB" and human_bytes(1536 << 20) == "1.5 GiB"
    assert size_bytes("1M", "-s") == 1 << 20 and size_bytes("2GiB", "-s") == 2 << 30
    assert size_bytes("64", "-s") == 64
    for bad in ("", "0", "-1K", "lots", "1.5"):
        with pytest.raises(BadInputError):
            size_bytes(bad, "-s")
