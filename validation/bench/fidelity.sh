#!/usr/bin/env bash
# `python -m validation run bench-fidelity [--mode MODE]` (about 7 minutes on two H200s, at most
# 9): our benchmark figures with the reference tools beside them, from one run.
#   1. the quick profile as a user runs it (wall time from process start; ≤ 60 s on 2 GPUs),
#      which is also the not-contended control;
#   2. mamf-finder for bf16 and fp16 (one per GPU, at once), then tf32 and fp8, over
#      {1024..8192}² × {8192,13312,16384}; beside our burst mean/median/max from step 1;
#   3. our collectives and nccl-tests (3 runs, for its run-to-run spread) 1 MiB..4 GiB in one
#      call, compared per op and size, nccl-tests launched one thread per GPU (-t N -g 1), one
#      thread for all (-g N) and, where an MPI is installed, one process per GPU (mpirun);
#      NCCL's transports and algorithms at 1 MiB in each form (NCCL_DEBUG=INFO);
#   4. a bf16 matmul loop planted on GPU 0 during `bench` (contended expected), `--exclusive`
#      refusing it (exit 2), then the same without the load (not contended, exit 0);
#   5. pageable copies at 4 MiB..1 GiB: ours (x.to('cuda'), y.cpu()) beside plain copy_.
# Writes into $VALIDATION_OUT: summary.md (every table, markdown), bench_quick.json,
# collectives.json, contended.json, transfer.json, peers.txt (the tools' raw output).
#
# MODE ($1): fidelity (the call above, default), standard or full (time that profile alone),
# matmul (steps 1 and 2, ~4 minutes), collectives (steps 1 and 3, ~6 minutes).
#
# The reference tools' sources are read from $VALIDATION_PEERS (--peers; never committed):
#   nccl-tests/      NVIDIA/nccl-tests source (2.19.x); built here, in the background, with
#                    `make MPI=0` against torch's NCCL (nvidia-nccl wheel)
#   mamf-finder.py   stas00/ml-engineering compute/accelerator/benchmarks/mamf-finder.py,
#                    benchmark_version = 2 (its --m/--n/--k lists)
# Without a GPU (--dry) it runs what a CPU can and the report on the recorded mamf-finder
# output, so the script itself is checked.
set -u
mode=${1:-fidelity}
o=${VALIDATION_OUT:?}; W=${VALIDATION_WORK:?}; peers=${VALIDATION_PEERS:-$W/no-peers}
S="$o/summary.md"; P="$o/peers.txt"; : > "$S"; : > "$P"
T=$W/fidelity; mkdir -p "$T"
now() { python3 -c 'import time; print(time.time())'; }
since() { python3 -c "import time; print(round(time.time() - $1, 1))"; }
t_call=$(now)
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
say() { echo "$*" | tee -a "$S"; }
# Seconds a step may take: its own cap, within what is left of the whole call's budget
# (FIDELITY_BUDGET_S, default 530 s: a 10-minute device call).
budget=${FIDELITY_BUDGET_S:-530}
cap() { python3 -c "import time; print(max(5, min($1, int($budget - (time.time() - $t_call)))))"; }
report() { python3 validation/bench/fidelity_report.py "$@" >> "$S" 2>&1; }

if [ "$mode" = standard ] || [ "$mode" = full ]; then
  t0=$(now)
  timeout 590 python3 -m gpuaudit bench --profile "$mode" --no-save --json > "$o/bench_$mode.json" 2> "$T/err"
  say "gpuaudit bench --profile $mode ($ngpu GPUs): rc=$? wall_s=$(since "$t0")"
  report contended "$o/bench_$mode.json" no
  tail -3 "$T/err" >> "$S"; cat "$S"; exit 0
fi

say "== bench-fidelity $mode: $ngpu GPU(s), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
if [ "$ngpu" -ge 2 ] && [ -d "$peers/nccl-tests" ]; then  # build while the GPUs work
  NCCL_DIR=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')
  mkdir -p $W/nccl/lib && ln -sfn "$NCCL_DIR/include" $W/nccl/include &&
    ln -sf "$NCCL_DIR/lib/libnccl.so.2" $W/nccl/lib/libnccl.so
  # nccl-tests into $W/$1 with `make MPI=$2 ...`, its rc in the log
  nt_build() { local dir=$1 mpi=$2; shift 2
    rm -rf "$W/$dir" && cp -r "$peers/nccl-tests" "$W/$dir" &&
    make -C "$W/$dir/src" -j8 MPI="$mpi" "$@" BUILDDIR="$W/$dir/build" \
      CUDA_HOME="$(dirname "$(dirname "$(which nvcc)")")" NCCL_HOME=$W/nccl \
      NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > "$W/$dir-build.log" 2>&1
    echo "nccl-tests MPI=$mpi build rc=$?" >> $W/nccl-build.log; }
  : > $W/nccl-build.log
  nt_build nccl-tests 0 & build=$!
  # with an MPI, the launch form "mpi" (one process per GPU under mpirun, as our ranks run);
  # Open MPI on Debian/Ubuntu keeps include/ and lib/ under /usr/lib/<arch>/openmpi
  if command -v mpicc > /dev/null && command -v mpirun > /dev/null; then
    inc=$(mpicc --showme:incdirs 2>/dev/null | awk '{print $1}')
    mpi_home=${inc%/include}; [ -n "$inc" ] || mpi_home=$(dirname "$(dirname "$(command -v mpicc)")")
    nt_build nccl-tests-mpi 1 MPI_HOME="$mpi_home" & build_mpi=$!
  else
    echo "no mpicc/mpirun here: nccl-tests launch form mpi not built" >> $W/nccl-build.log
  fi
