#!/usr/bin/env bash
# One device call for the benchmarks: the quick profile as a user runs it (wall time from
# process start), the fidelity comparison, and the peers' own tools as references:
# mamf-finder (matmul) and, with 2+ GPUs, nccl-tests built from source (.peers/, not ours;
# carry .peers). Usage: bash scripts/device_bench.sh NAME [suite...]
set -u
source "$(dirname "$0")/device_env.sh"
name=$1; shift
o="$OUT/$name"; mkdir -p "$o"
now() { python3 -c 'import time; print(time.time())'; }
ngpu=$(nvidia-smi -L | wc -l)
NCCL_DIR=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')

if [ "$ngpu" -ge 2 ] && [ -d .peers/nccl-tests ]; then  # build while the GPUs work
  ( mkdir -p /tmp/nccl/lib && ln -sfn "$NCCL_DIR/include" /tmp/nccl/include &&
    ln -sf "$NCCL_DIR/lib/libnccl.so.2" /tmp/nccl/lib/libnccl.so &&
    rm -rf /tmp/nccl-tests && cp -r .peers/nccl-tests /tmp/nccl-tests &&
    make -C /tmp/nccl-tests/src -j16 MPI=0 BUILDDIR=/tmp/nccl-tests/build \
      CUDA_HOME="$(dirname "$(dirname "$(which nvcc)")")" NCCL_HOME=/tmp/nccl \
      NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > /tmp/nccl-build.log 2>&1
    echo "nccl-tests build rc=$?" >> /tmp/nccl-build.log ) &
  build=$!
fi

t0=$(now)
python3 -m gpuaudit bench --no-save --json "$@" > "$o/bench_quick.json" 2> /tmp/bench_quick.err
echo "gpuaudit bench --profile quick $*: rc=$? wall_s=$(python3 -c "import time; print(round(time.time() - $t0, 1))")" > "$o/summary.txt"
python3 - "$o/bench_quick.json" > "$o/bench_quick.txt" 2>&1 <<'PY'
import sys
from rich.console import Console
from gpuaudit.model import load_run
from gpuaudit.report.terminal import bench_view
Console(width=200).print(bench_view(load_run(open(sys.argv[1]).read()), show_all=True))
PY
suites="$*"; python3 scripts/bench_fidelity.py /tmp/fidelity ${suites:-latency matmul memory transfer p2p} > "$o/fidelity.txt" 2>&1

if [ -f .peers/mamf-finder.py ] && [ -z "${SKIP_MAMF:-}" ]; then
  echo "== mamf-finder bfloat16, shapes {2048,8192}×{2048,8192}×{8192,13312}" >> "$o/peers.txt"
  timeout 120 python3 .peers/mamf-finder.py --dtype bfloat16 --m 2048 8192 --n 2048 8192 \
    --k 8192 13312 --output_file /tmp/mamf_bf16.txt > /dev/null 2>&1
  grep -i -E "best|geometric" /tmp/mamf_bf16.txt >> "$o/peers.txt"
fi
if [ -n "${build:-}" ]; then
  wait $build; tail -2 /tmp/nccl-build.log >> "$o/peers.txt"
  export LD_LIBRARY_PATH="$NCCL_DIR/lib:${LD_LIBRARY_PATH:-}"
  GPUAUDIT_NCCL_TESTS=/tmp/nccl-tests/build python3 -m gpuaudit bench collectives --with-native \
    --sizes 1M:4G --no-save --json > "$o/collectives.json" 2> /tmp/collectives.err
  echo "collectives with nccl-tests: rc=$?" >> "$o/summary.txt"
  /tmp/nccl-tests/build/all_reduce_perf -g "$ngpu" -b 1M -e 4G -f 2 -c 1 >> "$o/peers.txt" 2>&1
  python3 -c '
from gpuaudit.hw import take_snapshot; from gpuaudit.bench.runner import select_devices
from gpuaudit.bench.context import BenchContext; from gpuaudit.bench.collectives import run
m = take_snapshot()
for o in ({"corrupt_rank": 1, "ops": ["all_reduce", "all_to_all"]}, {"hang_rank": 1, "hang_at": 1, "ops": ["all_reduce"]}):
    for x in run(BenchContext(machine=m, devices=select_devices(m, None), size_range=(1<<20, 1<<24), timeout_s=20, options=o)):
        print("planted", o, x.name, x.params.get("size_bytes"), x.value, x.verified, x.skipped_reason)' >> "$o/peers.txt" 2>&1
fi
tail -3 /tmp/bench_quick.err /tmp/collectives.err >> "$o/summary.txt" 2>/dev/null
cat "$o/summary.txt"; tail -40 "$o/fidelity.txt"; grep -v "^#\s*$" "$o/peers.txt" | tail -30
