#!/usr/bin/env bash
# Issue 19 on the two-GPU machine, one step per call: bash scripts/device_nvml.sh STEP
#   repro   the old code (.old/src, carried) beside ours under training load; CANARY=1 adds the
#           guard-area canaries of every caller-memory NVML call (runs.txt, info.json, canary.json)
#   fields  the field-values query alone, fresh processes, by field set, load on and off
#   bisect  the sampler with one query or field set taken away at a time (bisect.txt, crashes.txt)
#   late    the old code with every field-values array kept alive (late.txt)
#   fence   the request against a no-access page, with 0..4096 readable bytes before it (fence.txt)
#   soak    the guarded query under load, then scripts/soak_monitor.py (SOAK_SECONDS, default 490)
# docs/monitor-safety.md holds what these found.
set -u
. scripts/device_env.sh
OUT=${OUT:-/tmp/nvml-out}; mkdir -p "$OUT"
step=${1:?usage: device_nvml.sh repro|fields|bisect|late|fence|soak}
OLD="PYTHONPATH=/tmp/site:.old/src"
S="python3 scripts/nvml_probe.py sample --interval 0.1"

jobs=()
start_load() {  # a GPT ~124M training job on every GPU, then 20 s to reach its steady state
  for g in $(nvidia-smi --query-gpu=index --format=csv,noheader); do
    CUDA_VISIBLE_DEVICES=$g python3 scripts/soak_jobs.py lm 2>/dev/null & jobs+=($!)
  done
  sleep 20
}
stop_load() { kill -9 "${jobs[@]}" 2>/dev/null; wait 2>/dev/null; jobs=(); }
trap stop_load EXIT

log() { echo "== $*" | tee -a "$OUT/runs.txt"; }
run() {  # NAME ENV... CMD...: one run, its exit code, time and the crash lines it printed
  local name=$1; shift
  local start; start=$(date +%s.%N)
  env "$@" > "$OUT/last.txt" 2>&1; local rc=$?
  log "$name rc=$rc $(python3 -c "import time;print(f'{time.time()-$start:.1f}s')") $(tail -c 300 "$OUT/last.txt" | tr '\n' ' ')"
  grep -m3 -E "Fatal Python|Segmentation|Debug memory block|bad trailing|futex|Current thread" "$OUT/last.txt" >> "$OUT/runs.txt"
}
trial() {  # FILE NAME N ENV... CMD...: how many of N fresh processes crashed
  local file=$1 name=$2 n=$3; shift 3; local crashed=0 first=""
  for _ in $(seq "$n"); do
    env PYTHONFAULTHANDLER=1 "$@" > "$OUT/last.txt" 2>&1 || {
      crashed=$((crashed+1))
      [ -z "$first" ] && { first=1; echo "=== $name" >> "$OUT/crashes.txt"; cat "$OUT/last.txt" >> "$OUT/crashes.txt"; }; }
  done
  echo "$name crashed=$crashed/$n" | tee -a "$OUT/$file"
}

case $step in
repro)
  nvidia-smi --query-gpu=index,name,driver_version --format=csv | tee -a "$OUT/runs.txt"
  python3 scripts/nvml_probe.py info | tee "$OUT/info.json"
  start_load
  [ -n "${CANARY:-}" ] && { python3 scripts/nvml_probe.py canary > "$OUT/canary.json" 2>>"$OUT/runs.txt"; log "canary rc=$?"; }
  if [ -f .old/record_workload_traces.py ]; then
    for i in 1 2; do run "old record_workload_traces.py[$i]" $OLD PYTHONFAULTHANDLER=1 timeout 60 python3 .old/record_workload_traces.py /tmp/rwt lm-bf16-healthy; done
  fi
  R="timeout 40 $S --seconds 12 --keep-frames"
  for i in 1 2 3; do run "old-sampler[$i]" $OLD PYTHONFAULTHANDLER=1 $R; done
  run "old-sampler debug-malloc" $OLD PYTHONMALLOC=debug PYTHONTRACEMALLOC=8 PYTHONFAULTHANDLER=1 $R
  for skip in xid_events gpm_metrics nvmlDeviceGetFieldValues nvmlDeviceGetComputeRunningProcesses,nvmlDeviceGetGraphicsRunningProcesses; do
    for i in 1 2; do run "old-sampler[$i] without $skip" $OLD PYTHONFAULTHANDLER=1 $R --skip $skip; done
  done
  for i in 1 2 3; do run "new-sampler[$i]" PYTHONFAULTHANDLER=1 $R; done
  run "new-sampler debug-malloc" PYTHONMALLOC=debug PYTHONTRACEMALLOC=8 PYTHONFAULTHANDLER=1 $R ;;
fields)
  start_load
  for load in on off; do
    [ $load = off ] && { stop_load; sleep 3; }
    for c in temp nvlink nvlink-after-state nvlink-after-1s nvlink-guarded nvlink-per-link; do
      trial fields.txt "load=$load case=$c" 6 timeout 30 python3 scripts/nvml_probe.py fields --case $c --iterations 20
    done
  done ;;
bisect)
  start_load
  B="timeout 30 $S --seconds 3"
  trial bisect.txt full 4 $B
  trial bisect.txt fields-temp 4 $B --fields temp
  trial bisect.txt fields-nvlink 4 $B --fields nvlink
  trial bisect.txt fields-guarded 4 $B --fields guarded
  trial bisect.txt only-fields 4 $B --only nvmlDeviceGetFieldValues
  trial bisect.txt only-fields-nvlink 4 $B --only nvmlDeviceGetFieldValues --fields nvlink
  trial bisect.txt isolated-mixed 4 timeout 30 python3 scripts/nvml_probe.py fields --case mixed --iterations 30
  trial bisect.txt full-1s 3 timeout 30 python3 scripts/nvml_probe.py sample --seconds 4 --interval 1 ;;
late)
  start_load
  L="timeout 40 $S --seconds 6"
  trial late.txt "old, arrays kept" 3 $OLD $L --keep-arrays
  trial late.txt "old, control" 2 $OLD $L
  trial late.txt new 2 $L ;;
fence)
  for c in fence-after fence-before; do for pad in 0 8 40 400 1480 4096; do
    [ $c = fence-before ] && [ $pad != 0 ] && continue
    trial fence.txt "$c pad=$pad" 3 timeout 30 python3 scripts/nvml_probe.py fields --case $c --pad $pad --iterations 20
  done; done ;;
soak)
  start_load
  for i in 1 2 3; do
    env PYTHONFAULTHANDLER=1 timeout 30 $S --seconds 6 >> "$OUT/guard.txt" 2>&1
    echo "rc=$?" >> "$OUT/guard.txt"
  done
  stop_load
  cat "$OUT/guard.txt"
  python3 scripts/soak_monitor.py "$OUT" --seconds "${SOAK_SECONDS:-490}" --interval 100ms > "$OUT/soak.txt" 2>&1
  tail -c 4000 "$OUT/soak.txt" ;;
*) echo "device_nvml.sh: unknown step $step" >&2; exit 2 ;;
esac
rm -f "$OUT/last.txt"
