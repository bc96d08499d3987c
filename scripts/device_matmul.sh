#!/usr/bin/env bash
# Matmul only: our quick search's choice and figures, and mamf-finder at its best-known bf16
# shape, in one call. Usage: bash scripts/device_matmul.sh NAME
set -u
source "$(dirname "$0")/device_env.sh"
o="$OUT/$1"; mkdir -p "$o"
t0=$(python3 -c 'import time; print(time.time())')
python3 -m gpuaudit bench matmul --no-save --json > "$o/matmul.json" 2> /tmp/err.txt
echo "gpuaudit bench matmul: rc=$? wall_s=$(python3 -c "import time; print(round(time.time() - $t0, 1))")" > "$o/summary.txt"
python3 -c "
import json
for m in json.load(open('$o/matmul.json'))['measurements']:
    p = m['params']; print(f\"{m['name']:12} {m['value']:9.1f} {p.get('m')}x{p.get('n')}x{p.get('k')}\")" >> "$o/summary.txt"
timeout 90 python3 .peers/mamf-finder.py --dtype bfloat16 --m 2048 --n 2048 --k 13312 \
  --output_file /tmp/mamf.txt > /dev/null 2>&1
grep -E "^ +1 \|" /tmp/mamf.txt >> "$o/summary.txt"
tail -2 /tmp/err.txt >> "$o/summary.txt"; cat "$o/summary.txt"
