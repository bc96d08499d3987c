"""Profiler traces made by hand: kineto's events (complete events, GPU kernels, launches) and
a two-step trace whose answers are worked out by hand (`hand_trace`)."""

from __future__ import annotations


def event(name, cat, ts, dur, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": 1,
            "args": args}


def gpu_event(name, ts, dur, corr, stream=7, cat="kernel", **more):
    return event(name, cat, ts, dur, device=0, stream=stream, correlation=corr, **more)


def launch_event(ts, corr, dur=5, name="cudaLaunchKernel"):
    return event(name, "cuda_runtime", ts, dur, correlation=corr)


def hand_trace():
    """Two 1000 µs steps. Stream 7: nvjet (100–300), fp32 xmma (310–410), elementwise
    (500–550), ampere sgemm (700–900), a pageable HtoD copy (1000–1100); stream 20: NCCL
    all-reduce (600–800). Launches placed so that each gap has a known idle category."""
    ev = [
        event("ProfilerStep#1", "user_annotation", 0, 1000),
        event("ProfilerStep#2", "user_annotation", 1000, 1000),
        gpu_event("nvjet_tst_128x256_64x6_2x1_v_bz_TNT", 100, 200, 1), launch_event(90, 1),
        gpu_event("sm90_xmma_gemm_f32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1", 310,
             100, 2), launch_event(95, 2),
        gpu_event("void at::native::vectorized_elementwise_kernel<4>", 500, 50, 3),
        launch_event(450, 3),
        gpu_event("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 600, 200, 4, stream=20),
        launch_event(480, 4),
        gpu_event("ampere_sgemm_128x64_nn", 700, 200, 5), launch_event(520, 5),
        gpu_event("Memcpy HtoD (Pageable -> Device)", 1000, 100, 6, cat="gpu_memcpy",
             bytes=1_000_000), launch_event(950, 6, dur=120, name="cudaMemcpyAsync"),
        event("cudaStreamSynchronize", "cuda_runtime", 1100, 300),
        event("aten::item", "cpu_op", 1090, 320),
        event("aten::_local_scalar_dense", "cpu_op", 1095, 310),
        event("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation",
           1500, 200),
        {"ph": "i", "name": "an instant event", "ts": 5},  # ignored: not a complete event
    ]
    return {"traceEvents": ev}
