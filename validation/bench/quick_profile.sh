#!/usr/bin/env bash
# The first screen's figures in one call on one H200 (~5 minutes): the quick profile as a user
# runs it, three times (`gpuaudit run` on a fresh store, timed from process start, each step's
# start time and the torch import's phases kept, the screen at 80 columns; RUNS=N for another
# count), mamf-finder bf16 over {1024..8192}² × {8192,13312,16384} beside each run's burst, and
# the exporter under 100 scrapers at once: `gpuaudit monitor --listen` replaying a recorded
# trace widened to 8 GPUs, then sampling this machine's GPU.
# Writes into $VALIDATION_OUT: summary.txt and screen.tgz (the screen, the run's JSON, the step
# times, mamf-finder's output, stderr of each step); scratch files in $VALIDATION_WORK.
#
#   python -m validation run quick-profile --out DIR [--peers DIR]
#
# mamf-finder is read from $VALIDATION_PEERS/mamf-finder.py (--peers; never committed):
# stas00/ml-engineering compute/accelerator/benchmarks/mamf-finder.py (benchmark_version 2).
# Without it the matmul step says so and the rest runs.
set -u
export PYTHONUNBUFFERED=1 COLUMNS=200
name=${1:-quick-profile}
o=${VALIDATION_OUT:?}; mkdir -p "$o"
peers=${VALIDATION_PEERS:-${VALIDATION_WORK:?}/no-peers}
S="$o/summary.txt"; : > "$S"
T=${VALIDATION_WORK:?}/screen; mkdir -p "$T"
say() { echo "$*" | tee -a "$S"; }
now() { python3 -c 'import time; print(f"{time.time():.3f}")'; }
since() { python3 -c "import time; print(round(time.time() - $1, 1))"; }
t_call=$(now)
say "== quick-profile $name: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); $(nproc) CPUs; $(date -u +%Y-%m-%dT%H:%M:%SZ)"

# 1. gpuaudit run as a user runs it, three times: a fresh store each, an 80×40 terminal's
# width; the first run of a fresh machine reads torch from a cold disk, the others do not
runs=${RUNS:-3}
for k in $(seq 1 "$runs"); do
  db="sqlite:///$T/runs$k.db"
  t0=$(now)
  COLUMNS=80 LINES=40 timeout 120 python3 validation/bench/step_times.py "$T/steps$k.txt" run --db "$db" \
    > "$T/run_screen$k.txt" 2> "$T/run$k.err"
  rc=$?
  t1=$(now)
  say ""; say "## 1.$k gpuaudit run (quick profile, fresh store): rc=$rc wall_s=$(since "$t0") (target ≤ 45 s)"
  python3 validation/bench/step_times.py --report "$T/steps$k.txt" "$t0" "$t1" >> "$S" 2>&1
  id=$(grep -o 'saved as run [0-9a-f]*' "$T/run_screen$k.txt" | awk '{print $4}' | head -1)
  python3 -m gpuaudit show "$id" --json --db "$db" > "$T/run$k.json" 2>> "$T/run$k.err"
  python3 - "$T/run$k.json" "$T/run_screen$k.txt" >> "$S" 2>&1 <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
print("suites (s):", run["suite_seconds"], "total", round(sum(run["suite_seconds"].values()), 1))
print("status:", run["status"], "contended:", sum(1 for m in run["measurements"] if m.get("contention")))
lines = open(sys.argv[2]).read().splitlines()
print(f"screen: {len(lines)} lines, widest {max(map(len, lines))} columns")
PY
  [ "$k" = 1 ] && cat "$T/run_screen1.txt" >> "$S"
done

# 2. mamf-finder bf16 beside our burst (the same call, after our run)
say ""; say "## 2. matmul bf16: ours (each run of step 1) beside mamf-finder"
if [ -f "$peers/mamf-finder.py" ]; then
  t0=$(now)
  timeout -s INT -k 5 75 python3 "$peers/mamf-finder.py" --dtype bfloat16 \
    --m 1024 2048 4096 8192 --n 1024 2048 4096 8192 --k 8192 13312 16384 \
    --output_file "$T/mamf_bf16.txt" > /dev/null 2>&1
  say "mamf-finder bf16 (48 shapes): rc=$? wall_s=$(since "$t0")"
  for k in $(seq 1 "$runs"); do
    say "run $k:"
    python3 validation/bench/fidelity_report.py matmul "$T/run$k.json" bf16:0:"$T/mamf_bf16.txt" >> "$S" 2>&1
  done
else
  say "(no mamf-finder.py in --peers: not run)"
fi

# 3. the exporter under 100 scrapers at once, while the monitor samples
say ""; say "## 3. exporter: 100 scrapers together every second"
timeout 90 python3 validation/monitor/exporter.py --scrapers 100 --rounds 10 --monitor \
  --trace tests/fixtures/telemetry/real/ddp-2gpu-lm-bf16.json >> "$S" 2> "$T/exporter8.err"
say "(rc=$?)"
timeout 90 python3 validation/monitor/exporter.py --scrapers 100 --rounds 10 --monitor \
  >> "$S" 2> "$T/exporter_live.err"
say "(rc=$?)"
timeout 60 python3 validation/monitor/exporter.py --n 1000 >> "$S" 2> "$T/exporter1.err"
say "(rc=$?)"

say ""; say "whole call: wall_s=$(since "$t_call")"
tar czf "$o/screen.tgz" -C "$T" . 2>/dev/null
cat "$S"
