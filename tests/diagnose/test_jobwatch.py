"""The Python API: `with gpuaudit.watch()`, `gpuaudit.step()`, `gpuaudit.loader()`, the
Lightning callback; and what marking a step costs."""

from __future__ import annotations

import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from tests.conftest import cli_env

ROOT = Path(__file__).resolve().parents[2]
ENV = cli_env(CUDA_VISIBLE_DEVICES="")


def py(code: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=180, env={**ENV, **(env or {})})


def test_watch_in_process_diagnoses_a_slow_loader():
    code = """
import time, gpuaudit
def batches():
    while True:
        time.sleep(0.03)   # the loader
        yield 1
with gpuaudit.watch(interval_s=0.1) as w:
    for i, b in enumerate(gpuaudit.loader(batches())):
        time.sleep(0.005)  # the step's work
        gpuaudit.step()
        if i == 40: break
d = w.diagnosis
print(d.findings[0].code, d.findings[0].confidence, d.sources['steps'])
"""
    proc = py(code)
    assert proc.returncode == 0, proc.stderr
    code_, confidence, *_ = proc.stdout.split()
    assert (code_, confidence) == ("input-bound", "high")
    assert "Input pipeline bound" in proc.stderr  # the report, on stderr
    assert "num_workers=" in proc.stderr


def test_watch_report_can_be_turned_off_and_markers_cost_nothing_outside():
    # The thread's own CPU time, the best of 5 rounds: what a marker costs the job, not what
    # other processes on a loaded 2-core machine took from it meanwhile.
    code = """
import time, gpuaudit
def cost(n):
    best = float("inf")
    for _ in range(5):
        t = time.thread_time()
        for _ in range(n): gpuaudit.step()
        best = min(best, (time.thread_time() - t) / n)
    return best
off = cost(20000)
with gpuaudit.watch(report=False) as w:
    on = cost(4000)
print(off * 1e6, on * 1e6, w.diagnosis.sources['steps'])
"""
    proc = py(code)
    assert proc.returncode == 0, proc.stderr
    off_us, on_us, *rest = proc.stdout.split()
    # Under 1 % of a 2 ms step.
    assert float(off_us) < 5 and float(on_us) < 20, proc.stdout
    assert " ".join(rest) == "gpuaudit.step() markers, 19998 steps"  # the first one is warm-up
    assert proc.stderr == ""


def test_under_the_doctor_steps_go_to_its_directory(tmp_path):
    code = "import gpuaudit, time\nfor _ in range(30):\n    time.sleep(0.002); gpuaudit.step()\n"
    proc = py(code, {"GPUAUDIT_DOCTOR_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    from gpuaudit.diagnose.channel import read_channel

    ch = read_channel(tmp_path)
    steps = ch.main_steps()
    assert steps.source == "markers" and len(steps.end_s) == 30
    assert set(steps.wait_s) == {None}  # no loader() around the batches: not measured
    assert list(steps.end_s) == sorted(set(steps.end_s))


class _FakeCallback:  # what lightning.pytorch.Callback is to the subclass
    pass


def test_lightning_callback_marks_steps_and_batch_waits(monkeypatch):
    pl = types.ModuleType("lightning.pytorch")
    pl.Callback = _FakeCallback
    monkeypatch.setitem(sys.modules, "lightning", types.ModuleType("lightning"))
    monkeypatch.setitem(sys.modules, "lightning.pytorch", pl)
    import gpuaudit.jobwatch as jw

    monkeypatch.setattr(jw, "_state", None)
    cb = jw.lightning_callback(report=False)
    assert isinstance(cb, _FakeCallback)
    cb.on_fit_start(None, None)
    for i in range(12):
        cb.on_train_batch_start(None, None, None, i)
        time.sleep(0.004)  # the step
        cb.on_train_batch_end(None, None, None, None, i)
        time.sleep(0.02)  # the loader, between batches
    cb.on_fit_end(None, None)
    d = cb.diagnosis
    assert d.findings and d.findings[0].code == "input-bound"
    ev = {o.name: o.value for o in d.findings[0].evidence}
    assert 0.015 < ev["data_wait_per_step"] < 0.2


def test_lightning_missing_is_a_one_line_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)
    monkeypatch.setitem(sys.modules, "pytorch_lightning", None)
    import gpuaudit
    from gpuaudit.errors import BadInputError

    with pytest.raises(BadInputError, match="needs PyTorch Lightning"):
        gpuaudit.lightning_callback()
