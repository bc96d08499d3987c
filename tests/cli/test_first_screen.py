"""`gpuaudit run` prints one screen: at 80×40 the machine, the verdict, the figures that
matter against the datasheet, every finding with its advice (or a count of the rest), and
where the details are; nothing cut, wider terminals too. Real runs: the quick profile on one
H200 (with the train and infer figures), on two, and on a CPU."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from rich.console import Console

from gpuaudit.model import Finding, RunStatus, Severity
from gpuaudit.report.summary import run_summary
from tests.conftest import cli_env
from tests.support.reportkit import TWO_GPU, load

H200_RUN = "h200-1gpu-run-quick"  # `gpuaudit run` on one H200, 59.1 s, all suites
CPU = "cpu-bench-quick-a"


def screen(run, width: int = 80, **kw) -> list[str]:
    console = Console(width=width, color_system=None, legacy_windows=False)
    with console.capture() as cap:
        console.print(run_summary(run, run_id="5d0c3f0e9a1b", width=width, **kw))
    return [line.rstrip() for line in cap.get().splitlines()]


@pytest.mark.parametrize("name", [H200_RUN, TWO_GPU, CPU])
@pytest.mark.parametrize("width", [80, 120, 200])
def test_one_screen_nothing_cut(name, width):
    lines = screen(load(name), width)
    assert len(lines) <= 40 and max(map(len, lines)) <= width, "\n".join(lines)
    text = "\n".join(lines)
    assert "…" not in text  # rich marks what it cuts with an ellipsis
    assert "verdict:" in text
    # where the details are, each command whole on its line
    for cmd in ("gpuaudit show 5d0c3f0e9a1b", "gpuaudit report 5d0c3f0e9a1b --html",
                "gpuaudit serve"):
        assert any(line.startswith(cmd) for line in lines), cmd


def test_the_figures_that_matter_one_line_each_against_the_datasheet():
    lines = screen(load(H200_RUN))
    text = "\n".join(lines)
    assert "1 × NVIDIA H200" in text and "driver 580.159.04" in text
    expect = {"matmul bf16, burst": "800.6 TFLOP/s · 81 % of 989.5",
              "matmul bf16, sustained": "727.6 TFLOP/s · 74 % of 989.5",
              "memory copy": "4,226 GB/s", "host→GPU / GPU→host": "54.8 / 54.7 GB/s pinned",
              "train gpt-124m bf16": "324,425 tokens/s · MFU 28 %",
              "infer resnet50 bf16": "2.54 ms p50 at batch 32"}
    for label, figure in expect.items():
        row = next(line for line in lines if line.startswith(label))
        assert figure in row, row
    # the findings with their advice: nvlink's INFO and its advice on the same entry
    flat = " ".join(text.split())
    nvlink = flat.index("nvlink.unused-single-gpu")
    assert flat.index("→ For multi-GPU work rent a multi-GPU node", nvlink) > nvlink


def test_several_gpus_show_the_median_and_the_worst_gpu():
    text = "\n".join(screen(load(TWO_GPU)))
    assert "median of 2 GPUs" in text
    assert re.search(r"GPU→GPU\s+390\.9 GB/s one way · 87 % of 450", text)
    assert "(nccl, 2 GPUs)" in text


def test_a_cpu_run_says_what_its_figures_mean():
    text = " ".join(" ".join(screen(load(CPU))).split())
    assert "not comparable with a GPU's" in text
    assert "collectives on gloo with 2 CPU ranks" in text
    assert "matmul on the CPU" in text


def test_many_findings_still_fit_and_the_rest_are_counted():
    run = load(TWO_GPU)
    planted = tuple(Finding(code=f"planted.{k}", severity=Severity.WARN, gpu_index=k % 8,
                            message="a long message " * 8, advice="do this and that " * 4)
                    for k in range(12))
    run = run.model_copy(update={"findings": run.findings + planted,
                                 "status": RunStatus.PARTIAL})
    lines = screen(run)
    text = "\n".join(lines)
    assert len(lines) <= 40, text
    assert re.search(r"and \d+ more finding\(s\) \(up to WARN\) in the full tables", text)
    assert "[partial]" in text


def test_run_prints_the_screen_and_verbose_every_table(tmp_path):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    env = cli_env(COLUMNS="80", LINES="40")
    short = subprocess.run([sys.executable, "-m", "gpuaudit", "run", "--no-bench", "--db", db],
                           capture_output=True, text=True, env=env, timeout=300)
    assert short.returncode in (0, 1), short.stderr
    lines = short.stdout.rstrip().splitlines()
    assert len(lines) <= 40 and max(map(len, lines)) <= 80, short.stdout
    saved = re.search(r"saved as run (\w+)", short.stdout)
    assert saved and f"gpuaudit show {saved[1]}" in short.stdout
    full = subprocess.run([sys.executable, "-m", "gpuaudit", "show", saved[1], "--db", db],
                          capture_output=True, text=True, env=env, timeout=300)
    verbose = subprocess.run([sys.executable, "-m", "gpuaudit", "run", "--no-bench",
                              "--verbose", "--no-save"], capture_output=True, text=True,
                             env=env, timeout=300)
    for out in (full.stdout, verbose.stdout):
        assert "Findings" in out and "verdict:" in out  # the tables
