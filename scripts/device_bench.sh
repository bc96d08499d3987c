#!/usr/bin/env bash
# One device call for the benchmarks: the quick profile as a user runs it (wall time from
# process start), then the fidelity comparison. Usage: bash scripts/device_bench.sh NAME [suite...]
set -u
name=$1; shift
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 COLUMNS=200
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src
else
  export PYTHONPATH=$PWD/src
fi
mkdir -p "$OUT/$name"
start=$(date +%s.%N)
python3 -m gpuaudit bench --no-save --json "$@" > "$OUT/$name/bench_quick.json" 2> "$OUT/$name/bench_quick.err"
echo "rc=$? wall_s=$(echo "$(date +%s.%N) - $start" | bc)" | tee "$OUT/$name/bench_quick_wall.txt"
python3 -m gpuaudit show --help >/dev/null
python3 - "$OUT/$name/bench_quick.json" <<'PY' > "$OUT/$name/bench_quick.txt" 2>&1
import sys
from rich.console import Console
from gpuaudit.model import load_run
from gpuaudit.report.terminal import bench_view
Console(width=200).print(bench_view(load_run(open(sys.argv[1]).read()), show_all=True))
PY
tail -40 "$OUT/$name/bench_quick.txt"
python3 scripts/bench_fidelity.py "$OUT/$name" "$@" 2>&1 | tee "$OUT/$name/fidelity.txt" | tail -40
