#!/usr/bin/env bash
# Issue 19 on the GPU machine: the evidence (binding vs driver layouts, the guard areas), the
# smallest reproduction, and the sampler under training load, the old code (.old/src, carried)
# beside ours. Writes under $OUT: info.json canary.json runs.txt
set -u
. scripts/device_env.sh
OUT=${OUT:-/tmp/nvml-out}; mkdir -p "$OUT"
log() { echo "== $*" | tee -a "$OUT/runs.txt"; }
nvidia-smi --query-gpu=index,name,driver_version --format=csv | tee -a "$OUT/runs.txt"
python3 scripts/nvml_probe.py info | tee "$OUT/info.json"
run() { # NAME ENV... -- CMD...
  local name=$1; shift
  local start=$(date +%s.%N)
  env "$@" > "$OUT/last.txt" 2>&1; local rc=$?
  log "$name rc=$rc $(python3 -c "import time;print(f'{time.time()-$start:.1f}s')") $(tail -c 300 "$OUT/last.txt" | tr '\n' ' ')"
  grep -m3 -E "Fatal Python|Segmentation|Debug memory block|bad trailing|futex|Current thread" "$OUT/last.txt" >> "$OUT/runs.txt"
}
jobs=()
for g in $(nvidia-smi --query-gpu=index --format=csv,noheader); do
  CUDA_VISIBLE_DEVICES=$g python3 scripts/soak_jobs.py lm 2>>"$OUT/runs.txt" & jobs+=($!)
done
sleep 20
[ -n "${CANARY:-}" ] && { python3 scripts/nvml_probe.py canary > "$OUT/canary.json" 2>>"$OUT/runs.txt"; log "canary rc=$?"; }
if [ -f .old/record_workload_traces.py ]; then
  for i in 1 2; do run "old record_workload_traces.py[$i]" PYTHONPATH=/tmp/site:.old/src PYTHONFAULTHANDLER=1 timeout 60 python3 .old/record_workload_traces.py /tmp/rwt lm-bf16-healthy; done
fi
S="timeout 40 python3 scripts/nvml_probe.py sample --seconds 12 --interval 0.1 --keep-frames"
for i in 1 2 3; do run "old-sampler[$i]" PYTHONPATH=/tmp/site:.old/src PYTHONFAULTHANDLER=1 $S; done
run "old-sampler debug-malloc" PYTHONPATH=/tmp/site:.old/src PYTHONMALLOC=debug PYTHONTRACEMALLOC=8 PYTHONFAULTHANDLER=1 $S
for skip in xid_events gpm_metrics nvmlDeviceGetFieldValues nvmlDeviceGetComputeRunningProcesses,nvmlDeviceGetGraphicsRunningProcesses; do
  for i in 1 2; do run "old-sampler[$i] without $skip" PYTHONPATH=/tmp/site:.old/src PYTHONFAULTHANDLER=1 $S --skip $skip; done
done
for i in 1 2 3; do run "new-sampler[$i]" PYTHONFAULTHANDLER=1 $S; done
run "new-sampler debug-malloc" PYTHONMALLOC=debug PYTHONTRACEMALLOC=8 PYTHONFAULTHANDLER=1 $S
kill -9 "${jobs[@]}" 2>/dev/null; wait 2>/dev/null
rm -f "$OUT/last.txt"
