#!/usr/bin/env bash
# Issue 19: is the crash NVML writing into the field-values array after the call returned
# (into memory Python has freed and handed out again)? The old code, its arrays kept alive.
set -u
. scripts/device_env.sh
OUT=${OUT:-/tmp/nvml-out}; mkdir -p "$OUT"
jobs=()
for g in $(nvidia-smi --query-gpu=index --format=csv,noheader); do
  CUDA_VISIBLE_DEVICES=$g python3 scripts/soak_jobs.py lm 2>/dev/null & jobs+=($!)
done
sleep 20
S="timeout 40 python3 scripts/nvml_probe.py sample --seconds 6 --interval 0.1"
for i in 1 2 3; do echo "old, arrays kept [$i]: $(PYTHONPATH=/tmp/site:.old/src PYTHONFAULTHANDLER=1 $S --keep-arrays 2>&1 | tail -c 400)" | tee -a "$OUT/late.txt"; done
for i in 1 2; do echo "old, control [$i]: $(PYTHONPATH=/tmp/site:.old/src PYTHONFAULTHANDLER=1 $S 2>&1 | tail -c 200)" | tee -a "$OUT/late.txt"; done
for i in 1 2; do echo "new [$i]: $(PYTHONFAULTHANDLER=1 $S 2>&1 | tail -c 300)" | tee -a "$OUT/late.txt"; done
kill -9 "${jobs[@]}" 2>/dev/null; wait 2>/dev/null
