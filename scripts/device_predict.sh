#!/usr/bin/env bash
# One device call for `gpuaudit predict`'s validation (issue 17): the machine's rates, op
# profiles of gpt-124m (fp32, bf16), gpt-1.3b (bf16) and resnet50 (fp32, bf16), DDP of
# gpt-124m on 2 GPUs; then each prediction beside its measurement. ~6 min on nvidia-h200-x2.
# Usage: bash scripts/device_predict.sh NAME   → $OUT/NAME/{summary.md,runs.json,predictions.json,log.txt}
set -u
source "$(dirname "$0")/device_env.sh"
name=${1:-predict}
o="$OUT/$name"; mkdir -p "$o"
python3 scripts/device_predict.py "$o"
rc=$?
nvidia-smi --query-gpu=index,name,clocks.max.sm,power.limit --format=csv >> "$o/log.txt" 2>&1
exit $rc
