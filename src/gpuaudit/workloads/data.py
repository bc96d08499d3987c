"""Data loading: can the CPUs feed the GPU? Synthetic JPEGs decoded and augmented the way
torchvision's ImageNet reference recipe does it (decode, RandomResizedCrop, horizontal flip,
to float, normalize), through a torch DataLoader, against num_workers and pin_memory; the best
rate is set against the training rate measured for the image model in the same run.

The pipeline is written with Pillow and numpy (the same operations torchvision's transforms
call), so it runs where torchvision is not installed and measures the same work everywhere.
"""

from __future__ import annotations

import io
import math
import os
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.stats import measure, skipped
from gpuaudit.model import Measurement
from gpuaudit.workloads.plan import Target, opt_float, opt_int, opt_list

SUITE = "train"
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def random_resized_crop_box(width: int, height: int, rng: random.Random,
                            scale: tuple[float, float] = (0.08, 1.0),
                            ratio: tuple[float, float] = (3 / 4, 4 / 3)
                            ) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) of torchvision's RandomResizedCrop: up to 10 tries at a
    random area fraction and log-uniform aspect ratio, else a centred crop at the nearest
    allowed ratio."""
    area = width * height
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = rng.randint(0, height - h)
            left = rng.randint(0, width - w)
            return left, top, left + w, top + h
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, round(width / ratio[0])
    elif in_ratio > ratio[1]:
        h, w = height, round(height * ratio[1])
    else:
        w, h = width, height
    top, left = (height - h) // 2, (width - w) // 2
    return left, top, left + w, top + h


def synthetic_jpegs(count: int, width: int, height: int, seed: int = 0,
                    quality: int = 90) -> list[bytes]:
    """JPEGs that compress like photographs (smooth shapes plus grain), not like noise or
    flat colour: both would make decoding unrealistically slow or fast."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        coarse = rng.integers(0, 256, (height // 24 + 2, width // 24 + 2, 3), dtype=np.uint8)
        img = Image.fromarray(coarse).resize((width, height), Image.BICUBIC)
        arr = np.asarray(img, dtype=np.int16) + rng.normal(0, 10, (height, width, 3))
        buf = io.BytesIO()
        Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(buf, "JPEG",
                                                                    quality=quality)
        out.append(buf.getvalue())
    return out


class JpegDataset:
    """Map-style dataset over `blobs`, repeated to `length` items: (CHW float32, label)."""

    def __init__(self, blobs: Sequence[bytes], length: int, crop: int, seed: int = 0) -> None:
        self.blobs, self.length, self.crop, self.seed = list(blobs), length, crop, seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[Any, int]:
        import numpy as np
        from PIL import Image

        rng = random.Random(self.seed * 1_000_003 + index)
        img = Image.open(io.BytesIO(self.blobs[index % len(self.blobs)])).convert("RGB")
        box = random_resized_crop_box(img.width, img.height, rng)
        img = img.resize((self.crop, self.crop), Image.BILINEAR, box=box)
        if rng.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        arr = np.asarray(img, dtype=np.float32) / 255.0
        arr = (arr - np.asarray(MEAN, np.float32)) / np.asarray(STD, np.float32)
        return np.ascontiguousarray(arr.transpose(2, 0, 1)), index % 1000


@dataclass(frozen=True)
class LoaderRate:
    workers: int
    pin_memory: bool
    samples_per_s: list[float]  # one per timing window


