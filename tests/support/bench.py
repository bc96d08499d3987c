"""Suites stood in for, so the bench runner's own logic runs on a CPU in no time."""

from __future__ import annotations

from typing import Any

import pytest

from gpuaudit.bench import runner


def fake_suites(monkeypatch: pytest.MonkeyPatch, fns: dict[str, Any],
                short_suite_s: float = 0.0) -> None:
    """Suites that yield what `fns` give. They take no time: by default every one counts as
    long (as the real ones they stand for), so each gets its look after it."""
    monkeypatch.setattr(runner, "suite", lambda name: fns[name])
    monkeypatch.setattr(runner, "select_devices", lambda machine, gpus: ())
    monkeypatch.setattr(runner, "SHORT_SUITE_S", short_suite_s)
