#!/usr/bin/env bash
# Issue 19: bisect the sampler's crash under training load, fresh process per run.
set -u
. scripts/device_env.sh
OUT=${OUT:-/tmp/nvml-out}; mkdir -p "$OUT"
jobs=()
for g in $(nvidia-smi --query-gpu=index --format=csv,noheader); do
  CUDA_VISIBLE_DEVICES=$g python3 scripts/soak_jobs.py lm 2>/dev/null & jobs+=($!)
done
sleep 20
S="python3 scripts/nvml_probe.py sample --seconds 3 --interval 0.1"
trial() { # NAME N CMD...
  local name=$1 n=$2; shift 2; local crashed=0 first=""
  for i in $(seq $n); do
    PYTHONFAULTHANDLER=1 timeout 30 "$@" > "$OUT/last.txt" 2>&1 || {
      crashed=$((crashed+1)); [ -z "$first" ] && { first=1; echo "=== $name rc" >> "$OUT/crashes.txt"; cat "$OUT/last.txt" >> "$OUT/crashes.txt"; }; }
  done
  echo "$name crashed=$crashed/$n" | tee -a "$OUT/bisect.txt"
}
trial full 4 $S
trial fields-temp 4 $S --fields temp
trial fields-nvlink 4 $S --fields nvlink
trial fields-guarded 4 $S --fields guarded
trial only-fields 4 $S --only nvmlDeviceGetFieldValues
trial only-fields-nvlink 4 $S --only nvmlDeviceGetFieldValues --fields nvlink
trial isolated-mixed 4 python3 scripts/nvml_probe.py fields --case mixed --iterations 30
trial full-no-keep-frames-1s 3 python3 scripts/nvml_probe.py sample --seconds 4 --interval 1
ls $OUT
rm -f "$OUT/last.txt"
