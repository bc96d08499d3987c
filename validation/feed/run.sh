#!/usr/bin/env bash
# `python -m validation run feed`: can this server feed its GPUs? Host memory (STREAM per NUMA
# node), JPEG decode + augment per core and on all cores (PIL, torchvision), nvJPEG on the GPU,
# host→device copies, the storage under FEED_PATH with fio beside ours where installed, the
# verdict for ResNet-50 training at 6,800 images/s (the H200's measured training rate), and the
# network suite against a local --serve (NIC inventory; loopback TCP beside iperf3 where
# installed); then ours beside fio pass by pass (validation/feed/compare.py) and the feed
# tests. Results in $VALIDATION_OUT (summary.md first).
#
# --dry (DRY=1): any machine, small sizes.
# Env: FEED_PATH (default: the scratch folder), FEED_SIZE (default 4G; 256M when DRY), FEED_JOB
#      (default 6800:110K:jpeg:random), FEED_PROFILE (default quick).
set -u
o=${VALIDATION_OUT:?}; W=${VALIDATION_WORK:?}; peers=${VALIDATION_PEERS:-$W/no-peers}
path=${FEED_PATH:-$W}
size=${FEED_SIZE:-$([ -n "${DRY:-}" ] && echo 256M || echo 4G)}
job=${FEED_JOB:-6800:110K:jpeg:random}
profile=${FEED_PROFILE:-quick}
now() { python3 -c 'import time; print(time.time())'; }

# fio is rarely on a rented image: build its source from the peers' folder (axboe/fio).
if ! command -v fio > /dev/null && [ -z "${GPUAUDIT_FIO:-}" ] && [ -d "$peers/fio" ]; then
  rm -rf "$W/fio-src" && cp -r "$peers/fio" "$W/fio-src" &&
    (cd $W/fio-src && ./configure --disable-native > $W/fio-build.log 2>&1 &&
     make -j"$(nproc)" fio >> $W/fio-build.log 2>&1) &&
    export GPUAUDIT_FIO=$W/fio-src/fio
  echo "fio built from $peers/fio: ${GPUAUDIT_FIO:-FAILED (see $W/fio-build.log)}"
fi

{ echo "== $(date -u +%FT%TZ)"; nproc; free -g | head -2
  lscpu | grep -E "Model name|Socket|NUMA|L3" ; nvidia-smi -L 2>&1 | head -8
  echo "== lsblk"; lsblk -o NAME,SIZE,TYPE,ROTA,MODEL,TRAN,MOUNTPOINTS 2>&1
  echo "== df"; df -hT 2>&1 | grep -v -E "^(overlay|tmpfs|shm)" | head -20
  echo "== tools"; for t in fio iperf3 ib_write_bw ibv_devinfo; do echo "$t: $(command -v $t || echo missing)"; done
  echo "GPUAUDIT_FIO=${GPUAUDIT_FIO:-}"; tail -2 $W/fio-build.log 2>/dev/null
  python3 -c 'import torch, PIL; print("torch", torch.__version__, "PIL", PIL.__version__)' 2>&1
  python3 -c 'import torchvision; print("torchvision", torchvision.__version__)' 2>&1 | tail -1
} > "$o/facts.txt" 2>&1

t0=$(now)
python3 -m gpuaudit bench host transfer storage "$path" --with-native --file-size "$size" \
  --job "$job" --profile "$profile" --json --no-save > "$o/feed.json" 2> $W/feed.err
echo "gpuaudit bench host transfer storage $path --with-native --file-size $size --job $job: rc=$? wall_s=$(python3 -c "import time; print(round(time.time() - $t0, 1))")" > "$o/summary.txt"
python3 - "$o/feed.json" > "$o/feed.txt" 2>&1 <<'PY'
import sys
from rich.console import Console
from gpuaudit.model import load_run
from gpuaudit.report.terminal import bench_view
run = load_run(open(sys.argv[1]).read())
Console(width=200).print(bench_view(run, show_all=True))
for f in run.findings:
    print(f.severity.value, f.code, f.message, "|", f.advice or "", "|", f.evidence)
PY

python3 -m gpuaudit bench network --serve --port 5301 > $W/serve.out 2> $W/serve.err &
srv=$!; sleep 3
t0=$(now)
python3 -m gpuaudit bench network --peer 127.0.0.1:5301 --with-native --profile "$profile" \
  --json --no-save > "$o/net.json" 2> $W/net.err
echo "gpuaudit bench network --peer 127.0.0.1 --with-native: rc=$? wall_s=$(python3 -c "import time; print(round(time.time() - $t0, 1))")" >> "$o/summary.txt"
kill -TERM $srv; wait $srv; echo "serve exit (SIGTERM): $?" >> "$o/summary.txt"
python3 - "$o/net.json" >> "$o/feed.txt" 2>&1 <<'PY'
import sys
from rich.console import Console
from gpuaudit.model import load_run
from gpuaudit.report.terminal import bench_view
Console(width=200).print(bench_view(load_run(open(sys.argv[1]).read()), show_all=True))
PY

# Ours and fio on the same file, test by test, 3 rounds (the within-3 % check of docs/feed.md).
echo "== validation/feed/compare.py $path 3 ${FEED_COMPARE_SIZE:-$size}" >> "$o/feed.txt"
timeout 400 python3 validation/feed/compare.py "$path" 3 "${FEED_COMPARE_SIZE:-$size}" >> "$o/feed.txt" 2>&1
echo "feed_compare: rc=$?" >> "$o/summary.txt"

shopt -s globstar nullglob  # the feed tests wherever the tests folder keeps them
timeout 420 python3 -m pytest -q -p no:cacheprovider tests/**/test_feed*.py tests/**/feed/test_*.py \
  > "$o/pytest.txt" 2>&1
echo "feed tests: rc=$?" >> "$o/summary.txt"
tail -3 $W/feed.err $W/net.err $W/serve.err >> "$o/summary.txt" 2>/dev/null
cat "$o/summary.txt"; grep -E "^(INFO|WARN|FAIL|PASS) feed" "$o/feed.txt"
grep -A12 "^figure " "$o/feed.txt"; tail -3 "$o/pytest.txt"
# the run fails when any part did (each wrote its rc= into the summary)
! grep -qE "rc=[1-9]" "$o/summary.txt"
