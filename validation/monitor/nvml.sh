#!/usr/bin/env bash
# `python -m validation run nvml-probe --step STEP` (two GPUs best): how NVML treats the memory
# a caller hands it, and the sampler's guard against it, under a training load.
#   info    the binding's and driver's versions, struct sizes; CANARY=1 adds the guard-area
#           canaries of every caller-memory NVML call (canary.json)
#   fields  the field-values query alone, fresh processes, by field set, load on and off
#   bisect  the sampler with one query or field set taken away at a time (bisect.txt, crashes.txt)
#   fence   the request against a no-access page, with 0..4096 readable bytes before it (fence.txt)
#   soak    the guarded query under load, then validation/monitor/soak.py (SOAK_SECONDS,
#           default 490)
# docs/monitor-safety.md says what the guard does and what these show.
set -u
o=${VALIDATION_OUT:?}
step=${1:?usage: nvml.sh info|fields|bisect|fence|soak}
S="python3 validation/monitor/nvml_probe.py sample --interval 0.1"

jobs=()
start_load() {  # a GPT ~124M training job on every GPU, then 20 s to reach its steady state
  for g in $(nvidia-smi --query-gpu=index --format=csv,noheader); do
    CUDA_VISIBLE_DEVICES=$g python3 validation/monitor/jobs.py lm 2>/dev/null & jobs+=($!)
  done
  sleep 20
}
stop_load() { kill -9 "${jobs[@]}" 2>/dev/null; wait 2>/dev/null; jobs=(); }
trap stop_load EXIT

log() { echo "== $*" | tee -a "$o/runs.txt"; }
trial() {  # FILE NAME N ENV... CMD...: how many of N fresh processes crashed
  local file=$1 name=$2 n=$3; shift 3; local crashed=0 first=""
  for _ in $(seq "$n"); do
    env PYTHONFAULTHANDLER=1 "$@" > "$o/last.txt" 2>&1 || {
      crashed=$((crashed+1))
      [ -z "$first" ] && { first=1; echo "=== $name" >> "$o/crashes.txt"; cat "$o/last.txt" >> "$o/crashes.txt"; }; }
  done
  echo "$name crashed=$crashed/$n" | tee -a "$o/$file"
}

case $step in
info)
  nvidia-smi --query-gpu=index,name,driver_version --format=csv | tee -a "$o/runs.txt"
  python3 validation/monitor/nvml_probe.py info | tee "$o/info.json"
  if [ -n "${CANARY:-}" ]; then
    start_load
    python3 validation/monitor/nvml_probe.py canary > "$o/canary.json" 2>>"$o/runs.txt"; log "canary rc=$?"
  fi ;;
fields)
  start_load
  for load in on off; do
    [ $load = off ] && { stop_load; sleep 3; }
    for c in temp nvlink nvlink-after-state nvlink-after-1s nvlink-guarded nvlink-per-link; do
      trial fields.txt "load=$load case=$c" 6 timeout 30 python3 validation/monitor/nvml_probe.py fields --case $c --iterations 20
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
  trial bisect.txt isolated-mixed 4 timeout 30 python3 validation/monitor/nvml_probe.py fields --case mixed --iterations 30
  trial bisect.txt full-1s 3 timeout 30 python3 validation/monitor/nvml_probe.py sample --seconds 4 --interval 1 ;;
fence)
  for c in fence-after fence-before; do for pad in 0 8 40 400 1480 4096; do
    [ $c = fence-before ] && [ $pad != 0 ] && continue
    trial fence.txt "$c pad=$pad" 3 timeout 30 python3 validation/monitor/nvml_probe.py fields --case $c --pad $pad --iterations 20
  done; done ;;
soak)
  start_load
  for i in 1 2 3; do
    env PYTHONFAULTHANDLER=1 timeout 30 $S --seconds 6 >> "$o/guard.txt" 2>&1
    echo "rc=$?" >> "$o/guard.txt"
  done
  stop_load
  cat "$o/guard.txt"
  python3 validation/monitor/soak.py "$o" --seconds "${SOAK_SECONDS:-490}" --interval 100ms > "$o/soak.txt" 2>&1
  tail -c 4000 "$o/soak.txt" ;;
*) echo "nvml.sh: unknown step $step" >&2; exit 2 ;;
esac
rm -f "$o/last.txt"
