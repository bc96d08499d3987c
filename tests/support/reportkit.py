"""Shared by the report, compare and web tests: the real H200 runs, planted changes to copies
of them, telemetry replayed into a store, and Debian's Chromium for the browser tests."""

from __future__ import annotations

import os
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from gpuaudit.model import Finding, Measurement, Run, Severity, load_run

FIXTURES = Path(__file__).parents[1] / "fixtures"
RUNS = FIXTURES / "runs"
ONE_GPU = "h200-1gpu-bench-quick"  # a whole quick run on one H200 (p2p, collectives skipped)
TWO_GPU = "h200-2gpu-bench-quick"  # the quick run on two H200s (p2p, collectives, a straggler)
NATIVE = "h200-2gpu-collectives-native"  # collectives 1M:4G with nccl-tests beside ours
CHROMIUM = os.environ.get("GPUAUDIT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def load(name: str) -> Run:
    return load_run((RUNS / f"{name}.json").read_bytes(), origin=name)


def with_figure(run: Run, suite: str, name: str, factor: float, gpu: int | None = 0) -> Run:
    """A copy of `run` whose figure (and its spread) is scaled by `factor`, as a slower or
    faster machine would measure it."""
    found = False
    out = []
    for m in run.measurements:
        if m.suite == suite and m.name == name and m.gpu_index == gpu and m.value is not None:
            found = True
            m = m.model_copy(update={
                "value": m.value * factor,
                "samples": tuple(x * factor for x in m.samples),
                "spread_low": None if m.spread_low is None else m.spread_low * factor,
                "spread_high": None if m.spread_high is None else m.spread_high * factor})
        out.append(m)
    assert found, f"{suite}/{name} on GPU {gpu} is not in run {run.id}"
    return run.model_copy(update={"measurements": tuple(out)})


def figure(run: Run, suite: str, name: str, gpu: int | None = 0) -> Measurement:
    return next(m for m in run.measurements
                if m.suite == suite and m.name == name and m.gpu_index == gpu)


def contended(run: Run) -> Run:
    """The noisy-neighbour case recorded on the H200: another process held 0.9 GiB."""
    busy = Finding(code="memory.in-use", severity=Severity.WARN, gpu_index=0,
                   message="1 process(es) already hold 0.9 GiB: 920 (python3)",
                   advice="Another job shares this GPU: results and speed will suffer.")
    return run.model_copy(update={"findings": (*run.findings, busy)})


def replayed_samples(trace: str, start: datetime) -> list:
    """A real telemetry trace's samples through the real sampler, re-timed to begin at `start`
    (the recordings were made beside, not during, the recorded runs)."""
    import json

    from tests.support.telemetry_traces import replay

    samples = replay(json.loads((FIXTURES / "telemetry" / "real" / f"{trace}.json").read_text()))
    t0 = samples[0].time
    return [s.model_copy(update={"time": start + (s.time - t0) + timedelta(seconds=1)})
            for s in samples]


def chromium_or_skip() -> str:
    """Debian's Chromium and Playwright, or a skip saying what is missing (a failure in CI)."""
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright Python package (pip install playwright)")
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)) \
            and shutil.which("chromium") is None:
        missing.append(f"Chromium at {CHROMIUM} (apt-get install chromium)")
    if missing:
        why = "browser tests need " + " and ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(why + "; .ci/run installs them")
        pytest.skip(why)
    return CHROMIUM if os.path.isfile(CHROMIUM) else shutil.which("chromium")  # type: ignore[return-value]
