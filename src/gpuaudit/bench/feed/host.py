"""The host side of feeding GPUs: memory bandwidth (STREAM copy and triad, per NUMA node and
all nodes together) and JPEG decode + augment throughput on one core and on all cores (PIL,
and torchvision.io where installed), plus GPU decode (nvJPEG through torchvision) where
there is a GPU. See stream.py and jpeg.py for the methods."""

from __future__ import annotations

import math
from collections.abc import Iterator

import psutil

from gpuaudit.bench.context import BenchContext, Profile
from gpuaudit.bench.feed import jpeg, stream
from gpuaudit.bench.feed.rates import per_second, window_rates
from gpuaudit.bench.stats import MIN_SAMPLES, measure, reason_of, skipped
from gpuaudit.hw.cpus import last_level_cache_bytes, numa_cpus
from gpuaudit.hw.torch_env import import_torch, why_no_cuda
from gpuaudit.model import Measurement, Params

SUITE = "host"
GIB = 1 << 30
WINDOW_S = 0.25  # the CPU decode's spread: images/s in windows of this width
STREAM_NOTE = ("STREAM counting: copy 2 arrays, triad 3 (reads + writes; write-allocate "
               "traffic not counted)")


def run(ctx: BenchContext) -> Iterator[Measurement]:
    yield from memory(ctx)
    yield from decode(ctx)


def prepare(ctx: BenchContext) -> None:
    """The test JPEGs, made ahead (the runner calls this while torch loads)."""
    if jpeg.available("pil") is None:
        jpeg.test_jpegs(_image_count(ctx))


def _image_count(ctx: BenchContext) -> int:
    return ctx.pick(32, 64, 128)


def memory(ctx: BenchContext) -> Iterator[Measurement]:
    if stream.numpy_or_none() is None:
        for kernel in stream.KERNELS:
            yield skipped(SUITE, f"stream_{kernel}", "GB/s",
                          "numpy not installed (pip install 'gpuaudit[feed]')")
        return
    nodes = numa_cpus()
    size = stream.working_set_bytes(last_level_cache_bytes(), ctx.pick(1, 2, 4) * GIB,
                                    psutil.virtual_memory().available)
    iters, warmup = ctx.pick(5, 10, 20), ctx.pick(1, 2, 3)
    groups: list[tuple[str | int, list[int]]] = list(nodes.items())
    if len(nodes) > 1:
        groups.append(("all", [c for cpus in nodes.values() for c in cpus]))
    for node, cpus in groups:
        ctx.step(f"host memory: STREAM on NUMA node {node}, {len(cpus)} threads")
        results = stream.run_stream(cpus, size, iters, warmup)
        for kernel, (rates, ok, elements) in results.items():
            params: Params = {"numa_node": str(node), "threads": len(cpus),
                              "buffer_bytes": 3 * 8 * elements * len(cpus),
                              "bytes_counted": "STREAM", "device": "cpu"}
            yield measure(SUITE, f"stream_{kernel}", "GB/s", rates, warmup=warmup,
                          params=params, verified=ok, notes=(STREAM_NOTE,))


