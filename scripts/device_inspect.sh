#!/usr/bin/env bash
# One device call: record fixtures, capture real terminal output, run the gpu tests.
# Usage (on the device machine, repo root): bash scripts/device_inspect.sh NAME
#   NAME: h200-1gpu or h200-2gpu (the fixture it re-records), at most 6 files in $OUT/NAME.
# Then here: cp $OUT/NAME/{nvml_trace.json,inspect.json,nvidia-smi.txt} tests/fixtures/NAME/
#            python -m tests.faults   # the planted faults follow the new recording
# Without a GPU (no nvidia-smi) it runs dry: the same commands on the committed fixture.
set -u
source "$(dirname "$0")/device_env.sh"
name=$1
OUT=${OUT:-/tmp/device-out}
mkdir -p "$OUT/$name"
if ! command -v nvidia-smi >/dev/null; then
  echo "dry run: no nvidia-smi here; inspecting the committed tests/fixtures/$name"
  snap="tests/fixtures/$name/inspect.json"
  python3 -m gpuaudit inspect --from "$snap" --all > "$OUT/$name/terminal.txt" 2>&1
  echo "exit code $?" >> "$OUT/$name/terminal.txt"
  tail -5 "$OUT/$name/terminal.txt"
  exit 0
fi
python3 scripts/record_fixture.py "$OUT/$name"
gpus=$(nvidia-smi -L | grep -c '^GPU ')
{
  echo "\$ date -u; nvidia-smi -L"; date -u; nvidia-smi -L
  echo; echo "\$ gpuaudit inspect --expect-gpus $gpus"
  python3 -m gpuaudit inspect --expect-gpus "$gpus"; echo "exit code $?"
  echo; echo "\$ gpuaudit inspect --all"; python3 -m gpuaudit inspect --all >/dev/null; echo "exit $?"
  echo; echo "\$ gpuaudit run"; python3 -m gpuaudit run --db /tmp/ga.db; echo "exit code $?"
  echo; echo "\$ gpuaudit runs"; python3 -m gpuaudit runs --db /tmp/ga.db
  echo; echo "\$ time gpuaudit inspect --json > /dev/null"; time python3 -m gpuaudit inspect --json >/dev/null
  # Is the kernel log readable here (XIDs per GPU), and can the monitor follow it?
  echo; echo "\$ dmesg | grep -c 'NVRM: Xid'"; dmesg 2>&1 | grep -c 'NVRM: Xid'
  echo; echo "\$ test -r /dev/kmsg"; test -r /dev/kmsg && echo readable || echo "not readable"
  echo; echo "\$ gpuaudit monitor --once --json | xid fields"
  python3 -m gpuaudit monitor --once --json 2>&1 | grep -i xid | head -5
} > "$OUT/$name/terminal.txt" 2>&1
python3 -m gpuaudit inspect --all > "$OUT/$name/terminal_all.txt" 2>&1
{ nvidia-smi -q; echo; nvidia-smi topo -m; echo; nvidia-smi nvlink -s
  echo; nvidia-smi --query-gpu=index,persistence_mode,clocks.max.graphics,clocks.applications.graphics,clocks.default_applications.graphics,clocks.applications.memory,clocks.default_applications.memory --format=csv
} > "$OUT/$name/nvidia-smi.txt" 2>&1
python3 -m pytest -q -m gpu tests/test_gpu_live.py -p no:cacheprovider 2>&1 | tee "$OUT/$name/pytest_gpu.txt"
tail -5 "$OUT/$name/terminal.txt"
