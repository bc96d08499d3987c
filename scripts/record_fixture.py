"""Record a real-hardware fixture: the raw NVML trace and the inspect document, together.

Run on a GPU machine:  python scripts/record_fixture.py tests/fixtures/<name>
Tests replay the trace through gpuaudit.hw and must get the machine in inspect.json back.
Both files come from one pass over NVML, so they describe the same moment.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gpuaudit.hw import LiveNvml, RecordingNvml, snapshot_from
from gpuaudit.inspect import inspect_machine


def main(out_dir: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    live = LiveNvml()
    rec = RecordingNvml(live)
    try:
        machine = snapshot_from(rec)
    finally:
        live.close()
    run = inspect_machine(machine, source="live")
    trace = rec.trace(recorded_at=machine.captured_at.isoformat(), hostname=machine.host.hostname)
    (out / "nvml_trace.json").write_text(json.dumps(trace, indent=1, sort_keys=True) + "\n")
    (out / "inspect.json").write_text(run.model_dump_json(indent=2) + "\n")
    print(f"recorded {len(rec.calls)} NVML calls, {len(machine.gpus)} GPUs → {out}")


if __name__ == "__main__":
    main(sys.argv[1])
