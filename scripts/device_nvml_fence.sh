#!/usr/bin/env bash
# Issue 19: the field-values request against a no-access page (electric fence): does NVML
# touch memory past the caller's array, and how far (readable room --pad before the fence)?
set -u
. scripts/device_env.sh
OUT=${OUT:-/tmp/nvml-out}; mkdir -p "$OUT"
for case in fence-after fence-before; do for pad in 0 8 40 400 1480 4096; do
  [ $case = fence-before ] && [ $pad != 0 ] && continue
  ok=0; for i in 1 2 3; do
    PYTHONFAULTHANDLER=1 timeout 30 python3 scripts/nvml_probe.py fields --case $case --pad $pad --iterations 20 >/dev/null 2>&1 && ok=$((ok+1))
  done
  echo "$case pad=$pad survived=$ok/3" | tee -a "$OUT/fence.txt"
done; done
