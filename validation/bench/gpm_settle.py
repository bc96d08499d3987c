"""How long after our own kernels end does NVML's GPM still count them? (A clean
bench run read 19-28 % SM activity in the quarter second after its matmul suite.)

Runs ~1 s of bf16 matmuls, synchronizes, then reads GPM SM activity through gpuaudit.hw every
GAP ms for a second (each reading covers the time since the previous one); the same with no
work before (the idle baseline); then `Watch.look` right after a synchronized burst with
settle 0 and with the default settle. Prints one JSON document.
Usage: python3 validation/bench/gpm_settle.py
"""

import json
import time

import torch

from gpuaudit.bench.contention import SETTLE_S, Watch
from gpuaudit.hw import LiveNvml
from gpuaudit.hw.telemetry import read_gpu_sample, read_static


def burst(a: torch.Tensor, n: int = 600) -> None:
    for _ in range(n):
        a @ a
    torch.cuda.synchronize()


def main() -> None:
    src = LiveNvml()
    st = read_static(src, 0)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    burst(a, 50)
    out: dict = {"gpm": st.gpm, "decay": {}, "idle": [], "look": {}}
    for gap_ms in (25, 50, 100):
        runs = []
        for _ in range(2):
            burst(a)
            t0 = time.perf_counter()
            read_gpu_sample(src, st)
            seq = []
            while time.perf_counter() - t0 < 1.0:
                time.sleep(gap_ms / 1000)
                s = read_gpu_sample(src, st)
                seq.append((round((time.perf_counter() - t0) * 1000), s.sm_activity_pct))
            runs.append(seq)
        out["decay"][gap_ms] = runs
    time.sleep(1.0)
    read_gpu_sample(src, st)
    for _ in range(10):
        time.sleep(0.1)
        out["idle"].append(read_gpu_sample(src, st).sm_activity_pct)
    for settle in (0.0, 0.1, SETTLE_S, 0.3):
        seen = []
        for _ in range(3):
            burst(a)
            w = Watch(src, [0], settle_s=settle)
            look = w.look("after a burst")
            seen.append(look.activity.get(0, (0.0, ""))[0])
        out["look"][str(settle)] = seen
    print(json.dumps(out))


if __name__ == "__main__":
    main()
