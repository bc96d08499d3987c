"""Record real telemetry traces on a GPU machine: idle, a matmul load, a memory-bound load and
host→device transfers, each `--seconds` long at `--interval` (default 1 s), one trace each.

Run on the GPU machine (torch needed for the loads):
    python validation/monitor/record_telemetry.py OUT_DIR [--seconds 15] [--interval 1]
The traces replay through `gpuaudit monitor --replay OUT_DIR/<scenario>.json`; copies go to
tests/fixtures/telemetry/ beside the ones built from the inspect recordings.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from gpuaudit.hw import LiveNvml
from gpuaudit.hw.telemetry import Sampler
from gpuaudit.hw.telemetry_trace import TraceRecorder
from gpuaudit.hw.torch_env import apply_safe_env
from gpuaudit.model import utc_now

# Each load runs in a child process on GPU 0 until killed; "idle" runs none.
LOADS = {
    "idle": None,
    "matmul": "a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)\n"
              "while True:\n    a @ a\n",
    "memory": "a = torch.empty(4 << 30, device='cuda', dtype=torch.uint8)\n"
              "b = torch.empty_like(a)\nwhile True:\n    b.copy_(a)\n",
    "transfer": "h = torch.empty(1 << 30, dtype=torch.uint8).pin_memory()\n"
                "d = torch.empty(1 << 30, device='cuda', dtype=torch.uint8)\n"
                "while True:\n    d.copy_(h, non_blocking=True); torch.cuda.synchronize()\n",
}


def record(name: str, seconds: float, interval: float, out: Path) -> Path:
    load = None
    if LOADS[name]:
        load = subprocess.Popen([sys.executable, "-c", "import torch\n" + LOADS[name]],
                                env=apply_safe_env(dict(os.environ)))
        time.sleep(3)  # past CUDA start-up, into the steady state
    live = LiveNvml()
    rec = TraceRecorder(live)
    try:
        sampler = Sampler(rec, hostname=socket.gethostname(), interval_s=interval)
        rec.end_setup()
        started = time.monotonic()
        for tick in range(int(seconds / interval)):
            now = utc_now()
            sampler.sample(now)
            rec.end_frame(now)
            time.sleep(max(0.0, started + (tick + 1) * interval - time.monotonic()))
    finally:
        live.close()
        if load:
            load.kill()
            load.wait()
    path = out / f"{name}.json"
    trace = rec.trace(hostname=socket.gethostname(), recorded_at=utc_now().isoformat(),
                      interval_s=interval, scenario=name)
    path.write_text(json.dumps(trace, indent=1, sort_keys=True) + "\n")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--scenarios", default=",".join(LOADS))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.scenarios.split(","):
        print(record(name, args.seconds, args.interval, out))


if __name__ == "__main__":
    main()
