"""Record the CPU op-profile fixture of the predict tests: `bench train --op-profile` of
gpt-tiny in fp32 and bf16 on this machine's CPU (a real run, one intra-op thread), with the
machine of the recorded H200 inspect fixture so that the run names an H200.

    PYTHONPATH=src python3 scripts/record_predict_fixture.py \
        tests/fixtures/predict/cpu-gpt-tiny-op-profile.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(out: str) -> int:
    import torch

    from gpuaudit.bench.context import Profile
    from gpuaudit.bench.runner import run_bench
    from gpuaudit.model import Machine

    torch.set_num_threads(1)
    root = Path(__file__).resolve().parents[1]
    machine = Machine.model_validate(json.loads(
        (root / "tests/fixtures/h200-1gpu/inspect.json").read_text())["machine"])
    run = run_bench(["train"], machine=machine, profile=Profile.STANDARD,
                    options={"models": ["gpt-tiny"], "modes": ["fp32", "bf16"], "steps": 5,
                             "parts": ["modes"], "op_profile": True})
    Path(out).write_text(run.model_dump_json(indent=1) + "\n")
    print(f"{out}: {len(run.measurements)} measurements")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
