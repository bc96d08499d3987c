#!/usr/bin/env bash
# One device call: record fixtures, capture real terminal output, run the gpu tests.
# Usage (on the device machine, repo root): bash scripts/device_inspect.sh NAME
set -u
source "$(dirname "$0")/device_env.sh"
name=$1
mkdir -p "$OUT/$name"
python3 scripts/record_fixture.py "$OUT/$name"
{
  echo "\$ date -u; nvidia-smi -L"; date -u; nvidia-smi -L
  echo; echo "\$ gpuaudit inspect"; python3 -m gpuaudit inspect; echo "exit code $?"
  echo; echo "\$ gpuaudit inspect --all"; python3 -m gpuaudit inspect --all >/dev/null; echo "exit $?"
  echo; echo "\$ gpuaudit run"; python3 -m gpuaudit run --db /tmp/ga.db; echo "exit code $?"
  echo; echo "\$ gpuaudit runs"; python3 -m gpuaudit runs --db /tmp/ga.db
  echo; echo "\$ time gpuaudit inspect --json > /dev/null"; time python3 -m gpuaudit inspect --json >/dev/null
} > "$OUT/$name/terminal.txt" 2>&1
python3 -m gpuaudit inspect --all > "$OUT/$name/terminal_all.txt" 2>&1
{ nvidia-smi -q; echo; nvidia-smi topo -m; echo; nvidia-smi nvlink -s; } > "$OUT/$name/nvidia-smi.txt" 2>&1
python3 -m pytest -q -m gpu tests/test_gpu_live.py -p no:cacheprovider 2>&1 | tee "$OUT/$name/pytest_gpu.txt"
tail -5 "$OUT/$name/terminal.txt"