fi

# 1. the quick profile, as a user runs it (also the control: nothing else on the GPUs)
say ""; say "## 1. quick profile"
t0=$(now)
timeout "$(cap 150)" python3 -m gpuaudit bench --no-save --json > "$o/bench_quick.json" 2> "$T/quick.err"
say "gpuaudit bench (quick, all suites, $ngpu GPUs): rc=$? wall_s=$(since "$t0") (target ≤ 60 s)"
report contended "$o/bench_quick.json" no
report times "$o/bench_quick.json"

# 2. mamf-finder beside our burst, per precision (one precision per GPU at once)
say ""; say "## 2. matmul: ours (quick profile above) beside mamf-finder"
mamf() {  # gpu dtype out [env...]
  local gpu=$1 dt=$2 out=$3; shift 3
  env CUDA_VISIBLE_DEVICES="$gpu" "$@" timeout -s INT -k 10 "$(cap 80)" \
    python3 "$peers/mamf-finder.py" --dtype "$dt" \
    --m 1024 2048 4096 8192 --n 1024 2048 4096 8192 --k 8192 13312 16384 \
    --output_file "$out" > /dev/null 2>&1
  echo "mamf-finder $dt on GPU $gpu: rc=$?" >> "$P"
}
if [ "$mode" = collectives ]; then
  say "(skipped in this mode)"
elif [ "$ngpu" -ge 1 ] && [ -f "$peers/mamf-finder.py" ]; then
  g2=$(( ngpu >= 2 ? 1 : 0 ))
  t0=$(now)
  mamf 0 bfloat16 "$T/mamf_bf16.txt" & a=$!
  [ "$g2" = 1 ] && { mamf 1 float16 "$T/mamf_fp16.txt" & b=$!; wait $b; }
  wait $a
  [ "$g2" = 0 ] && mamf 0 float16 "$T/mamf_fp16.txt"
  mamf 0 float32 "$T/mamf_tf32.txt" TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 & a=$!
  [ "$g2" = 1 ] && { mamf 1 float8_e4m3fn "$T/mamf_fp8.txt" & b=$!; wait $b; }
  wait $a
  [ "$g2" = 0 ] && mamf 0 float8_e4m3fn "$T/mamf_fp8.txt"
  say "mamf-finder, 4 precisions: wall_s=$(since "$t0")"
  for f in bf16 fp16 tf32 fp8; do
    echo "== mamf-finder $f" >> "$P"; tr '\r' '\n' < "$T/mamf_$f.txt" 2>/dev/null |
      grep -E "\(mean\)|TFLOPS @|Tried|geometric|Elapsed" | sed 's/| best:.*//' >> "$P"
  done
  report matmul "$o/bench_quick.json" bf16:0:"$T/mamf_bf16.txt" fp16:"$g2":"$T/mamf_fp16.txt" \
    tf32:0:"$T/mamf_tf32.txt" fp8:"$g2":"$T/mamf_fp8.txt"
else
  say "(no GPU or no $peers/mamf-finder.py: the report on the recorded H200 bf16 run instead)"
  report matmul "$o/bench_quick.json" bf16:0:tests/fixtures/bench/h200-1gpu-mamf-bf16-grep.txt
fi

[ "$mode" = matmul ] && { say "whole call: wall_s=$(since "$t_call")"; exit 0; }

