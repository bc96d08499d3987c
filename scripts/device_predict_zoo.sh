#!/usr/bin/env bash
# One device call for `gpuaudit predict` on the model zoo: the machine's rates, every family's
# op profiles (bf16, fp32) and its target cases' steps (scripts/predict_zoo.py record), packed
# into tars of at most 15 MiB in $OUT. Run from the repository root:
#   bash scripts/device_predict_zoo.sh [BUDGET_S] [--set held_out|development]
set -u
source "$(dirname "$0")/device_env.sh"
export PYTHONPATH=$PYTHONPATH:$PWD/examples/predict
budget=${1:-540}
shift || true
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
timeout $((${budget%.*} + 40)) python3 scripts/predict_zoo.py record "$OUT/zoo" --budget-s "$budget" "$@"
rc=$?
python3 scripts/predict_zoo.py pack "$OUT/zoo" "$OUT"
for f in "$OUT"/zoo/status/*.json; do python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["entry"], d.get("wall_s"), d.get("recorded"), {k: v.get("step_ms", v.get("error")) for k, v in d["cases"].items()})' "$f"; done
cat "$OUT/zoo/status.json"
ls -la "$OUT"
exit $rc
