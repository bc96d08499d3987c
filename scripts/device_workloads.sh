#!/usr/bin/env bash
# One device call for the end-to-end workloads (issue 11): training modes, MFU, DDP scaling,
# inference latency/throughput per mode, max QPS under an SLO, data loading. ~8 min on 2 H200s
# (nvidia-h200-x2); on one GPU the phases run in turn, shorter, and scaling is skipped (~9 min).
# Usage: bash scripts/device_workloads.sh NAME   → $OUT/NAME/{summary.txt,workloads.json,log.txt,profile.txt}
set -u
source "$(dirname "$0")/device_env.sh"
name=${1:-workloads}
o="$OUT/$name"; mkdir -p "$o"
nvidia-smi --query-gpu=index,name,clocks.max.sm,power.limit --format=csv > /tmp/gpus.txt 2>&1
python3 -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__)' >> /tmp/gpus.txt 2>&1
python3 scripts/device_workloads.py "$o"
rc=$?
cat /tmp/gpus.txt >> "$o/log.txt"
exit $rc
