#!/usr/bin/env bash
# Issue 19: which field-values query crashes, in fresh processes under training load.
set -u
. scripts/device_env.sh
OUT=${OUT:-/tmp/nvml-out}; mkdir -p "$OUT"
jobs=()
for g in $(nvidia-smi --query-gpu=index --format=csv,noheader); do
  CUDA_VISIBLE_DEVICES=$g python3 scripts/soak_jobs.py lm 2>/dev/null & jobs+=($!)
done
sleep 20
for load in on off; do
  if [ $load = off ]; then kill -9 "${jobs[@]}" 2>/dev/null; wait 2>/dev/null; sleep 3; fi
  for case in temp nvlink nvlink-after-state nvlink-after-1s nvlink-guarded nvlink-per-link; do
    crashed=0; first=""
    for i in 1 2 3 4 5 6; do
      PYTHONFAULTHANDLER=1 timeout 30 python3 scripts/nvml_probe.py fields --case $case --iterations 20 > "$OUT/last.txt" 2>&1
      rc=$?; [ $rc -ne 0 ] && { crashed=$((crashed+1)); [ -z "$first" ] && first=$(grep -m1 -A4 "Fatal Python" "$OUT/last.txt" | tr '\n' ' ' | cut -c1-300); }
    done
    echo "load=$load case=$case crashed=$crashed/6 $first" | tee -a "$OUT/fields.txt"
  done
done
rm -f "$OUT/last.txt"
