"""A device script's phases, each a child process of the script itself
(`SCRIPT --phase NAME SPEC_JSON OUTFILE`), used by the predict and workloads entries: the
lent machine's safe environment (NVLink multicast off) in every child, our sources first on
its path, its output into NAME.err, and a phase past its limit stopped the way a user stops
a run (Ctrl-C: what it measured is kept, marked partial), then killed if it does not end."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src"


def gpu_count() -> int:
    """The GPUs nvidia-smi lists (0 without it)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


class Phase:
    """`script --phase name spec out` started now in its own process session."""

    def __init__(self, script: Path, name: str, spec: tuple, gpus: str | None,
                 tmp: Path) -> None:
        from gpuaudit.hw.torch_env import apply_safe_env

        self.name, self.out = name, tmp / f"{name}.json"
        self.err = open(tmp / f"{name}.err", "w")  # noqa: SIM115 (closed in wait)
        env = dict(os.environ)
        apply_safe_env(env)  # NCCL_NVLS_ENABLE=0 and the rest, in every child
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
        if gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpus
        self.t0 = time.time()
        self.proc = subprocess.Popen(
            [sys.executable, str(script.resolve()), "--phase", name, json.dumps(spec),
             str(self.out)], env=env, stdout=self.err, stderr=subprocess.STDOUT,
            start_new_session=True)

    def wait(self, limit: float) -> dict[str, Any]:
        """Its exit status and wall time, once it ended or was stopped at `limit` s."""
        try:
            rc = self.proc.wait(timeout=max(1.0, limit - (time.time() - self.t0)))
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGINT)  # Ctrl-C: the run is kept, partial
            try:
                rc = self.proc.wait(timeout=25)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                rc = self.proc.wait()
        self.err.close()
        return {"rc": rc, "wall_s": round(time.time() - self.t0, 1)}

    def run_doc(self) -> dict[str, Any] | None:
        """The Run the phase wrote; if it was killed hard, the measurements it streamed to
        OUTFILE + "l" (JSON lines), marked partial; None if neither exists."""
        if self.out.exists():
            return json.loads(self.out.read_text())
        lines = Path(str(self.out) + "l")
        if lines.exists():
            return {"status": "partial", "measurements": [
                json.loads(x) for x in lines.read_text().splitlines() if x.strip()]}
        return None
