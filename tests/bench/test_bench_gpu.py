"""On a real GPU: each suite measures, checks its results, and lands in a sane range.

The ranges are loose on purpose (a third of the datasheet and up): they catch a broken
method (timing the wrong stream, counting bytes once, a cached working set), not a slow GPU.
Figures themselves go to docs/benchmarks.md from `python -m validation run bench-fidelity`."""

from __future__ import annotations

import pytest

from gpuaudit.bench.context import Profile
from gpuaudit.bench.runner import run_bench

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def quick_run():
    return run_bench(["matmul", "memory", "collectives"], profile=Profile.QUICK)


def _by(run, suite):
    return [m for m in run.measurements if m.suite == suite]


def test_matmul_is_checked_and_within_sane_range_of_spec(quick_run):
    ms = [m for m in _by(quick_run, "matmul") if m.value is not None]
    assert ms, [m.skipped_reason for m in _by(quick_run, "matmul")]
    for m in ms:
        assert m.verified is True, (m.name, m.params)
        if m.spec_value:
            # Above the datasheet means a timing bug; far below means a broken method.
            assert 0.3 * m.spec_value < m.value < 1.02 * m.spec_value, (m.name, m.value)
    names = {m.name for m in ms}
    assert {"bf16", "bf16_burst", "fp32"} <= names


def test_memory_bandwidth_counts_read_plus_write_and_beats_no_cache(quick_run):
    for m in _by(quick_run, "memory"):
        assert m.value is not None and m.verified is True
        if m.spec_value:
            # An L2-sized working set would read far above the HBM figure.
            assert 0.4 * m.spec_value < m.value < 1.02 * m.spec_value, (m.name, m.value)


def test_collectives_verify_or_say_why_not(quick_run):
    ms = _by(quick_run, "collectives")
    assert ms
    measured = [m for m in ms if m.value is not None]
    if not measured:  # one GPU: every op says it needs two
        assert all("2 or more GPUs" in (m.skipped_reason or "") for m in ms)
        return
    assert all(m.verified is True for m in measured)
    peaks = [m for m in measured if m.name.endswith("_peak")]
    assert len(peaks) == 5


def test_collective_batches_ran_without_the_host_in_them(quick_run):
    sized = [m for m in _by(quick_run, "collectives")
             if m.value is not None and not m.name.endswith("_peak")]
    for m in sized:  # every batch was queued whole before the GPU reached it
        assert m.params["batches_prequeued"] == m.params["batches"], (m.name, m.params)


def test_nothing_else_on_the_gpus_means_no_contended_figure(quick_run):
    assert not [m.name for m in quick_run.measurements if m.contended]
    assert "bench.contended" not in {f.code for f in quick_run.findings}
