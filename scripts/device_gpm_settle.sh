#!/usr/bin/env bash
# One short device call (~75 s on one H200): how long GPM keeps counting our own kernels after
# they end (scripts/gpm_settle.py), then `bench matmul memory transfer` on the idle GPU, which
# must mark no figure contended. Writes $OUT/gpm_settle.json and $OUT/bench_idle.json.
set -u
source "$(dirname "$0")/device_env.sh"
timeout 90 python3 scripts/gpm_settle.py > "$OUT/gpm_settle.json" 2> "$OUT/gpm_settle.err"
echo "gpm_settle rc=$?"
timeout 100 python3 -m gpuaudit bench matmul memory transfer --no-save --json \
  > "$OUT/bench_idle.json" 2> "$OUT/bench_idle.err"
echo "bench matmul memory transfer rc=$?"
python3 scripts/bench_fidelity_report.py contended "$OUT/bench_idle.json" no
cat "$OUT/gpm_settle.json"; tail -3 "$OUT/gpm_settle.err"