# 3. collectives beside nccl-tests, 1 MiB..4 GiB, nccl-tests 3 times (its own spread) in each
#    launch form (threads: -t N -g 1; group: -g N; mpi: mpirun -np N ... -g 1 where an MPI
#    exists), with -n 100: its host clock adds launch + sync latency over -n to every op
#    (~4 % of a 1 MiB all-reduce at its default -n 20); ours has no host in it
say ""; say "## 3. collectives: ours beside nccl-tests"
if [ -n "${build:-}" ]; then
  wait $build ${build_mpi:-}; tee -a "$P" < $W/nccl-build.log >> "$S"
  export LD_LIBRARY_PATH="$NCCL_DIR/lib:${LD_LIBRARY_PATH:-}"
  forms=threads,group
  if [ -x $W/nccl-tests-mpi/build/all_reduce_perf ]; then
    forms=threads,group,mpi; export GPUAUDIT_NCCL_TESTS_MPI=$W/nccl-tests-mpi/build
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
  { echo "== MPI here"; command -v mpirun mpicc; mpirun --version 2>&1 | head -2; } >> "$P"
  t0=$(now)
  GPUAUDIT_NCCL_TESTS=$W/nccl-tests/build GPUAUDIT_NCCL_TESTS_RUNS=3 \
    GPUAUDIT_NCCL_TESTS_ITERS=100 GPUAUDIT_NCCL_TESTS_LAUNCH=$forms timeout "$(cap 330)" \
    python3 -m gpuaudit bench collectives --with-native --sizes 1M:4G --no-save --json \
    > "$o/collectives.json" 2> "$T/coll.err"
  say "bench collectives --with-native --sizes 1M:4G (nccl-tests -n 100, 3 runs, launch $forms): rc=$? wall_s=$(since "$t0")"
  report collectives "$o/collectives.json"
  # the transports and algorithms NCCL chose in each launch form, at 1 MiB
  probe() { echo "== NCCL_DEBUG=INFO all_reduce_perf 1 MiB, launch $1" >> "$P"
    NCCL_DEBUG=INFO timeout "$(cap 30)" "${@:2}" -b 1M -e 1M -n 5 -w 1 2>&1 |
      grep -E "via|Channel|NCCL_|Algo|proto|  1048576" | sort | uniq -c | sort -rn | head -25 >> "$P"; }
  probe group $W/nccl-tests/build/all_reduce_perf -g "$ngpu"
  probe threads $W/nccl-tests/build/all_reduce_perf -t "$ngpu" -g 1
  [ -n "${GPUAUDIT_NCCL_TESTS_MPI:-}" ] && probe mpi mpirun -np "$ngpu" "$GPUAUDIT_NCCL_TESTS_MPI/all_reduce_perf" -g 1
else
  say "(fewer than 2 GPUs or no $peers/nccl-tests: ours alone)"
  timeout "$(cap 120)" python3 -m gpuaudit bench collectives --no-save --json > "$o/collectives.json" 2> "$T/coll.err"
  report collectives "$o/collectives.json"
fi

[ "$mode" = collectives ] && { say ""; say "whole call: wall_s=$(since "$t_call")"; tail -2 "$T/quick.err" "$T/coll.err" >> "$S" 2>/dev/null; cat "$S"; exit 0; }

# 4. contended: a bf16 matmul loop on GPU 0 during bench; --exclusive; then without it
say ""; say "## 4. contended figures"
if [ "$ngpu" -ge 1 ]; then
  CUDA_VISIBLE_DEVICES=0 python3 -c '
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 240
while time.time() < end:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()' & load=$!
  for _ in $(seq 60); do  # until NVML lists it
    nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -qw "$load" && break; sleep 0.5
  done
  t0=$(now)
  timeout "$(cap 120)" python3 -m gpuaudit bench latency matmul memory --gpus 0 --no-save --json \
    > "$o/contended.json" 2> "$T/cont.err"
  say "bench latency matmul memory --gpus 0 beside a bf16 matmul loop (pid $load): rc=$? wall_s=$(since "$t0")"
  report contended "$o/contended.json" yes
  python3 -m gpuaudit bench latency --gpus 0 --exclusive --no-save > /dev/null 2> "$T/excl.err"
  say "--exclusive beside it: rc=$? (2 expected): $(tail -1 "$T/excl.err" | cut -c1-300)"
  kill "$load"; wait "$load" 2>/dev/null; sleep 1
  python3 -m gpuaudit bench latency memory --gpus 0 --exclusive --no-save --json > "$T/idle.json" 2> "$T/idle.err"
  say "--exclusive on the idle GPU: rc=$? (0 expected)"
  report contended "$T/idle.json" no
else
  say "(no GPU: the CPU run above is the not-contended control)"
fi

# 5. pageable copies at the sizes users copy
say ""; say "## 5. pageable transfers (GPU 0): ours beside plain torch copy_"
timeout "$(cap 90)" python3 validation/bench/fidelity_report.py pageable "$o/transfer.json" >> "$S" 2>&1

say ""; say "whole call: wall_s=$(since "$t_call")"
tail -2 "$T/quick.err" "$T/coll.err" "$T/cont.err" >> "$S" 2>/dev/null
rm -rf "$T"
cat "$S"
