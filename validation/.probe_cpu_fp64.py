import os, time, torch
from gpuaudit.bench.science import sparse, fft
from gpuaudit.bench.science.common import Where
print("threads", torch.get_num_threads(), "cpu_count", os.cpu_count(), "affinity", len(os.sched_getaffinity(0)))
for f in ("/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
    try: print(f, open(f).read().strip())
    except OSError as e: print(f, e)
print(torch.__config__.parallel_info())
for n in (None, 1, 4):
    if n: torch.set_num_threads(n)
    w = Where(torch, "cpu", 5, 1)
    for p in ("fp32", "fp64"):
        t = time.time(); o = sparse.spmv(w, 20, p); print("threads", torch.get_num_threads(), "spmv", p, [round(r, 3) for r in o.rates], round(time.time() - t, 2), flush=True)
