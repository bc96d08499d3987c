#!/usr/bin/env bash
# One device call for the benchmarks: the quick profile as a user runs it (wall time from
# process start), the fidelity comparison, and the peers' own tools as references:
# mamf-finder (matmul) and, with 2+ GPUs, nccl-tests built from source (.peers/, not ours).
# Usage: bash scripts/device_bench.sh NAME [suite...]
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
o="$OUT/$name"; mkdir -p "$o"
now() { python3 -c 'import time; print(time.time())'; }

ngpu=$(nvidia-smi -L | wc -l)
if [ "$ngpu" -ge 2 ] && [ -d .peers/nccl-tests ]; then  # build while the GPUs work
  ( nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))')
    mkdir -p /tmp/nccl/lib && ln -sf "$nccl/include" /tmp/nccl/include
    ln -sf "$nccl/lib/libnccl.so.2" /tmp/nccl/lib/libnccl.so
    cp -r .peers/nccl-tests /tmp/nccl-tests && cd /tmp/nccl-tests &&
    make -j16 MPI=0 CUDA_HOME="$(dirname "$(dirname "$(which nvcc)")")" NCCL_HOME=/tmp/nccl \
      NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > /tmp/nccl-build.log 2>&1
    echo "nccl-tests build rc=$?" >> /tmp/nccl-build.log ) &
  build=$!
fi

t0=$(now)
python3 -m gpuaudit bench --no-save --json "$@" > "$o/bench_quick.json" 2> "$o/bench_quick.err"
echo "gpuaudit bench --profile quick $*: rc=$? wall_s=$(python3 -c "import time; print(round(time.time() - $t0, 1))")" | tee "$o/summary.txt"
python3 - "$o/bench_quick.json" > "$o/bench_quick.txt" 2>&1 <<'PY'
import sys
from rich.console import Console
from gpuaudit.model import load_run
from gpuaudit.report.terminal import bench_view
Console(width=200).print(bench_view(load_run(open(sys.argv[1]).read()), show_all=True))
PY
python3 scripts/bench_fidelity.py "$o" "$@" > "$o/fidelity.txt" 2>&1

if [ -f .peers/mamf-finder.py ]; then
  for dt in bfloat16 float8_e4m3fn; do
    echo "== mamf-finder $dt --m_range 0 20480 1024 --n 4096 --k 4096" >> "$o/peers.txt"
    timeout 150 python3 .peers/mamf-finder.py --dtype $dt --m_range 0 20480 1024 --n 4096 --k 4096 \
      --num_iterations 100 --num_warmup_iterations 50 --output_file /tmp/mamf_$dt.txt 2>&1 | tail -4 >> "$o/peers.txt"
    echo "== mamf-finder $dt at 8192³ and 2048×2048×13312" >> "$o/peers.txt"
    for shape in "8192 8192 8192" "2048 2048 13312"; do read -r m n k <<< "$shape"
      timeout 60 python3 .peers/mamf-finder.py --dtype $dt --m "$m" --n "$n" --k "$k" \
        --output_file /tmp/mamf_x.txt 2>&1 | tail -2 >> "$o/peers.txt"; done
  done
fi
if [ -n "${build:-}" ]; then
  wait $build; tail -3 /tmp/nccl-build.log >> "$o/peers.txt"
  nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))')
  for op in all_reduce all_gather reduce_scatter alltoall broadcast; do
    echo "== nccl-tests ${op}_perf -b 1M -e 4G -f 4 -g $ngpu -c 1" >> "$o/peers.txt"
    LD_LIBRARY_PATH="$nccl/lib:${LD_LIBRARY_PATH:-}" timeout 120 \
      /tmp/nccl-tests/build/${op}_perf -b 1M -e 4G -f 4 -g "$ngpu" -c 1 >> "$o/peers.txt" 2>&1
  done
fi
cat "$o/summary.txt"; tail -45 "$o/fidelity.txt"; grep -v "^#\s*$" "$o/peers.txt" | tail -60