def loader_rate(torch: Any, dataset: JpegDataset, device: Any, *, batch: int, workers: int,
                pin: bool, seconds: float, windows: int = 5) -> LoaderRate:
    """Samples per second delivered to `device` (batches copied there, non-blocking when
    pinned), after every worker has produced its first batch."""
    from torch.utils.data import DataLoader

    loader = DataLoader(dataset, batch_size=batch, num_workers=workers, pin_memory=pin,
                        drop_last=True, prefetch_factor=4 if workers else None,
                        persistent_workers=False)
    it = iter(loader)
    try:
        for _ in range(max(1, workers)):
            next(it)
        stamps = [time.perf_counter()]
        end = stamps[0] + seconds
        while time.perf_counter() < end or len(stamps) < 2 * windows + 1:
            x, _y = next(it)
            x.to(device, non_blocking=pin)
            stamps.append(time.perf_counter())
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    finally:
        del it
    per = max(1, (len(stamps) - 1) // windows)
    rates = [batch * per / (stamps[i + per] - stamps[i])
             for i in range(0, len(stamps) - per, per)][:windows]
    return LoaderRate(workers, pin, rates)


def worker_counts(cores: int, limit: int | None = None) -> list[int]:
    """0 (load in the main process), then powers of two up to the cores, and the cores."""
    top = min(cores, limit) if limit is not None else cores
    counts = [0] + [2**i for i in range(16) if 2**i <= top]
    if top not in counts:
        counts.append(top)
    return counts


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def keeps_up(loader_rate: float, train_rate: float | None) -> bool | None:
    return None if not train_rate else loader_rate >= train_rate


def workers_needed(best_rate: float, best_workers: int, train_rate: float) -> int | None:
    """Workers to match `train_rate` if each added the best run's rate per worker (an
    optimistic bound: it needs that many free cores)."""
    if best_workers < 1 or best_rate <= 0:
        return None
    return math.ceil(train_rate / (best_rate / best_workers))


def run_data(ctx: BenchContext, tgt: Target, *, train_rate: float | None
             ) -> Iterator[Measurement]:
    import importlib.util

    import torch

    if importlib.util.find_spec("PIL") is None or importlib.util.find_spec("numpy") is None:
        yield skipped(SUITE, "data/jpeg/best", "samples/s",
                      "Pillow and numpy are needed (pip install 'gpuaudit[torch]')",
                      gpu_index=tgt.gpu_index)
        return
    on_gpu = tgt.capability is not None
    size = (500, 375) if on_gpu else (64, 48)  # ImageNet's typical photo; tiny on CPU
    crop = 224 if on_gpu else 32
    batch = opt_int(ctx, "data_batch", 64 if on_gpu else 8)
    seconds = opt_float(ctx, "data_seconds", ctx.pick(1.0, 2.0, 4.0) if on_gpu else 0.3)
    cores = cpu_cores()
    limit = opt_list(ctx, "workers")
    counts = [int(w) for w in limit] if limit else worker_counts(cores)
    ctx.step("data loading: making synthetic JPEGs")
    blobs = synthetic_jpegs(64 if on_gpu else 8, *size)
    ds = JpegDataset(blobs, length=10**7, crop=crop)
    base = {"pipeline": "jpeg decode + RandomResizedCrop + flip + normalize (float32)",
            "image_w": size[0], "image_h": size[1], "crop": crop, "batch": batch,
            "cpu_cores": cores, "device": tgt.label,
            "jpeg_kb_mean": round(sum(map(len, blobs)) / len(blobs) / 1e3, 1)}
    best: LoaderRate | None = None

    def one(workers: int, pin: bool) -> Iterator[Measurement]:
        nonlocal best
        name = f"data/jpeg/w{workers}" + ("/pinned" if pin else "")
        ctx.step(f"data loading: {workers} workers" + (", pinned" if pin else ""))
        try:
            r = loader_rate(torch, ds, tgt.device, batch=batch, workers=workers, pin=pin,
                            seconds=seconds)
        except (OSError, RuntimeError) as exc:  # no shared memory for workers, …
            from gpuaudit.bench.stats import reason_of

            yield skipped(SUITE, name, "samples/s", reason_of(exc), gpu_index=tgt.gpu_index,
                          params={**base, "workers": workers, "pin_memory": pin})
            return
        m = measure(SUITE, name, "samples/s", r.samples_per_s, warmup=max(1, workers),
                    gpu_index=tgt.gpu_index,
                    params={**base, "workers": workers, "pin_memory": pin})
        if best is None or (m.value or 0) > _median(best.samples_per_s):
            best = r
        yield m

    for w in counts:
        yield from one(w, on_gpu)
    if on_gpu and best is not None:
        yield from one(best.workers, False)  # the same without pinned memory
    elif not on_gpu:
        yield skipped(SUITE, "data/jpeg/pinned", "samples/s", "pin_memory needs a CUDA device",
                      params=base)
    if best is None:
        return
    rate = _median(best.samples_per_s)
    ok = keeps_up(rate, train_rate)
    need = workers_needed(rate, best.workers, train_rate) if train_rate and not ok else None
    notes = [] if train_rate else ["no image model trained in this run: not compared"]
    yield measure(SUITE, "data/jpeg/best", "samples/s", best.samples_per_s,
                  warmup=max(1, best.workers), gpu_index=tgt.gpu_index, notes=notes,
                  params={**base, "workers": best.workers, "pin_memory": best.pin_memory,
                          "train_rate": round(train_rate, 1) if train_rate else None,
                          "keeps_up": ok, "workers_needed": need})


def _median(xs: Sequence[float]) -> float:
    from gpuaudit.percentile import percentile

    return percentile(xs, 50)
