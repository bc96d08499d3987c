"""What another tenant really takes from a job: the zoo's jobs that share their GPU
(shared_gpu_inference, healthy_bf16_lm) run alone and then beside the zoo's tenant
(tenant_matmuls.py), their own throughput compared. This is the ground truth the doctor's
`shared-gpu` share is checked against.

Usage: python3 validation/doctor/tenant_probe.py OUT [--seconds S]
Writes OUT/tenant_probe.json: per job, work done per second alone and shared, and the loss.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ZOO = Path(__file__).resolve().parents[2] / "examples" / "doctor" / "zoo"
JOBS = {"shared_gpu_inference": "requests", "healthy_bf16_lm": "steps"}


def _rate(job: str, seconds: float) -> float | None:
    """Work a second over the job's own timed loop (it prints `done: N <unit>`)."""
    proc = subprocess.run([sys.executable, str(ZOO / f"{job}.py"), "--max-seconds",
                           str(seconds)], capture_output=True, text=True, timeout=seconds + 120)
    m = re.search(r"done: (\d+)", proc.stdout)
    return int(m.group(1)) / seconds if m and proc.returncode == 0 else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--seconds", type=float, default=10.0)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    result = {}
    for job, unit in JOBS.items():
        alone = _rate(job, a.seconds)
        tenant = subprocess.Popen([sys.executable, str(ZOO / "tenant_matmuls.py"),
                                   str(a.seconds + 60)])
        time.sleep(5)  # the tenant holds its memory and runs before the job starts
        try:
            shared = _rate(job, a.seconds)
        finally:
            tenant.terminate()
            tenant.wait(30)
        loss = 1 - shared / alone if alone and shared else None
        result[job] = {"unit": f"{unit}/s", "alone": alone, "shared": shared, "loss": loss}
        print(f"{job}: {alone} {unit}/s alone, {shared} beside the tenant, loss {loss}",
              flush=True)
    (a.out / "tenant_probe.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
