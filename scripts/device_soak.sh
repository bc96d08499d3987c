#!/usr/bin/env bash
# Issue 19 on the two-GPU machine: the guarded field-values query under training load (does
# NVML write past the caller's array? how often?), then the monitor's soak (scripts/soak_monitor.py).
# Writes under $OUT: guard.txt soak.json soak-monitor.log soak-jobs.log soak.txt
set -u
. scripts/device_env.sh
OUT=${OUT:-/tmp/soak-out}; mkdir -p "$OUT"
jobs=()
for g in $(nvidia-smi --query-gpu=index --format=csv,noheader); do
  CUDA_VISIBLE_DEVICES=$g python3 scripts/soak_jobs.py lm 2>/dev/null & jobs+=($!)
done
sleep 20
for i in 1 2 3; do
  PYTHONFAULTHANDLER=1 timeout 30 python3 scripts/nvml_probe.py sample --seconds 6 --interval 0.1 >> "$OUT/guard.txt" 2>&1
  echo "rc=$?" >> "$OUT/guard.txt"
done
kill -9 "${jobs[@]}" 2>/dev/null; wait 2>/dev/null
cat "$OUT/guard.txt"
python3 scripts/soak_monitor.py "$OUT" --seconds ${SOAK_SECONDS:-490} --interval 100ms > "$OUT/soak.txt" 2>&1
tail -c 4000 "$OUT/soak.txt"
