"""The known-answer workloads (examples/doctor) that show their bottleneck on a CPU, run under
`gpuaudit doctor` as a user would: each gets its planted finding first, the control none.
(The GPU ones run on the GPU machine: `python -m validation run doctor`.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cli_env

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "doctor"
# One intra-op thread: the suite's other workers share these cores, and a job whose thread
# pool waits on a descheduled thread ran every small op ~100× slow (the tiny batch's step 140
# ms against 0.2), which hid its per-op overhead behind the machine's load.
ENV = cli_env(COLUMNS="100", CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")

CPU_CASES = {
    "healthy": (None, 10),
    "slow_loader": ("input-bound", 6),
    "item_every_step": ("host-syncs", 6),
    "tiny_batch": ("batch-too-small", 5),
}


@pytest.mark.parametrize("name", sorted(CPU_CASES))
def test_known_answer_on_cpu(name, tmp_path):
    want, seconds = CPU_CASES[name]
    save, kept = tmp_path / "d.json", tmp_path / "trace.json.gz"
    proc = subprocess.run(
        [sys.executable, "-m", "gpuaudit", "doctor", "--profile-steps", "5", "--interval",
         "250ms", "--json-file", str(save), "--keep-profile", str(kept), "--",
         sys.executable, str(EXAMPLES / f"{name}.py"),
         "--device", "cpu", "--seconds", str(seconds)],
        capture_output=True, text=True, timeout=240, env=ENV, cwd=EXAMPLES)
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout.strip().splitlines()[-1])
    assert job["workload"] == name and job["steps"] >= 3
    doc = json.loads(save.read_text())
    codes = [f["code"] for f in doc["findings"]]
    assert "steps" in doc["sources"], doc["sources"]
    if want is None:
        assert codes == [], codes
    else:
        assert codes[:1] == [want], (codes, proc.stderr[-2000:])
        assert doc["changes"], "a finding without a change"
    # the kept profile, diagnosed again offline, tells the same story from the trace alone
    again = subprocess.run([sys.executable, "-m", "gpuaudit", "doctor", "--profile", str(kept),
                            "--json"], capture_output=True, text=True, timeout=120, env=ENV)
    assert again.returncode == 0, again.stderr
    assert [f["code"] for f in json.loads(again.stdout)["findings"]][:1] == codes[:1]


def test_every_example_is_known():
    names = {p.stem for p in EXAMPLES.glob("*.py") if not p.stem.startswith("_")}
    gpu_only = {"tiny_kernels", "fp32_matmuls", "memory_full", "pageable_copies"}
    assert names == set(CPU_CASES) | gpu_only
