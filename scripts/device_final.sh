#!/usr/bin/env bash
# Final 1-GPU check: the whole quick profile as a user runs it, the main job, our matmul beside
# do_bench, and mamf-finder at the bf16 shape we chose. Usage: bash scripts/device_final.sh NAME
set -u
source "$(dirname "$0")/device_env.sh"
name=$1
o="$OUT/$name"; mkdir -p "$o"
t0=$(python3 -c 'import time; print(time.time())')
python3 -m gpuaudit bench --no-save --json > "$o/bench_quick.json" 2> /tmp/err.txt
echo "gpuaudit bench (all suites, quick): rc=$? wall_s=$(python3 -c "import time; print(round(time.time() - $t0, 1))")" > "$o/summary.txt"
python3 -m gpuaudit run --db /tmp/ga.db > "$o/run.txt" 2>&1; echo "gpuaudit run: rc=$?" >> "$o/summary.txt"
python3 scripts/bench_fidelity.py /tmp/fid matmul > "$o/fidelity.txt" 2>&1
shape=$(python3 -c "
import json; r = json.load(open('$o/bench_quick.json'))
m = next(x for x in r['measurements'] if x['name'] == 'bf16_burst')
print(m['params']['m'], m['params']['n'], m['params']['k'], round(m['value'], 1))")
read -r m n k ours <<< "$shape"
echo "our bf16 burst at ${m}x${n}x${k}: $ours TFLOP/s" >> "$o/summary.txt"
timeout 120 python3 .peers/mamf-finder.py --dtype bfloat16 --m "$m" 2048 --n "$n" 2048 --k "$k" 13312 \
  --output_file /tmp/mamf.txt > /dev/null 2>&1
grep -E "@|best" /tmp/mamf.txt >> "$o/summary.txt"
tail -3 /tmp/err.txt >> "$o/summary.txt"
cat "$o/summary.txt"; tail -20 "$o/fidelity.txt"