def decode(ctx: BenchContext) -> Iterator[Measurement]:
    cpus = sorted(c for group in numa_cpus().values() for c in group)
    # quick: the fewest whole windows whose spread `measure` does not call a rough guide
    seconds = ctx.pick(MIN_SAMPLES * WINDOW_S, 4.0, 10.0)
    images = None
    # quick: the one decoder a loader would use here (torchvision.io where installed, the
    # faster; else PIL, what torchvision's ImageFolder uses); the others from standard on.
    quick_one = next((lib for lib in reversed(jpeg.LIBRARIES) if jpeg.available(lib) is None),
                     None) if ctx.profile is Profile.QUICK else None
    for library in jpeg.LIBRARIES:
        why = jpeg.available(library)
        if why is None and quick_one is not None and library != quick_one:
            why = (f"the quick profile decodes with {quick_one} only (what a loader here "
                   "would use); --profile standard measures every decoder")
        if why is None and images is None:
            why = jpeg.available("pil")  # the test images are made with PIL
        if why is not None:
            for where in ("1core", "all"):
                yield skipped(SUITE, f"jpeg_{library}_{where}", "images/s", why)
            continue
        if images is None:
            ctx.step("host: making test JPEGs")
            images = jpeg.test_jpegs(_image_count(ctx))
        size = sum(map(len, images)) // len(images)
        for where, chosen in (("1core", cpus[:1]), ("all", cpus)):
            if where == "1core" and ctx.profile is Profile.QUICK:
                # what a loader gets is the all-cores rate (its per-core share is kept beside
                # it); one core alone says how that scales, and takes 1.3 s more
                yield skipped(SUITE, f"jpeg_{library}_1core", "images/s",
                              "the quick profile decodes on all cores only (their per-core "
                              "share is beside that figure); --profile standard adds one core")
                continue
            ctx.step(f"host: JPEG decode + augment with {library} on "
                     f"{'one core' if len(chosen) == 1 else f'{len(chosen)} cores'}")
            name = f"jpeg_{library}_{where}"
            params: Params = {"library": library, "cores": "1" if where == "1core" else "all",
                              "threads": len(chosen), "jpeg_bytes": size,
                              "image": f"{jpeg.WIDTH}x{jpeg.HEIGHT} q{jpeg.QUALITY}",
                              "augment": f"RandomResizedCrop {jpeg.CROP}, flip, normalise"}
            try:
                start, done = jpeg.run_workers(library, images, seconds, chosen,
                                               timeout_s=ctx.timeout_s)
            except Exception as exc:
                yield skipped(SUITE, name, "images/s", reason_of(exc), params=params)
                continue
            rate = per_second(len(done), done[-1] - start)
            m = measure(SUITE, name, "images/s", window_rates(done, start, WINDOW_S) or [rate],
                        warmup=1, params={**params, "per_core": round(rate / len(chosen), 1)})
            yield m.model_copy(update={"value": rate, "statistic": "images / wall time"})
    yield from gpu_decode(ctx, images)


def gpu_decode(ctx: BenchContext, images: list[bytes] | None) -> Iterator[Measurement]:
    name = "jpeg_nvjpeg"
    torch = import_torch()
    if not ctx.on_gpu or torch is None:
        yield skipped(SUITE, name, "images/s", why_no_cuda() if torch else
                      "torch not installed")
        return
    why = jpeg.available("torchvision") or (None if images else "no test JPEGs (needs PIL)")
    if why or images is None:
        yield skipped(SUITE, name, "images/s", why or "no test JPEGs")
        return
    device, index = ctx.devices[0]
    ctx.step(f"host: nvJPEG decode on GPU {index}")
    params: Params = {"library": "torchvision.io.decode_jpeg(device='cuda')", "batch": 64,
                      "jpeg_bytes": sum(map(len, images)) // len(images),
                      "image": f"{jpeg.WIDTH}x{jpeg.HEIGHT} q{jpeg.QUALITY}",
                      "augment": "none (decode only)"}
    try:
        # a sample per batch of 64, ~300 a second on an H200: quick's one second is plenty
        rates, agree, count = jpeg.nvjpeg(images, ctx.pick(1.0, 5.0, 10.0),
                                          device.cuda_index)
    except Exception as exc:
        yield skipped(SUITE, name, "images/s", reason_of(exc), gpu_index=index, params=params)
        return
    # identical decodes have an infinite PSNR, which no record holds: said in words
    psnr = round(agree.psnr_db, 2) if math.isfinite(agree.psnr_db) else "identical"
    check = {"vs_cpu_psnr_db": psnr,
             "vs_cpu_mean_abs_levels": round(agree.mean_abs_levels, 3),
             "vs_cpu_worst_tile_abs_levels": round(agree.worst_tile_abs_levels, 2),
             "check": f"GPU decode of one image against the CPU's: PSNR ≥ "
                      f"{jpeg.AGREE_PSNR_DB:g} dB and no 16×16 tile more than "
                      f"{jpeg.AGREE_TILE_LEVELS:g} levels off (decoders differ in rounding and "
                      f"chroma upsampling; corrupt data is far off)"}
    yield measure(SUITE, name, "images/s", rates, warmup=1, gpu_index=index,
                  params={**params, "images": count, **check}, verified=agree.ok)
